"""``rag bench``'s pieces without a daemon: the fixture's lines, the names of relevant records, the shipped fixture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memories.cli.rag import MAX_FIXTURE_BYTES, fixture_questions
from memories.errors import MemoriesError
from memories.rag.vault_index import VaultIndex
from memories.worker_protocol import IndexRecord
from ops.corpus import CORPUS, load_queries, note_paths


def _record(record_id: str, title: str, source: str | None) -> IndexRecord:
    return IndexRecord(id=record_id, revision=1, kind="card", title=title, body="text", source=source)


def test_a_name_is_a_record_id_else_a_source_path_else_a_title() -> None:
    index = VaultIndex("v")
    index.apply(
        [
            _record("r1", "Threads", "en/threads.md"),
            _record("r2", "Threads", "zh/threads.md"),
            _record("r3", "r1", None),  # a title that is another record's id: the id wins
            _record("r4", "en/threads.md", "other.md"),  # a title that is another record's source: the source wins
        ],
        [],
    )
    assert index.named(["r1", "zh/threads.md", "en/threads.md", "Threads", "nothing", "other.md"]) == [
        ["r1"],
        ["r2"],
        ["r1"],
        ["r1", "r2"],
        [],
        ["r4"],
    ]


def test_fixture_lines_are_checked_and_named(tmp_path: Path) -> None:
    path = tmp_path / "f.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"query": "git rebase", "relevant": ["a.md", "a.md", "b"], "id": 7}\n\n'
        + '{"query": "所有權", "relevant": ["r1"]}\n'.encode()
    )
    questions = fixture_questions(str(path))
    assert [(q.line, q.query, q.relevant) for q in questions] == [
        (1, "git rebase", ["a.md", "b"]),
        (3, "所有權", ["r1"]),
    ]
    for line, problem in [
        ('["a"]', "not a JSON object"),
        ('{"query": "", "relevant": ["a"]}', '"query" must be a non-empty string'),
        ('{"query": "q", "relevant": []}', '"relevant" must be a non-empty list'),
        ('{"query": "q", "relevant": ["a", 3]}', 'each "relevant" entry must be a non-empty string'),
        ('{"query": "q"', "not JSON"),
    ]:
        path.write_text('{"query": "q", "relevant": ["a"]}\n' + line + "\n")
        with pytest.raises(MemoriesError) as caught:
            fixture_questions(str(path))
        assert caught.value.code == "invalid_fixture" and caught.value.details == {"line": 2}
        assert f"line 2: {problem}" in caught.value.message
    path.write_text("\n\n")
    with pytest.raises(MemoriesError, match="holds no question"):
        fixture_questions(str(path))


def test_a_fixture_that_is_a_device_a_pipe_or_too_large_is_refused_without_reading_it(tmp_path: Path) -> None:
    """``rag bench VAULT /dev/zero`` read until the kernel's out-of-memory killer stopped it."""
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # opening it for reading would block until a writer came
    large = tmp_path / "large.jsonl"
    large.write_bytes(b" " * (MAX_FIXTURE_BYTES + 1))
    for path, problem in [("/dev/zero", "is not a regular file"), (str(pipe), "is not a regular file")]:
        with pytest.raises(MemoriesError, match=problem) as caught:
            fixture_questions(path)
        assert caught.value.code == "invalid_argument"
    with pytest.raises(MemoriesError, match="is larger than 16,777,216 bytes"):
        fixture_questions(str(large))


def test_the_shipped_fixture_is_the_corpus_checks_by_source_path() -> None:
    questions = fixture_questions(str(CORPUS / "bench.jsonl"))
    checks = load_queries()
    assert [(q.query, q.relevant) for q in questions] == [
        (check.query, [check.expected, *check.also_relevant]) for check in checks
    ]
    # Every entry is a note's path, which ingest makes its source: each names one record.
    assert {name for question in questions for name in question.relevant} <= set(note_paths())

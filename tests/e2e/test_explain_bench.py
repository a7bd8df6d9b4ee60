"""Issue 24 end to end with the tiny model: ``rag bench`` on a person's own questions, text and ``--json``, one test
per mode, on one shared daemon and vault (the figures mean nothing on the tiny model; the code paths do)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize, with_hooks
from tests.fixtures.tiny_model import TinyModel

pytest_plugins = ["tests.fixtures.tiny_model"]

NOTES = {
    "ownership.md": "# Ownership\n\nRust ownership rules: each value has an owner; dropped when the owner leaves.",
    "borrowing.md": "# Borrowing\n\nReferences borrow a value without taking ownership; the borrow checker checks.",
    "threads.md": "# Threads\n\nSpawn threads with thread::spawn and wait for them with join on the JoinHandle.",
    "subtree.md": "# Git subtree\n\nSplit a subdirectory with git subtree and push changes back upstream.",
    "isolation.md": "# 交易隔離\n\n交易隔離等級：讀已提交、可重複讀、可序列化；幻讀。",
    "forwarding.md": "# SSH 端口转发\n\n本地转发、远程转发和动态转发，ssh -D 建立 SOCKS 代理。",
}


@dataclass
class Lab:
    """The shared daemon with the notes ingested and embedded, and where the test files go."""

    home: HomeDir
    root: Path
    ids: dict[str, str]
    """Source path → record id."""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, tiny_model: TinyModel) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("explain-bench")
    home = HomeDir(root / "home")
    home.path.mkdir(mode=0o700)
    home.config.write_text(FAST_KDF + "[rag]\nlocal_threads = 1\n")
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    notes = root / "notes"
    notes.mkdir()
    for name, body in NOTES.items():
        (notes / name).write_text(body + "\n", encoding="utf-8")
    try:
        initialize(home)
        home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
        results = home.ok("rag", "ingest", "notes", str(notes))["results"]
        home.ok("rag", "index", "notes")
        yield Lab(home, root, {result["source"]: result["id"] for result in results})
    finally:
        home.stop()


def _fixture(lab: Lab, name: str, rows: list[object]) -> str:
    path = lab.root / name
    lines = [row if isinstance(row, str) else json.dumps(row, ensure_ascii=False) for row in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_bench_scores_each_mode_over_distinct_records(lab: Lab, mode: str) -> None:
    fixture = _fixture(
        lab,
        f"bench-{mode}.jsonl",
        [
            {"query": "Rust ownership rules each value has an owner", "relevant": ["ownership.md"]},  # source path
            {"query": "Split a subdirectory with git subtree", "relevant": ["Git subtree"]},  # title
            "",  # blank lines are skipped
            {"query": "交易隔離 幻讀", "relevant": [lab.ids["isolation.md"]], "note": "ignored"},  # record id
            {"query": "zebra crossing", "relevant": ["threads.md"]},  # no chunk holds it: missed
        ],
    )
    report = lab.home.ok("rag", "bench", "notes", fixture, "--modes", mode)
    assert report["questions"] == 4 and report["learned_rerank"] is False
    assert list(report["modes"]) == [mode]
    figures = report["modes"][mode]
    assert set(figures) == {"ndcg@10", "recall@10", "mrr@10", "missed"}
    assert all(0 <= figures[metric] <= 1 for metric in ("ndcg@10", "recall@10", "mrr@10"))
    if mode == "bm25":  # the tiny model ranks at random; BM25 finds the three notes that hold the words first
        assert figures == {"ndcg@10": 0.75, "recall@10": 0.75, "mrr@10": 0.75, "missed": ["zebra crossing"]}
    text = lab.home.run("rag", "bench", "notes", fixture, "--modes", mode, json_output=False)
    assert text.code == 0 and "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "4 questions, without the learned reranker"
    assert lines[1].split() == ["mode", "nDCG@10", "Recall@10", "MRR@10", "missed"]
    assert lines[2].split()[0] == mode and lines[2].split()[1] == f"{figures['ndcg@10']:.3f}"
    assert ("zebra crossing" in text.stdout) == ("zebra crossing" in figures["missed"])


def test_bench_refuses_a_bad_fixture_naming_the_line(lab: Lab, tmp_path: Path) -> None:
    home = lab.home
    bad_json = _fixture(lab, "bad-json.jsonl", [{"query": "a", "relevant": ["ownership.md"]}, "{not json"])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", bad_json)
    assert error["details"] == {"line": 2} and "line 2: not JSON" in error["message"]
    no_list = _fixture(lab, "no-list.jsonl", [{"query": "a", "relevant": "ownership.md"}])
    assert home.fails("invalid_fixture", "rag", "bench", "notes", no_list)["details"] == {"line": 1}
    unknown = _fixture(lab, "unknown.jsonl", ["", {"query": "a", "relevant": ["ownership.md", "nothing.md"]}])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", unknown, "--modes", "bm25")
    assert error["details"] == {"line": 2, "entry": "nothing.md"} and "names no searchable record" in error["message"]
    added = home.ok("memory", "add", "notes", "--kind", "card", "--title", "Threads", "--body", "Also titled Threads.")
    ambiguous = _fixture(lab, "ambiguous.jsonl", [{"query": "threads", "relevant": ["Threads"]}])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", ambiguous, "--modes", "bm25")
    assert error["details"]["line"] == 1 and len(error["details"]["records"]) == 2
    # The new note has no vector yet: vector and hybrid are refused with the count, bm25 still runs.
    good = _fixture(lab, "good.jsonl", [{"query": "threads", "relevant": ["threads.md"]}])
    error = home.fails("vectors_missing", "rag", "bench", "notes", good, "--modes", "bm25,hybrid")
    assert error["details"]["missing"] == 1 and "rag index notes" in error["message"]
    assert list(home.ok("rag", "bench", "notes", good, "--modes", "bm25")["modes"]) == ["bm25"]
    usage = home.run("rag", "bench", "notes", good, "--modes", "bm25,fuzzy")
    assert usage.code == 2 and "'fuzzy' is not one of bm25, vector, hybrid" in usage.stderr
    home.ok("memory", "delete", "notes", added["id"])

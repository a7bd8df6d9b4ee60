"""``ops/bench/scale.py``'s pieces at a tiny size, without a daemon: each copy of a note gets a title of its own,
and the vectors it seals are keyed exactly as the index worker keys its chunks (else the daemon would find them
missing and embed on demand, and the benchmark would measure that)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from memories import worker_protocol as w
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.rag.notes import note_title, parse_note
from memories.rag.pipeline import VaultCache
from ops.bench.scale import input_keys, varied, write_copies
from ops.corpus import CORPUS, note_paths


def test_every_copy_of_every_note_has_a_title_of_its_own() -> None:
    for path in note_paths():
        text = (CORPUS / path).read_bytes().decode("utf-8-sig")
        titles = {note_title(varied(text, copy, PurePosixPath(path).name)) for copy in (0, 1)}
        assert len(titles) == 2, path


def test_copies_stop_below_the_chunk_target(tmp_path: Path) -> None:
    notes, chunks = write_copies(CORPUS, tmp_path, 400)
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert len(files) == notes > 0
    assert 0 < chunks <= 400


def test_the_bench_keys_each_chunk_as_the_index_worker_does() -> None:
    space = w.VectorSpace(key="bench", recipe=LOCAL_RECIPE)
    records = []
    for number, path in enumerate(note_paths()[:12]):
        name = PurePosixPath(path).name
        body = varied((CORPUS / path).read_bytes().decode("utf-8-sig"), 2, name)
        title = parse_note(body).title or name
        records.append(w.IndexRecord(id=f"r{number}", revision=1, kind="card", title=title, body=body, source=path))
    cache = VaultCache("v")
    cache.apply(records, [])
    worker: dict[str, list[str]] = {}
    for row, key in cache.vectors.input_keys(space):
        worker.setdefault(row.record_id, []).append(key)
    assert {record.id: input_keys(record, LOCAL_RECIPE) for record in records} == {
        record_id: list(dict.fromkeys(keys)) for record_id, keys in worker.items()
    }

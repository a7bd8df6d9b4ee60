"""A vault cache taken as a snapshot and restored ranks exactly as the cache built from the records (issue 28,
acceptance 2): the same hits, scores and explanations for the sample corpus's questions in every match mode, and
the same again after an edit applied to both (row ids and the vocabulary go on from where they were)."""

from __future__ import annotations

import json

import msgspec

from memories import worker_protocol as w
from memories.protocol import MatchMode
from memories.rag import snapshots
from memories.rag.pipeline import VaultCache
from ops.corpus import CORPUS, note_paths

NOTES = 40
MATCH_MODES: tuple[MatchMode, ...] = ("any", "all", "phrase")


def _records() -> list[w.IndexRecord]:
    records = []
    for number, path in enumerate(note_paths()[:: len(note_paths()) // NOTES][:NOTES]):
        body = (CORPUS / path).read_text(encoding="utf-8").removeprefix("\ufeff")
        records.append(w.IndexRecord(id=f"r{number}", revision=1, kind="card", title=path, body=body, source=path))
    return records


def _queries() -> list[str]:
    lines = (CORPUS / "bench.jsonl").read_text(encoding="utf-8").splitlines()
    return [*[json.loads(line)["query"] for line in lines if line.strip()][:30], "所有权", "git", "的"]


def _query(query: str, match_mode: MatchMode, limit: int) -> w.IndexQuery:
    return w.IndexQuery(
        vault="v",
        epoch=1,
        query=query,
        mode="bm25",
        match_mode=match_mode,
        limit=limit,
        cards_only=False,
        no_rerank=False,
    )


def _answers(cache: VaultCache) -> list[object]:
    found: list[object] = []
    for query in _queries():
        for match_mode in MATCH_MODES:
            found.append(msgspec.to_builtins(cache.query(_query(query, match_mode, 20))))
        explained = msgspec.structs.replace(_query(query, "any", 5), explain=w.Explain(), highlight=True)
        found.append(msgspec.to_builtins(cache.query(explained)))
    return found


def test_a_restored_cache_ranks_as_the_built_one() -> None:
    built = VaultCache("v")
    records = _records()
    built.apply(records, [])
    built.stamp(1)
    restored = snapshots.restore("v", snapshots.take(built))
    assert isinstance(restored, VaultCache)
    restored.stamp(1)
    assert restored.index.have() == built.index.have() and restored.index.stats() == built.index.stats()
    assert _answers(restored) == _answers(built)

    edit = msgspec.structs.replace(records[0], revision=2, body=records[0].body + "\n\nzebracorn 新詞彙 appended")
    for cache in (built, restored):
        cache.apply([edit], [records[1].id])
        cache.stamp(2)
    assert [row.rowid for row in restored.index.rows()] == [row.rowid for row in built.index.rows()]
    assert _answers(restored) == _answers(built)


def test_a_snapshot_of_another_version_or_damaged_bytes_is_refused() -> None:
    cache = VaultCache("v")
    cache.apply(_records()[:2], [])
    data = snapshots.take(cache)
    assert snapshots.restore("v", data[: len(data) // 2]) == "the snapshot does not decode"
    old = msgspec.msgpack.encode(["0 an older release", None, []])
    assert "another analysis version" in str(snapshots.restore("v", old))

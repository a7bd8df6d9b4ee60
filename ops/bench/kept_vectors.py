"""Vectors kept sealed in the home, and the background index (issue 19): what they cost.

Usage::

    python -m ops.bench.kept_vectors storage [--inputs 1000 10000] [--json]
    python -m ops.bench.kept_vectors wait --model-dir DIR [--notes 30] [--min-bytes 0] [--max-bytes 8192] [--json]

- ``storage``, in this process with the product's own code (no model: random unit vectors of 768 floats):
  (a) what sealed vectors add to the first search after unlock, step by step: unsealing the vault's rows in the
  store thread (:meth:`memories.vault.vectors.VectorRows.load`), the transfer to the index worker (the
  :class:`~memories.worker_protocol.IndexLoadVectors` frame encoded and decoded, as the pipe carries it) and the
  worker's load into its matrix (:func:`memories.rag.kept.load`); beside it the BM25 build of the same records
  (:meth:`memories.rag.pipeline.VaultCache.apply`), which the first search pays with or without vectors. Records
  hold 10 chunks each, as a note of about 7,000 characters does. (c) the database's growth per 1,000 vectors (its
  pages after a checkpoint, with the rows against without them).
- ``wait``, through a daemon with a model (the real one: ``[rag] local_model_dir``): (b) while ``--notes`` notes
  of the sample corpus (evenly spread by size over the notes of ``--min-bytes`` to ``--max-bytes``: short notes
  make short chunks, long notes chunks of the chunker's full size) are embedded, vector searches one after
  another (their own embedding of the query included), each timed from the request to its reply, against the same
  searches once all is embedded: the difference is what a query waits for the batch in flight. The embedding is
  the background index the ingest starts (``auto_index = "local"``: batches of at most
  :data:`~memories.daemon.index.backends.BACKGROUND_BATCH_TOKENS` padded tokens); the chunks it embeds per second are
  given too, so a run with that constant changed weighs the wait saved against the throughput lost.

Figures are for reading, never test assertions; the machine may be shared (the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from memories import worker_protocol as w
from memories.config import CryptoConfig
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.protocol import RagIngest, RagSearch, RagStatus
from memories.rag import kept
from memories.rag.pipeline import VaultCache
from memories.vault.record_store import RecordStore
from memories.vault.views import RecordVectors
from ops.bench.harness import BenchHome, percentiles
from ops.corpus import load_notes

SPACE = w.VectorSpace(key="bench-space", recipe=LOCAL_RECIPE)
CHUNKS_PER_RECORD = 10
DIMENSION = 768


def _record_body(number: int) -> str:
    """About 6,500 code points in :data:`CHUNKS_PER_RECORD` paragraphs (the chunker's overlap makes a few more
    chunks: :func:`_chunks_per_record`)."""
    paragraph = " ".join(f"word{k:03}n{number:05}" for k in range(50))
    return "\n\n".join(f"{paragraph} part{part}" for part in range(CHUNKS_PER_RECORD))


def _chunks_per_record() -> int:
    """How many chunks the index worker cuts one record of :func:`_record_body` into."""
    cache = VaultCache("count")
    cache.apply([w.IndexRecord(id="0" * 16, revision=1, kind="card", title="note 0", body=_record_body(0))], [])
    return sum(1 for _ in cache.index.rows())


def storage(inputs: int) -> dict[str, Any]:
    """(a) and (c) for about ``inputs`` vectors (see the module's docstring); seconds and bytes."""
    with tempfile.TemporaryDirectory(prefix="memories-kept-") as folder:
        records = RecordStore(Path(folder) / "memories.db")
        records.keys.init("benchmark passphrase", CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1))
        vault = records.vaults.create("notes", False)
        ids = [
            records.records.add(vault, "card", "general", f"note {n}", _record_body(n).encode(), {})[0]
            for n in range(max(1, inputs // _chunks_per_record()))
        ]
        texts = records.catalog.index_texts(vault, ids)
        cache = VaultCache(vault.id)
        index_records = [
            w.IndexRecord(id=t.id, revision=t.revision, kind=t.kind, title=t.title, body=t.body) for t in texts
        ]
        started = time.perf_counter()
        cache.apply(index_records, [])
        cache.stamp(1)
        bm25_seconds = time.perf_counter() - started
        by_record: dict[str, list[str]] = {}
        for row, key in cache.vectors.input_keys(SPACE):
            by_record.setdefault(row.record_id, []).append(key)
        rng = np.random.default_rng(7)
        sets = []
        for text in texts:
            keys = list(dict.fromkeys(by_record[text.id]))
            vectors = rng.standard_normal((len(keys), DIMENSION)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            sets.append(RecordVectors(text.id, text.revision, keys, vectors.tobytes(), {}, True))
        size_before = _database_bytes(records, Path(folder) / "memories.db")
        records.vectors.put(vault, SPACE.key, DIMENSION, sets)
        size_after = _database_bytes(records, Path(folder) / "memories.db")
        count = sum(len(s.keys) for s in sets)

        started = time.perf_counter()
        loaded = records.vectors.load(vault, SPACE.key)
        unseal_seconds = time.perf_counter() - started
        started = time.perf_counter()
        message = w.IndexLoadVectors(
            vault=vault.id, space=SPACE, dimension=DIMENSION, keys=loaded.keys, vectors=loaded.vectors
        )
        frame = msgspec.msgpack.encode(w.WorkerCall(id=1, body=message))
        received = msgspec.msgpack.decode(frame, type=w.WorkerCall).body
        transfer_seconds = time.perf_counter() - started
        assert isinstance(received, w.IndexLoadVectors)
        started = time.perf_counter()
        kept.load(cache.vectors, received)
        first = np.frombuffer(loaded.vectors[: DIMENSION * 4], dtype=np.float32)
        cache.vectors.store.search(SPACE.key, first, [loaded.keys[0]])  # the matrix is built at the first search
        matrix_seconds = time.perf_counter() - started
        records.close()
    return {
        "vectors": count,
        "unseal_s": round(unseal_seconds, 3),
        "transfer_s": round(transfer_seconds, 3),
        "matrix_s": round(matrix_seconds, 3),
        "vectors_total_s": round(unseal_seconds + transfer_seconds + matrix_seconds, 3),
        "bm25_build_s": round(bm25_seconds, 3),
        "frame_mib": round(len(frame) / 2**20, 1),
        "db_growth_per_1000_vectors_mib": round((size_after - size_before) / count * 1000 / 2**20, 3),
    }


def _database_bytes(records: RecordStore, path: Path) -> int:
    records.store.checkpoint()
    with sqlite3.connect(path) as db:
        pages, size = db.execute("PRAGMA page_count").fetchone()[0], db.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


def wait(model_dir: Path, notes: int, threads: int, sizes: tuple[int, int] = (0, 8192)) -> dict[str, Any]:
    """(b): vector searches while the vault is embedded (see the module's docstring), seconds and chunks per second."""
    config = f"[rag]\nlocal_model_dir = '{model_dir}'\nlocal_threads = {threads}\nauto_index = 'local'\n"
    queries = ["ownership rules", "ssh port forwarding", "git subtree", "資料庫 遷移", "線程 同步", "bash 陣列"]
    small = sorted(
        (note for note in load_notes() if sizes[0] <= len(note.body.encode()) <= sizes[1]), key=lambda n: len(n.body)
    )
    chosen = [small[round(k * (len(small) - 1) / max(notes - 1, 1))] for k in range(notes)]
    with tempfile.TemporaryDirectory(prefix="memories-wait-") as scratch, BenchHome(config) as home:
        folder = Path(scratch) / "notes"
        folder.mkdir()
        for number, note in enumerate(chosen):
            (folder / f"{number:03}.md").write_text(f"# {note.title}\n\n{note.body}", encoding="utf-8")
        home.cli("vault", "create", "notes")
        home.client.request(RagIngest(vault="notes", paths=[str(folder)]))
        started = time.perf_counter()
        during_s: list[float] = []
        while True:  # until the background job has embedded everything (it starts when the ingest ends)
            status = home.client.request(RagStatus(vault="notes")).result
            if status.indexing is None and status.missing == 0:
                break
            during_s.append(_search_seconds(home, queries[len(during_s) % len(queries)]))
        embedding_seconds = time.perf_counter() - started
        status = home.client.request(RagStatus(vault="notes")).result
        after = [_search_seconds(home, queries[n % len(queries)]) for n in range(max(12, len(during_s) // 4))]
    p50, p95 = percentiles(during_s) if during_s else (float("nan"), float("nan"))
    q50, q95 = percentiles(after)
    return {
        "notes": notes,
        "chunks": status.embedded,
        "missing": status.missing,
        "embedding_s": round(embedding_seconds, 1),
        "chunks_per_s": round(status.embedded / embedding_seconds, 2),
        "searches_during": len(during_s),
        "during_p50_s": round(p50, 3),
        "during_p95_s": round(p95, 3),
        "during_max_s": round(max(during_s), 3) if during_s else float("nan"),
        "after_p50_s": round(q50, 3),
        "after_p95_s": round(q95, 3),
        "load_average": os.getloadavg()[0],
    }


def _search_seconds(home: BenchHome, query: str) -> float:
    started = time.perf_counter()
    home.client.request(RagSearch(vault="notes", query=query, mode="vector", limit=10))
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    store = sub.add_parser("storage")
    store.add_argument("--inputs", type=int, nargs="+", default=[1000, 10000])
    store.add_argument("--json", action="store_true")
    waits = sub.add_parser("wait")
    waits.add_argument("--model-dir", type=Path, required=True)
    waits.add_argument("--notes", type=int, default=30)
    waits.add_argument("--threads", type=int, default=2)
    waits.add_argument("--min-bytes", type=int, default=0)
    waits.add_argument("--max-bytes", type=int, default=8192)
    waits.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.what == "storage":
        results = [storage(n) for n in args.inputs]
    else:
        results = [wait(args.model_dir, args.notes, args.threads, (args.min_bytes, args.max_bytes))]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    for row in results:
        print(", ".join(f"{key} {value}" for key, value in row.items()))
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()

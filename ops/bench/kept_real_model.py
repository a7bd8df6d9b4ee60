"""Vectors kept sealed in the home, with the real model (issue 19 acceptance 2): a vault of notes of the sample
corpus is indexed in budgeted rounds, with a lock and unlock between rounds (each round embeds only what the earlier
ones did not), then its ``vector`` and ``hybrid`` results for the corpus's search checks are recorded and compared
after ``lock`` + ``unlock``, a daemon restart + ``unlock``, and an eviction by two other vaults: the same results,
``embedding_batches`` and the embedding worker's steps unchanged. The first search after each is timed.

Usage::

    nice -n 10 python -m ops.bench.kept_real_model --model-dir DIR [--notes 160] [--budget 120] [--json]

The notes are the ``--notes`` smallest of the corpus (as ``rag ingest`` reads a folder of them). ``[rag]
auto_index = "off"`` so that only ``rag index`` embeds. Figures are for reading, never test assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from ops.bench.harness import PASSPHRASE, BenchHome, memories_executable
from ops.corpus import CORPUS, load_queries, note_paths

MODES = ("vector", "hybrid")


def _run(home: BenchHome, *args: str, stdin: str | None = None) -> tuple[int, Any]:
    """Exit status and JSON document of one command."""
    done = subprocess.run(
        [memories_executable(), *args, "--json"], env=home.env, input=stdin, text=True, capture_output=True
    )
    return done.returncode, json.loads(done.stdout)


def _results(home: BenchHome, queries: list[str]) -> dict[str, list[tuple[str, float]]]:
    found = {}
    for query in queries:
        for mode in MODES:
            hits = home.cli("rag", "search", "notes", query, "--mode", mode)["results"]
            found[f"{mode}:{query}"] = [(hit["chunk_hash"], round(hit["score"], 6)) for hit in hits]
    return found


def _batches(home: BenchHome) -> tuple[int, int]:
    status = home.cli("daemon", "status")
    worker = next(w for w in status["workers"] if w["name"] == "embedding")
    return status["embedding_batches"], worker["completed"].get("EmbedBatch", 0)


def _first_search(home: BenchHome, query: str) -> tuple[float, float]:
    """Seconds of the first hybrid search (the cache built, its sealed vectors loaded) and of the same again."""
    started = time.perf_counter()
    home.cli("rag", "search", "notes", query, "--mode", "hybrid")
    first = time.perf_counter() - started
    started = time.perf_counter()
    home.cli("rag", "search", "notes", query, "--mode", "hybrid")
    return first, time.perf_counter() - started


def run(model_dir: Path, notes: int, budget: float, extra: str) -> dict[str, Any]:
    paths = sorted(note_paths(), key=lambda path: (CORPUS / path).stat().st_size)[:notes]
    folder = Path(tempfile.mkdtemp(prefix="memories-notes-"))
    for path in paths:
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CORPUS / path, folder / path)
    queries = [query.query for query in load_queries()]
    config = f'[daemon]\njob_budget_seconds = {budget}\n[rag]\nlocal_model_dir = "{model_dir}"\n{extra}'
    figures: dict[str, Any] = {"notes": len(paths), "bytes": sum((folder / p).stat().st_size for p in paths)}
    unlock = ("unlock", "--passphrase-stdin")
    try:
        with BenchHome(config=config) as home:
            home.cli("vault", "create", "notes")
            ingested = home.cli("rag", "ingest", "notes", str(folder), "--recursive")
            figures["added"] = sum(1 for result in ingested["results"] if result["status"] == "added")
            rounds, done, started = [], 0, time.perf_counter()
            while True:  # budgeted rounds, each after a lock and unlock: only what is missing is embedded
                round_started = time.perf_counter()
                code, doc = _run(home, "rag", "index", "notes")
                report = doc if code == 0 else doc["error"]["details"]
                rounds.append({**report, "seconds": round(time.perf_counter() - round_started, 1), "code": code})
                assert report["reused"] == done, (report, done)
                done += report["embedded_now"]
                if code == 0:
                    break
                home.cli("lock")
                home.cli(*unlock, stdin=PASSPHRASE + "\n")
            figures["index_rounds"] = rounds
            figures["index_seconds"] = round(time.perf_counter() - started, 1)
            figures["embedded"] = done
            figures["chunks"] = home.cli("rag", "status", "notes")["chunks"]
            before, batches = _results(home, queries), _batches(home)
            checks: dict[str, Any] = {}

            home.cli("lock")
            home.cli(*unlock, stdin=PASSPHRASE + "\n")
            first = _first_search(home, queries[0])
            checks["lock_unlock"] = {"same": _results(home, queries) == before, "batches": _batches(home) == batches}
            checks["lock_unlock"]["first_search_s"], checks["lock_unlock"]["again_s"] = first

            home.cli("daemon", "stop")
            home.cli("daemon", "start")
            home.cli(*unlock, stdin=PASSPHRASE + "\n")
            first = _first_search(home, queries[0])
            checks["restart"] = {"same": _results(home, queries) == before, "batches": _batches(home) == (0, 0)}
            checks["restart"]["first_search_s"], checks["restart"]["again_s"] = first

            for other in ("second", "third"):
                home.cli("vault", "create", other)
                home.cli("memory", "add", other, "--title", "t", "--body", "another vault's note")
                home.cli("rag", "search", other, "note", "--mode", "bm25")
            cache = home.cli("rag", "status", "notes")["cache"]
            first = _first_search(home, queries[0])
            checks["eviction"] = {"cache_before": cache, "same": _results(home, queries) == before}
            checks["eviction"]["batches"] = _batches(home) == (0, 0)
            checks["eviction"]["first_search_s"], checks["eviction"]["again_s"] = first
            status = home.cli("rag", "status", "notes")
            checks["status"] = {key: status.get(key) for key in ("embedded", "missing", "vectors", "warnings")}
            figures["checks"] = checks
            figures["database_bytes"] = (home.path / "memories.db").stat().st_size
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    figures["loadavg"] = os.getloadavg()
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, required=True)
    parser.add_argument("--notes", type=int, default=160)
    parser.add_argument("--budget", type=float, default=120.0, help="[daemon] job_budget_seconds")
    parser.add_argument("--extra-rag", default='auto_index = "off"\n', help="more [rag] lines")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    figures = run(args.model_dir, args.notes, args.budget, args.extra_rag)
    print(json.dumps(figures, indent=None if args.json else 2, ensure_ascii=False))


if __name__ == "__main__":
    main()

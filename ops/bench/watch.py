"""Watched folders and search filters (issue 20, acceptance 4): figures for the note, never test assertions.

Run from the repository root::

    .venv/bin/python -m ops.bench.watch                     # all three, a table
    .venv/bin/python -m ops.bench.watch --only filters --json

- ``latency``: a daemon watching a folder of 5,000 notes; a note is saved (written whole, as an editor does) with a
  word no note holds, and a client in this process searches for it (BM25, through the socket, every 20 ms) until it
  is found: save → searchable, median and p95 over ``--saves`` saves (target: median <= 2 s).
- ``idle``: the CPU time (user + system, from ``/proc/<pid>/stat``) of the daemon and its workers over
  ``--idle-seconds`` (60) while they watch that idle folder, as a share of one core (target <= 1 %).
- ``filters``: in process (the index worker's pipeline), a vault of 10,000 chunks (copies of the sample corpus,
  random vectors); its queries in bm25, vector and hybrid, unfiltered and with a filter admitting about 50 %, 10 %
  and 1 % of the notes (a source glob, a tag, a date range, all three), median and p95 per search.

The figures of the last run are in docs/search-quality.md ("Watched folders and search filters").
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import msgspec
import numpy as np

from memories import worker_protocol as w
from memories.limits import R21_MAX_CHUNKS
from memories.protocol import RagSearch, SearchMode
from memories.rag.pipeline import VaultCache
from ops.bench.harness import BenchHome, percentiles
from ops.bench.lexical import build_large_vault
from ops.corpus import load_notes, load_queries

WORDS = (
    "garden lantern heron river stone maple cedar harbour signal ledger kettle orchard meadow violin copper "
    "compass thistle willow beacon canyon"
).split()


class Measurement(msgspec.Struct, frozen=True):
    """One figure: what was measured, its value and unit, and how."""

    name: str
    value: float
    unit: str
    detail: str = ""


def _note(number: int) -> str:
    words = " ".join(WORDS[(number * 7 + k) % len(WORDS)] for k in range(60))
    return f"# Note {number}\n\n{words}\n\n{words[::-1]}\n"


def _folder(root: Path, notes: int) -> Path:
    folder = root / "Obsidian"
    for number in range(notes):
        path = folder / f"d{number // 250:02}" / f"n{number:05}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_note(number), encoding="utf-8")
    return folder


def _found(home: BenchHome, word: str) -> bool:
    return bool(home.client.request(RagSearch(vault="notes", query=word, mode="bm25", limit=1)).result.results)


def measure_watch(notes: int, saves: int, idle_seconds: float, only: str | None) -> Iterator[Measurement]:
    """Save → searchable and the idle CPU of a daemon watching ``notes`` notes."""
    with BenchHome() as home, tempfile.TemporaryDirectory() as scratch:
        home.cli("vault", "create", "notes")
        folder = _folder(Path(scratch), notes)
        started = time.perf_counter()
        home.cli("rag", "watch", "notes", str(folder), "--recursive")
        yield Measurement("register and import", time.perf_counter() - started, "s", f"{notes:,} notes")
        if only in (None, "latency"):
            latencies = []
            for save in range(saves):
                word = f"zqxsave{save:03}"
                target = folder / f"d{save % 20:02}" / f"n{(save % 20) * 250:05}.md"
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_text(_note(save) + f"\n{word}\n", encoding="utf-8")
                begun = time.perf_counter()
                os.replace(tmp, target)  # an editor's atomic save
                while not _found(home, word):
                    time.sleep(0.02)
                latencies.append(time.perf_counter() - begun)
                time.sleep(0.5)  # saves apart, as a person makes them
            p50, p95 = percentiles(latencies)
            detail = f"{saves} saves, {notes:,} notes, BM25 polled every 20 ms"
            yield Measurement("save -> searchable p50", p50, "s", detail + " (target <= 2 s)")
            yield Measurement("save -> searchable p95", p95, "s", detail)
        if only in (None, "idle"):
            time.sleep(2)  # the last scan's index job ends
            pids = home.daemon_pids()
            before = _cpu_seconds(pids)
            time.sleep(idle_seconds)
            used = _cpu_seconds(pids) - before
            detail = f"daemon and workers, {notes:,} notes watched, {idle_seconds:g} s (target <= 1 %)"
            yield Measurement("idle CPU", 100 * used / idle_seconds, "% of a core", detail)


def _cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of ``pids`` (their threads included), from ``/proc/<pid>/stat``."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))
    return total / ticks


SPACE = w.VectorSpace(key="bench", recipe=w.InputRecipe(prefix="title: {title} | text: "))


def _cache(chunks: int) -> VaultCache:
    """Copies of the sample corpus holding about ``chunks`` chunks (as ``ops.bench.lexical`` builds them), each
    note with a random unit vector of width 64 per chunk, tagged ``t0``..``t9`` (10 % each), its source under ``a/``
    or ``b/`` (half each), and dated evenly over ten years."""
    _, copies, _ = build_large_vault(load_notes(), chunks)
    start = 1_420_000_000.0
    step = 10 * 365 * 86400 / len(copies)
    records = [
        msgspec.structs.replace(
            record,
            source=f"{'ab'[n % 2]}/{record.source}",
            tags=[f"t{n % 10}"],
            date=start + n * step,
            meta={"tags": f"t{n % 10}"},
        )
        for n, record in enumerate(copies)
    ]
    cache = VaultCache("bench")
    cache.apply(records, [])
    cache.stamp(1)
    plan = cache.vectors.missing(SPACE, 10 * chunks)
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(len(plan.keys), 64)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    cache.vectors.store_vectors(
        w.IndexStoreVectors(vault="bench", space_key=SPACE.key, keys=plan.keys, vectors=vectors.tobytes(), dimension=64)
    )
    return cache


def measure_filters(chunks: int, rounds: int) -> Iterator[Measurement]:
    """A filtered against an unfiltered search of about ``chunks`` chunks, in each mode, with the sample corpus's
    queries."""
    cache = _cache(chunks)
    actual = cache.index.stats().chunks
    queries = [query.query for query in load_queries()]
    rng = np.random.default_rng(11)
    middle = 1_420_000_000.0 + 5 * 365 * 86400
    filters = {
        "none": None,
        "tag (10 %)": w.SearchFilter(tags=["t3"]),
        "source glob (50 %)": w.SearchFilter(source="a/**"),
        "date range (10 %)": w.SearchFilter(since=middle, until=middle + 365 * 86400),
        "all three (1 %)": w.SearchFilter(tags=["t3"], source="b/**", since=middle, until=middle + 365 * 86400),
    }
    modes: tuple[SearchMode, ...] = ("bm25", "vector", "hybrid")
    for mode in modes:
        for name, search in filters.items():
            samples = []
            for round_ in range(rounds):
                vector = rng.normal(size=64).astype(np.float32)
                vector /= np.linalg.norm(vector)
                query = w.IndexQuery(
                    vault="bench",
                    epoch=1,
                    query=queries[round_ % len(queries)],
                    mode=mode,
                    match_mode="any",
                    limit=10,
                    cards_only=False,
                    no_rerank=False,
                    space=SPACE if mode != "bm25" else None,
                    query_vector=vector.tobytes() if mode != "bm25" else None,
                    filter=search,
                )
                begun = time.perf_counter()
                cache.search(query)
                samples.append(time.perf_counter() - begun)
            p50, p95 = percentiles(samples)
            detail = f"{actual:,} chunks, limit 10, {rounds} queries, p95 {1000 * p95:.1f} ms"
            yield Measurement(f"{mode} search, filter {name}", 1000 * p50, "ms (p50)", detail)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", choices=["latency", "idle", "filters"])
    parser.add_argument("--notes", type=int, default=5000)
    parser.add_argument("--saves", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--chunks", type=int, default=R21_MAX_CHUNKS)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows: list[Measurement] = []
    if args.only in (None, "latency", "idle"):
        rows += measure_watch(args.notes, args.saves, args.idle_seconds, args.only)
    if args.only in (None, "filters"):
        rows += measure_filters(args.chunks, args.rounds)
    if args.json:
        print(json.dumps([msgspec.structs.asdict(row) for row in rows], indent=2))
        return
    width = max(len(row.name) for row in rows)
    for row in rows:
        print(f"{row.name:<{width}}  {row.value:>10.3f} {row.unit:<12} {row.detail}")


if __name__ == "__main__":
    main()

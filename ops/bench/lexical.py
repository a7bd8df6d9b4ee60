"""Lexical retrieval benchmark, in process: chunking, analysis, index build and update, BM25 search latency.

Run from the repository root::

    .venv/bin/python -m ops.bench.lexical            # a table
    .venv/bin/python -m ops.bench.lexical --json     # the same figures as JSON

Targets (issue 3; benchmarks, not tests): BM25 search p50 <= 5 ms on a 10,000-chunk vault, an edited record
searchable within 50 ms, analysis of Chinese notes >= 1 MiB/s. Each figure comes from one function that returns
:class:`Measurement` rows, so daemon and CLI figures can be added beside these.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from memories.limits import R21_MAX_CHUNKS
from memories.protocol import MemoryUpdate, RagSearch
from memories.rag.analysis import analyze_query, analyze_text
from memories.rag.chunking import chunk_text
from memories.rag.notes import note_chunks
from memories.rag.vault_index import VaultIndex
from memories.worker_protocol import IndexRecord
from ops.bench.harness import PASSPHRASE, BenchHome, memories_executable, percentiles, program_environment, timed
from ops.corpus import CORPUS, load_notes, load_queries, note_paths

MIB = 1024 * 1024


class Measurement(msgspec.Struct, frozen=True):
    """One figure of the table: what was measured, its value and unit, and how (sizes, counts, target)."""

    name: str
    value: float
    unit: str
    detail: str = ""


def measure_chunking(
    records: list[IndexRecord], sizes_kib: tuple[int, ...] = (64, 256, 1024, 4096)
) -> list[Measurement]:
    """Chunking time of texts of growing size cut from the corpus; equal µs per KiB means linear time."""
    sample = "\n\n".join(record.body for record in records)
    results = []
    for size in sizes_kib:
        text = _repeat_to_bytes(sample, size * 1024)
        for label, body in (("corpus text", text), ("no boundaries", "测" * (len(text.encode()) // 3))):
            seconds = _best_of(3, lambda body=body: chunk_text(body))
            results.append(
                Measurement(
                    f"chunk {size:>5} KiB ({label})",
                    seconds * 1e6 / size,
                    "µs/KiB",
                    f"{seconds * 1000:.1f} ms, {len(chunk_text(body))} chunks",
                )
            )
    return results


def measure_ingest(records: list[IndexRecord]) -> list[Measurement]:
    """Analysis of chunks alone, and a whole index build (chunk + analyze + FTS5 insert), on the corpus."""
    results = []
    chinese = [record for record in records if _is_chinese(record.body)]
    for label, subset in (("Chinese notes", chinese), ("all notes", records)):
        size = sum(len(record.body.encode()) for record in subset) / MIB
        chunks = [chunk for record in subset for chunk in note_chunks(record.body)]
        seconds = _timed(lambda chunks=chunks: [analyze_text(chunk.text) for chunk in chunks])
        results.append(
            Measurement(f"analysis, {label}", size / seconds, "MiB/s", f"{size:.2f} MiB, {len(chunks)} chunks")
        )
        index = VaultIndex("bench")
        seconds = _timed(lambda subset=subset, index=index: index.apply(subset, []))
        chunk_count = index.stats().chunks
        results.append(
            Measurement(
                f"ingest into index, {label}", size / seconds, "MiB/s", f"{chunk_count / seconds:,.0f} chunks/s"
            )
        )
    return results


def build_large_vault(
    records: list[IndexRecord], target_chunks: int = R21_MAX_CHUNKS
) -> tuple[VaultIndex, list[IndexRecord], float]:
    """A vault of copies of the corpus (distinct ids) holding as many chunks as fit under ``target_chunks``.

    Returns the index, the records in it and the seconds its single full build took.
    """
    chunk_counts = {record.id: max(1, len(note_chunks(record.body))) for record in records}
    copies: list[IndexRecord] = []
    total = 0
    for copy, record in _cycle_copies(records):
        if total + chunk_counts[record.id] > target_chunks:
            break
        copies.append(msgspec.structs.replace(record, id=f"copy{copy}/{record.id}"))
        total += chunk_counts[record.id]
    index = VaultIndex("bench")
    seconds = _timed(lambda: index.apply(copies, []))
    return index, copies, seconds


def measure_build(records: list[IndexRecord]) -> tuple[VaultIndex, list[IndexRecord], list[Measurement]]:
    """Full build of a vault of about 10,000 chunks; returns the index and its records for the later figures."""
    index, copies, seconds = build_large_vault(records)
    stats = index.stats()
    detail = f"{stats.records} records, {stats.chunks} chunks, {stats.text_bytes / MIB:.1f} MiB"
    return index, copies, [Measurement("full build, ~10,000-chunk vault", seconds, "s", detail)]


def measure_update(index: VaultIndex, records: list[IndexRecord], rounds: int = 10) -> list[Measurement]:
    """Edit one record of a built vault and search for a new word in it: median time from edit to found."""
    by_size = sorted(records, key=lambda record: len(record.body))
    results = []
    for label, record in (("median-size record", by_size[len(by_size) // 2]), ("largest record", by_size[-1])):
        timings = []
        for round_number in range(rounds):
            word = f"benchedit{len(results)}x{round_number}"  # unique to this record and round
            revision = record.revision + round_number + 1
            edited = msgspec.structs.replace(record, revision=revision, body=f"{record.body}\n\n{word}")
            query = analyze_query(word)
            started = time.perf_counter()
            index.apply([edited], [])
            found = index.search(query, limit=1)
            timings.append(time.perf_counter() - started)
            if not found or found[0].row.record_id != record.id:
                raise RuntimeError(f"the edited record {record.id} was not found by {word!r}")
        detail = f"{len(record.body.encode()) / 1024:.0f} KiB body, target 50 ms"
        results.append(Measurement(f"edit -> searchable, {label}", statistics.median(timings) * 1000, "ms", detail))
    return results


def measure_search(index: VaultIndex, queries: list[str], rounds: int = 20) -> list[Measurement]:
    """Latency of analyze_query + BM25 search (limit 10) over the corpus queries, for each match mode."""
    results = []
    stats = index.stats()
    for match_mode in ("any", "all", "phrase"):
        timings = []
        for _ in range(rounds):
            for query in queries:
                started = time.perf_counter()
                index.search(analyze_query(query), match_mode=match_mode, limit=10)
                timings.append(time.perf_counter() - started)
        timings.sort()
        p50, p95 = timings[len(timings) // 2], timings[int(len(timings) * 0.95)]
        detail = f"{stats.chunks} chunks, {len(queries)} queries x {rounds}"
        results.append(Measurement(f"BM25 search p50, {match_mode}", p50 * 1000, "ms", f"{detail}, target 5 ms"))
        results.append(Measurement(f"BM25 search p95, {match_mode}", p95 * 1000, "ms", detail))
    return results


def run(corpus: Path, rounds: int) -> Iterator[Measurement]:
    """Every in-process figure, in table order."""
    records = load_notes(corpus)
    yield from measure_chunking(records)
    yield from measure_ingest(records)
    index, vault_records, build = measure_build(records)
    yield from build
    yield from measure_search(index, [query.query for query in load_queries(corpus)], rounds=rounds)
    yield from measure_update(index, vault_records, rounds=rounds)
    yield from measure_daemon(corpus, rounds=rounds)


def measure_daemon(corpus: Path, rounds: int) -> Iterator[Measurement]:
    """Figures through a real daemon: ingest, a cold build of a ~10,000-chunk vault, warm BM25 latency as a
    client in this process sees it (socket + supervisor + index worker), edit-to-searchable, and the CLI end to
    end and at start-up."""
    queries = [query.query for query in load_queries(corpus)]
    notes = note_paths(corpus)
    size = sum((corpus / note).stat().st_size for note in notes)
    excludes = ("--exclude", "SOURCES.md", "--exclude", "queries.md")
    with BenchHome() as home, tempfile.TemporaryDirectory() as scratch:
        home.cli("vault", "create", "notes")
        seconds = timed(lambda: home.cli("rag", "ingest", "notes", str(corpus), "--recursive", *excludes))
        detail = f"{len(notes)} notes, {size / MIB:.2f} MiB in {seconds:.2f} s: stored encrypted and indexed"
        yield Measurement("daemon: ingest", size / MIB / seconds, "MiB/s", detail)

        for copy in ("a", "b"):
            shutil.copytree(corpus, Path(scratch) / copy)
        home.cli("vault", "create", "large")
        home.cli("rag", "ingest", "large", scratch, "--recursive", *excludes)
        chunks = home.cli("rag", "status", "large")["chunks"]
        home.cli("lock")  # restarts the index worker: the next search builds the whole index from the store
        home.cli("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        seconds = timed(lambda: _search(home, "large", "git"))
        detail = f"{chunks} chunks ({2 * len(notes)} notes): decrypt, send, chunk, analyze, FTS5"
        yield Measurement("daemon: full index build", seconds, "s", detail)

        samples = [timed(lambda q=q: _search(home, "large", q)) for _ in range(rounds) for q in queries]
        p50, p95 = percentiles(samples)
        detail = f"p95 {p95 * 1000:.2f} ms; {chunks} chunks; target p50 <= 5 ms"
        yield Measurement("daemon: BM25 search p50", p50 * 1000, "ms", detail)

        card = home.cli("memory", "list", "large", "--kind", "card")["records"][0]["id"]
        edits = []
        for number in range(rounds):
            word = f"editmarker{number}x"
            home.client.request(MemoryUpdate(vault="large", id=card, body=f"an edit that adds {word}".encode()))
            edits.append(timed(lambda word=word: _search(home, "large", word, expect=1)))
        p50, p95 = percentiles(edits)
        detail = f"p95 {p95 * 1000:.1f} ms; search right after `memory update`; target <= 50 ms"
        yield Measurement("daemon: edited record searchable", p50 * 1000, "ms", detail)

        command = [memories_executable(), "rag", "search", "large", "", "--mode", "bm25", "--json"]
        samples = []
        for _ in range(max(1, rounds // 4)):
            for query in queries:
                command[4] = query
                samples.append(timed(lambda: subprocess.run(command, env=home.env, capture_output=True, check=True)))
        p50, p95 = percentiles(samples)
        detail = f"p95 {p95 * 1000:.1f} ms; `memories rag search` as a process; target p50 <= 72 ms"
        yield Measurement("CLI: rag search end to end p50", p50 * 1000, "ms", detail)

    version = [memories_executable(), "--version"]
    baseline = [sys.executable, "-c", "import click, msgspec"]
    env = program_environment()
    for command in (version, baseline):  # first runs write the bytecode caches
        subprocess.run(command, capture_output=True, env=env)
    startup = percentiles([timed(lambda: subprocess.run(version, capture_output=True, env=env)) for _ in range(rounds)])
    floor = percentiles([timed(lambda: subprocess.run(baseline, capture_output=True, env=env)) for _ in range(rounds)])
    yield Measurement(
        "CLI: start-up p50",
        startup[0] * 1000,
        "ms",
        f"`memories --version`; Python + click + msgspec alone: {floor[0] * 1000:.1f} ms",
    )


def _search(home: BenchHome, vault: str, query: str, expect: int | None = None) -> None:
    results = home.client.request(RagSearch(vault=vault, query=query, mode="bm25")).result.results
    if expect is not None and len(results) != expect:
        raise RuntimeError(f"the search for {query!r} found {len(results)} results")


def print_table(measurements: list[Measurement]) -> None:
    """A plain text table: name, value with unit, detail."""
    width = max(len(measurement.name) for measurement in measurements)
    for measurement in measurements:
        value = f"{measurement.value:10.2f} {measurement.unit}"
        print(f"{measurement.name:<{width}}  {value:<16}  {measurement.detail}")


def main(argv: list[str] | None = None) -> int:
    """Command line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=CORPUS, help="folder with MANIFEST.tsv and queries.md")
    parser.add_argument("--rounds", type=int, default=20, help="repetitions of the search and update figures")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    arguments = parser.parse_args(argv)
    measurements = []
    for measurement in run(arguments.corpus, arguments.rounds):
        measurements.append(measurement)
        if not arguments.json:
            print(f"  … {measurement.name}", file=sys.stderr)
    if arguments.json:
        print(json.dumps([msgspec.to_builtins(measurement) for measurement in measurements], ensure_ascii=False))
    else:
        print_table(measurements)
    return 0


def _cycle_copies(records: list[IndexRecord]) -> Iterator[tuple[int, IndexRecord]]:
    copy = 0
    while True:
        for record in records:
            yield copy, record
        copy += 1


def _repeat_to_bytes(text: str, size: int) -> str:
    encoded = text.encode()
    return (encoded * (size // len(encoded) + 1))[:size].decode(errors="ignore")


def _is_chinese(text: str) -> bool:
    return len(re.findall(r"[\u4e00-\u9fff]", text)) > len(text) // 5


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def _best_of(times: int, action: Callable[[], object]) -> float:
    return min(_timed(action) for _ in range(times))


if __name__ == "__main__":
    sys.exit(main())

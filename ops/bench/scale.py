"""Large vaults through the CLI and the daemon (issue 28, acceptance 1): what a vault of 10,000, 30,000 or 100,000
chunks costs to ingest, to search first after an unlock, a restart or an eviction, to search warm, in memory and
on disk.

Usage::

    nice -n 10 python -m ops.bench.scale --model-dir DIR [--chunks 10000 30000 100000] [--rounds 2] [--json]

For each size, in a fresh home (``[rag] auto_index = "off"``, the real model of ``--model-dir`` as
``local_model_dir``):

1. *The vault.* Copies of the sample corpus (``--corpus``, default ``tests/corpus``) are written to a folder until
   the next note would pass the size (counted with the chunker, :func:`memories.rag.notes.note_chunks`). Each copy of
   a note gets its own line (:func:`varied`): a heading ``# <title> (copy N)`` first, or, in a note whose front
   matter names its title, a last front-matter line ``title: "<title> (copy N)"``. Every note's title is then its
   own, and so is every model input (the document prompt names the title): no chunk shares a vector with another.
2. *Ingest*: ``rag ingest VAULT FOLDER --recursive`` timed as a process; meanwhile a thread of this process times
   bm25 searches of a small second vault (``side``) through the daemon's socket, against the same searches before
   the ingest (issue 28 item 5: a 10,000-file ingest must not hold the daemon).
3. *Vectors*: **random unit vectors**, not the model's (embedding 100,000 chunks takes hours on a laptop). With the
   daemon stopped, this process opens the home with the passphrase and writes each record's vectors as the daemon
   keeps them (:meth:`memories.vault.vectors.VectorRows.put`, sealed like every row), keyed by the exact model
   input the index worker derives for each chunk (:func:`input_keys`, the worker's own
   :func:`~memories.rag.chunk_vectors.model_input` and :func:`~memories.rag.chunk_vectors.input_key`) in the
   real model's vector space (its key read from ``rag status``). Nothing of the daemon is changed or bypassed:
   it finds kept vectors, as after any ``rag index``. Vector and hybrid rankings are meaningless (labelled so);
   their costs are the real ones: the query is embedded by the real model and scanned against a matrix of the
   vault's size.
4. *First searches*, each right after its event with no wait, one event per mode (bm25, hybrid): ``lock`` +
   ``unlock``; ``daemon stop`` + ``start`` + ``unlock``; an eviction (bm25 searches of two other vaults: two
   caches are kept). Each is a ``rag search --json`` process, timed from its start to its exit.
5. *Warm*: the corpus's search checks (``queries.md``) in bm25, vector and hybrid, ``--rounds`` times each, as
   ``rag search --json`` processes: wall p50 and p95.
6. *Memory*: PSS (``/proc/PID/smaps_rollup``) of the daemon and its workers right after the first hybrid search
   after the restart, and again after the warm searches. *Disk*: the bytes of every file of the home at the end.

Figures are for reading, never test assertions (the machine may be shared: the load average is printed). Targets
(issue 28): first search after unlock or restart <= 0.5 s at 10,000 chunks, <= 1.0 s at 100,000; warm hybrid CLI
p50 <= 250 ms at 100,000; PSS <= 1 GiB with one 100,000-chunk vault cached.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from memories import worker_protocol as w
from memories.client import Client
from memories.config import RagConfig
from memories.daemon.core.views import index_record
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.limits import R21_MAX_CHUNKS
from memories.paths import resolve_home
from memories.protocol import RagSearch
from memories.rag.chunk_vectors import input_key, model_input
from memories.rag.notes import front_matter_end, note_chunks, note_title
from memories.rag.vault_index import _TITLE_ONLY_CHUNK, ChunkRow
from memories.vault.record_store import RecordStore
from memories.vault.views import RecordVectors
from ops.bench.harness import (
    PASSPHRASE,
    BenchHome,
    memories_executable,
    percentiles,
    proportional_megabytes,
    timed,
)
from ops.corpus import CORPUS, load_queries, note_paths

DIMENSION = 768
"""EmbeddingGemma's width: the random vectors are as wide as the real model's."""
EVENTS = ("lock_unlock", "restart", "eviction")
FIRST_MODES = ("bm25", "hybrid")
WARM_MODES = ("bm25", "vector", "hybrid")
_TITLE_LINE = re.compile(r"\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)")


def chunk_limit_setting() -> bool:
    """Whether this release has ``[rag] max_chunks`` (issue 28 item 1); before it the cap is
    :data:`memories.limits.R21_MAX_CHUNKS`."""
    return "max_chunks" in RagConfig.__struct_fields__


def varied(text: str, copy: int, name: str) -> str:
    """``text`` (a note) as copy number ``copy``, with a title of its own (see the module's docstring, step 1);
    ``name`` is the file name, the title of a note without one."""
    own = " ".join(f"{note_title(text) or name} (copy {copy})".split())
    end = front_matter_end(text)
    candidates = [f"# {own}\n\n{text}"]
    if end:
        candidates.insert(0, text[:end] + f"# {own}\n\n" + text[end:])
        closing = _TITLE_LINE.search(text, 3)
        if closing is not None and closing.end() == end:  # a last front-matter line overrides a title it names
            line = "\ntitle: " + json.dumps(own, ensure_ascii=False)
            candidates.insert(0, text[: closing.start()] + line + text[closing.start() :])
    return next(candidate for candidate in candidates if note_title(candidate) == own)


def write_copies(corpus: Path, folder: Path, target: int) -> tuple[int, int]:
    """Write copies of the corpus's notes under ``folder`` (``copyN/<path>``) until the next note would make more
    than ``target`` chunks; returns ``(notes, chunks)`` as the chunker counts them."""
    sources = [(path, (corpus / path).read_bytes().decode("utf-8-sig")) for path in note_paths(corpus)]
    notes = chunks = copy = 0
    while True:
        for path, text in sources:
            body = varied(text, copy, PurePosixPath(path).name)
            count = max(1, len(note_chunks(body)))
            if chunks + count > target:
                return notes, chunks
            out = folder / f"copy{copy:03}" / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(body, encoding="utf-8")
            notes += 1
            chunks += count
        copy += 1


def input_keys(record: w.IndexRecord, recipe: w.InputRecipe) -> list[str]:
    """The distinct vector keys of a record's chunks, in chunk order, as the index worker derives them
    (:class:`~memories.rag.vault_index.VaultIndex` chunks the body, :class:`~memories.rag.chunk_vectors.ChunkVectors`
    keys each chunk's model input). No analysis: the key needs only the title, the source and the chunk's text."""
    keys = []
    for chunk in note_chunks(record.body) or [_TITLE_ONLY_CHUNK]:
        row = ChunkRow(0, record.id, record.revision, record.kind, record.title, record.source, chunk)
        keys.append(input_key(model_input(row, recipe)))
    return list(dict.fromkeys(keys))


def put_random_vectors(home: Path, vault_name: str, space_key: str, seed: int = 7) -> int:
    """Seal a random unit vector for every chunk input of ``vault_name`` into the home at ``home`` (the daemon
    stopped), as kept vectors of ``space_key``; returns how many vectors were written."""
    records = RecordStore(home / "memories.db")
    try:
        records.unlock(PASSPHRASE)
        vault = records.vaults.resolve(vault_name)
        ids = list(records.catalog.eligible(vault))
        rng = np.random.default_rng(seed)
        written = 0
        for start in range(0, len(ids), 500):  # a few hundred records per transaction
            sets = []
            for text in records.catalog.index_texts(vault, ids[start : start + 500]):
                record = index_record(text)
                keys = input_keys(record, LOCAL_RECIPE)
                vectors = rng.standard_normal((len(keys), DIMENSION)).astype(np.float32)
                vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
                sets.append(RecordVectors(record.id, record.revision, keys, vectors.tobytes(), {}, True))
                written += len(keys)
            records.vectors.put(vault, space_key, DIMENSION, sets)
        return written
    finally:
        records.close()


def peak_megabytes(home: BenchHome) -> dict[str, float]:
    """Each process's peak resident set (``VmHWM`` of ``/proc/PID/status``) in MiB, by name: the daemon's and each
    worker's since it started (the vectors' load at the first vector search is the usual peak)."""
    status = home.cli("daemon", "status")
    pids = {"daemon": status["pid"], **{worker["name"]: worker["pid"] for worker in status["workers"] if worker["pid"]}}
    peaks = {}
    for name, pid in pids.items():
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                peaks[name] = round(int(line.split()[1]) / 1024, 1)
    return peaks


def home_bytes(home: Path) -> int:
    """Bytes of every file under ``home`` (the database, its WAL, logs)."""
    return sum(path.stat().st_size for path in home.rglob("*") if path.is_file())


class SideSearches(threading.Thread):
    """bm25 searches of vault ``side`` one after another through the daemon's socket, each timed, until stopped."""

    def __init__(self, home: Path) -> None:
        super().__init__(daemon=True)
        self._client = Client(resolve_home(str(home), None))
        self.seconds: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        request = RagSearch(vault="side", query="git branch", mode="bm25", limit=10)
        while not self.stop.is_set():
            self.seconds.append(timed(lambda: self._client.request(request)))
            time.sleep(0.05)


def search_seconds(home: BenchHome, vault: str, query: str, mode: str) -> tuple[float, dict[str, Any]]:
    """Seconds of one ``rag search --json`` process, from its start to its exit, and its document."""
    command = [memories_executable(), "rag", "search", vault, query, "--mode", mode, "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, env=home.env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"rag search {mode} {query!r} failed: {done.stdout} {done.stderr}")
    return seconds, json.loads(done.stdout)


def unlock(home: BenchHome) -> float:
    return timed(lambda: home.cli("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n"))


def _ms(samples: Iterable[float]) -> dict[str, float]:
    values = list(samples)
    if not values:
        return {}
    p50, p95 = percentiles(values)
    return {"p50_ms": round(p50 * 1000, 1), "p95_ms": round(p95 * 1000, 1), "n": len(values)}


def run(target: int, model_dir: Path, corpus: Path, rounds: int) -> dict[str, Any]:
    """Every figure of the module's docstring for one vault of about ``target`` chunks."""
    limits = (
        f"max_chunks = {max(target + target // 10, 10_000)}\n" if chunk_limit_setting() else ""
    )  # the byte limits scale with it
    if not limits and target > R21_MAX_CHUNKS:
        raise SystemExit(f"this release caps a vault at {R21_MAX_CHUNKS:,} chunks (no [rag] max_chunks setting yet)")
    config = (
        f"[daemon]\njob_budget_seconds = 7200\n[rag]\nauto_index = \"off\"\nlocal_model_dir = '{model_dir}'\n{limits}"
    )
    queries = [query.query for query in load_queries(corpus)]
    figures: dict[str, Any] = {"target_chunks": target, "vectors": "random unit vectors (rankings meaningless)"}
    scratch = Path(tempfile.mkdtemp(prefix="memories-scale-"))
    try:
        folder = scratch / "notes"
        figures["notes"], figures["chunks_counted"] = write_copies(corpus, folder, target)
        figures["source_mib"] = round(sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20, 1)
        with BenchHome(config=config) as home:
            for name in ("notes", "side", "other"):
                home.cli("vault", "create", name)
            for name in ("side", "other"):
                home.cli("memory", "add", name, "--title", "git branch", "--body", "a short note on git branches")
            side = SideSearches(home.path)
            for _ in range(20):  # the same searches before the ingest: the baseline
                side.seconds.append(timed(lambda: home.client.request(RagSearch(vault="side", query="git branch"))))
            idle, side.seconds = side.seconds, []
            side.start()
            started = time.perf_counter()
            ingested = home.cli("rag", "ingest", "notes", str(folder), "--recursive")
            figures["ingest_s"] = round(time.perf_counter() - started, 1)
            side.stop.set()
            side.join()
            figures["side_search_idle"] = _ms(idle)
            figures["side_search_during_ingest"] = _ms(side.seconds)
            figures["ingest_statuses"] = _count(result["status"] for result in ingested["results"])

            search_seconds(home, "notes", queries[0], "bm25")
            home.cli("rag", "search", "notes", queries[0])  # the default mode loads the model: its space key
            status = home.cli("rag", "status", "notes")
            figures["chunks"], figures["records"] = status["chunks"], status["records"]
            space_key = status["model"]["space_key"]
            if not space_key:
                raise RuntimeError(f"the model at {model_dir} did not load: {status['model']}")
            home.cli("daemon", "stop")
            started = time.perf_counter()
            figures["vectors_written"] = put_random_vectors(home.path, "notes", space_key)
            figures["vectors_write_s"] = round(time.perf_counter() - started, 1)
            home.cli("daemon", "start")
            unlock(home)
            figures["first"] = _first_searches(home, queries, figures)
            figures["warm"] = {
                mode: _ms(search_seconds(home, "notes", q, mode)[0] for _ in range(rounds) for q in queries)
                for mode in WARM_MODES
            }
            figures["pss_after_warm_mib"] = round(proportional_megabytes(home.daemon_pids()), 1)
            status = home.cli("rag", "status", "notes")
            figures["missing"], figures["vector_bytes"] = status["missing"], status.get("vector_bytes")
            figures["warnings"] = status.get("warnings")
            figures["embedding_batches"] = home.cli("daemon", "status")["embedding_batches"]  # 0: none on demand
            home.cli("daemon", "stop")
            figures["home_mib"] = round(home_bytes(home.path) / 2**20, 1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures["loadavg"] = [round(load, 2) for load in os.getloadavg()]
    return figures


def _first_searches(home: BenchHome, queries: list[str], figures: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The first search of each mode after each event (module docstring, step 4); PSS after the first hybrid search
    after the restart goes into ``figures``."""
    first: dict[str, dict[str, float]] = {event: {} for event in EVENTS}
    for number, mode in enumerate(FIRST_MODES):
        query = queries[(number + 1) % len(queries)]
        home.cli("lock")
        first["lock_unlock"]["unlock_s"] = round(unlock(home), 3)
        first["lock_unlock"][f"{mode}_s"] = round(search_seconds(home, "notes", query, mode)[0], 3)

        home.cli("daemon", "stop")
        first["restart"]["start_s"] = round(timed(lambda: home.cli("daemon", "start")), 3)
        first["restart"]["unlock_s"] = round(unlock(home), 3)
        first["restart"][f"{mode}_s"] = round(search_seconds(home, "notes", query, mode)[0], 3)
        if mode == "hybrid":
            figures["pss_after_first_mib"] = round(proportional_megabytes(home.daemon_pids()), 1)
            figures["peak_rss_after_first_mib"] = peak_megabytes(home)

        for other in ("side", "other"):
            search_seconds(home, other, "git", "bm25")
        first["eviction"][f"{mode}_s"] = round(search_seconds(home, "notes", query, mode)[0], 3)
    return first


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    return counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model-dir", type=Path, required=True, help="the real model (embeds the queries)")
    parser.add_argument("--chunks", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the corpus queries per warm mode")
    parser.add_argument("--json", action="store_true", help="one JSON document per size, one a line")
    args = parser.parse_args(argv)
    for target in args.chunks:
        figures = run(target, args.model_dir, args.corpus, args.rounds)
        print(json.dumps(figures, ensure_ascii=False, indent=None if args.json else 2), flush=True)
        if not args.json:
            print(f"load average {os.getloadavg()[0]:.1f}", file=sys.stderr)


if __name__ == "__main__":
    main()

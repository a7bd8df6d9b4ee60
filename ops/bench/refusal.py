"""What a search of a vault over its limits costs (issue 28 item 1): refused at once with its figures, against the
index build every refused search paid before.

Usage::

    nice -n 10 python -m ops.bench.refusal [--chunks 14600] [--max-chunks 10000] [--rounds 10] [--json]

In a fresh home with ``[rag] max_chunks = 10000`` (R-21's cap, so the vault of issue 28's table is over it) and
``auto_index = "off"``: copies of the sample corpus (``--corpus``, default ``tests/corpus``; each copy of a note with
a title of its own, :func:`ops.bench.scale.write_copies`) of about ``--chunks`` chunks are ingested into ``big``
(exit 3, ``over_limit``), and one copy into ``small`` (within the limit). Then, each a ``rag search --json`` process
timed from its start to its exit (CLI), and the same request over the daemon's socket from this process (socket):

- *known*: ``--rounds`` refused searches of ``big`` (the figures are known at this revision of the vault);
- *warm*: ``--rounds`` bm25 searches of ``small`` (what "no more than a warm search" compares with);
- *after lock + unlock* and *after a daemon restart*: the first refused search (the figures come from the sealed
  row in the home: one unsealing, no build), ``--rounds`` times each;
- *figures not known*: with ``[rag] keep_index = false`` (figures in memory only) after a restart, the first refused
  search: the index worker builds the cache up to the limit and the rest is counted. This is what *every* refused
  search cost before this change (a build up to the limit at each search; issue 28 measured 3.35 s at 14,592 chunks).

Figures are for reading, never test assertions (the machine may be shared: the load average is printed).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memories.errors import MemoriesError
from memories.protocol import RagSearch
from ops.bench.harness import PASSPHRASE, BenchHome, memories_executable, percentiles
from ops.bench.scale import write_copies
from ops.corpus import CORPUS

QUERY = "git branch"


def cli_search(home: BenchHome, vault: str, mode: str = "bm25") -> tuple[float, str | None]:
    """Seconds of one ``rag search --json`` process and its error code (``None``: it found results)."""
    command = [memories_executable(), "rag", "search", vault, QUERY, "--mode", mode, "--json"]
    started = time.perf_counter()
    done = subprocess.run(command, env=home.env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode == 0:
        return seconds, None
    return seconds, json.loads(done.stdout)["error"]["code"]


def socket_search(home: BenchHome, vault: str) -> tuple[float, str | None]:
    """Seconds of one bm25 ``RagSearch`` over the daemon's socket from this process, and its error code."""
    started = time.perf_counter()
    try:
        home.client.request(RagSearch(vault=vault, query=QUERY, mode="bm25"))
        code = None
    except MemoriesError as exc:
        code = exc.code
    return time.perf_counter() - started, code


def _ms(samples: list[float]) -> dict[str, float]:
    p50, p95 = percentiles(samples)
    return {"p50_ms": round(p50 * 1000, 1), "p95_ms": round(p95 * 1000, 1), "n": len(samples)}


def _measure(search: Callable[[], tuple[float, str | None]], expect: str | None, rounds: int) -> list[float]:
    samples = []
    for _ in range(rounds):
        seconds, code = search()
        if code != expect:
            raise RuntimeError(f"expected {expect or 'results'}, got {code or 'results'}")
        samples.append(seconds)
    return samples


def _after(home: BenchHome, event: Callable[[], None], rounds: int) -> dict[str, dict[str, float]]:
    """The first refused search of ``big`` after ``event`` (CLI and socket: one event each), ``rounds`` times."""
    cli, socket = [], []
    for _ in range(rounds):
        event()
        cli += _measure(lambda: cli_search(home, "big"), "vault_too_large", 1)
        event()
        socket += _measure(lambda: socket_search(home, "big"), "vault_too_large", 1)
    return {"cli": _ms(cli), "socket": _ms(socket)}


def run(chunks: int, max_chunks: int, rounds: int, corpus: Path) -> dict[str, Any]:
    """Every figure of the module's docstring."""
    config = f'[daemon]\njob_budget_seconds = 3600\n[rag]\nauto_index = "off"\nmax_chunks = {max_chunks}\n'
    figures: dict[str, Any] = {"max_chunks": max_chunks}
    scratch = Path(tempfile.mkdtemp(prefix="memories-refusal-"))
    try:
        big, small = scratch / "big", scratch / "small"
        figures["big_notes"], figures["big_chunks_counted"] = write_copies(corpus, big, chunks)
        write_copies(corpus, small, min(chunks, max_chunks) // 2)
        with BenchHome(config=config) as home:
            for name in ("big", "small"):
                home.cli("vault", "create", name)
            home.cli("rag", "ingest", "small", str(small), "--recursive")
            started = time.perf_counter()
            ingested = home.cli("rag", "ingest", "big", str(big), "--recursive")  # exit 3: over the limit
            figures["ingest_s"] = round(time.perf_counter() - started, 1)
            over = ingested.get("over_limit") or {}
            figures["over_limit"] = {key: over.get("details", {}).get(key) for key in ("chunks", "text_bytes", "max")}
            figures["stored"] = len(home.cli("memory", "list", "big")["records"])

            _measure(lambda: socket_search(home, "small"), None, 2)  # warm the small vault's cache
            figures["known"] = {
                "cli": _ms(_measure(lambda: cli_search(home, "big"), "vault_too_large", rounds)),
                "socket": _ms(_measure(lambda: socket_search(home, "big"), "vault_too_large", rounds)),
            }
            figures["warm_search_small"] = {
                "cli": _ms(_measure(lambda: cli_search(home, "small"), None, rounds)),
                "socket": _ms(_measure(lambda: socket_search(home, "small"), None, rounds)),
            }

            def relock() -> None:
                home.cli("lock")
                home.cli("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")

            def restart() -> None:
                home.cli("daemon", "stop")
                home.cli("daemon", "start")
                home.cli("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")

            few = max(1, rounds // 3)
            figures["after_lock_unlock"] = _after(home, relock, few)
            figures["after_restart"] = _after(home, restart, few)
            home.cli("daemon", "stop")
            config_path = home.path / "config.toml"
            config_path.write_text(config_path.read_text() + "keep_index = false\n")
            home.cli("daemon", "start")
            home.cli("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
            figures["figures_not_known_as_before"] = _after(home, restart, few)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    figures["loadavg"] = [round(load, 2) for load in os.getloadavg()]
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chunks", type=int, default=14_600, help="chunks of the vault over the limit")
    parser.add_argument("--max-chunks", type=int, default=10_000, help="[rag] max_chunks of the home")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--corpus", type=Path, default=CORPUS)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    figures = run(args.chunks, args.max_chunks, args.rounds, args.corpus)
    if args.json:
        print(json.dumps(figures))
        return
    for key, value in figures.items():
        print(f"{key:30} {value}")


if __name__ == "__main__":
    main()

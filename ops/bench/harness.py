"""A throwaway home with a running daemon, for benchmarks that go through the daemon and the CLI.

>>> with BenchHome(config="[rag]\\nlocal_threads = 2\\n") as home:     # doctest: +SKIP
...     home.cli("vault", "create", "notes")
...     reply = home.client.request(RagSearch(vault="notes", query="git", mode="bm25"))
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from memories.client import Client
from memories.paths import resolve_home

PASSPHRASE = "benchmark passphrase"
FAST_KDF = "[crypto]\nkdf_memory_kib = 1024\nkdf_iterations = 1\nkdf_lanes = 1\n"


def program_environment() -> dict[str, str]:
    """This environment with bytecode caches on, as any installed program runs (some shells here set
    ``PYTHONDONTWRITEBYTECODE``, which makes every start compile the modules again)."""
    return {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def memories_executable() -> str:
    candidate = Path(sys.executable).with_name("memories")
    return str(candidate) if candidate.exists() else "memories"


class BenchHome:
    """Start a daemon in a fresh temp home (initialized and unlocked) on enter; stop and delete it on exit."""

    def __init__(self, config: str = "", env: dict[str, str] | None = None) -> None:
        self.path = Path(tempfile.mkdtemp(prefix="memories-bench-"))
        (self.path / "config.toml").write_text(FAST_KDF + config)
        self.env = {**program_environment(), "MEMORIES_HOME": str(self.path), **(env or {})}
        self.client = Client(resolve_home(str(self.path), None))

    def __enter__(self) -> BenchHome:
        self.cli("daemon", "start")
        self.cli("init", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([memories_executable(), "daemon", "stop"], env=self.env, capture_output=True)
        shutil.rmtree(self.path, ignore_errors=True)

    def cli(self, *args: str, stdin: str | None = None) -> Any:
        """Run a command with ``--json``; its document (raises on failure)."""
        done = subprocess.run(
            [memories_executable(), *args, "--json"], env=self.env, input=stdin, text=True, capture_output=True
        )
        if done.returncode not in (0, 3):
            raise RuntimeError(f"memories {' '.join(args)} failed: {done.stdout} {done.stderr}")
        return json.loads(done.stdout)

    def daemon_pids(self) -> list[int]:
        status = self.cli("daemon", "status")
        return [status["pid"], *(w["pid"] for w in status["workers"] if w["pid"])]


def timed(action: Any) -> float:
    """Seconds one call of ``action()`` takes."""
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


def percentiles(samples: list[float]) -> tuple[float, float]:
    """``(p50, p95)`` of ``samples`` (nearest rank)."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered), p95


def resident_megabytes(pids: list[int]) -> float:
    """Resident set size (RSS) of the processes, in MiB, from ``/proc/<pid>/status`` (VmRSS)."""
    total_kib = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024


def proportional_megabytes(pids: list[int]) -> float:
    """Proportional set size (PSS) of the processes summed, in MiB, from ``/proc/<pid>/smaps_rollup``: each page
    shared by several processes (Python, numpy, the ONNX Runtime library) counts once in the sum, unlike RSS."""
    total_kib = 0
    for pid in pids:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024

"""Remote embedding throughput through the daemon: ``rag index`` against a loopback fake embedding service that
takes a fixed time per request, for each ``[rag.embedding] concurrency`` and ``batch_size``.

    .venv/bin/python -m ops.bench.remote_embed [--chunks 512] [--latency-ms 100]

The fake (``tests/fixtures/model_servers.py``) answers every request after ``--latency-ms``, whatever its size, as a
GPU server with spare capacity does; so the figures show what the daemon adds on top of the service and how
requests in flight and inputs per request hide the service's latency. Each configuration runs in a fresh home and
daemon; the time is the whole ``rag index`` command (CLI start, sync, requests, storing).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from ops.bench.harness import BenchHome, timed
from tests.fixtures.model_servers import ModelServer

CONFIGURATIONS = [(1, 16), (1, 32), (4, 16), (4, 32)]
"""``(concurrency, batch_size)`` pairs measured."""


def measure(server: ModelServer, notes: Path, chunks: int, concurrency: int, batch_size: int) -> dict[str, float]:
    """Seconds and chunks per second of one ``rag index`` of ``chunks`` notes."""
    config = (
        f"[rag.embedding]\nprotocol = 'compatible'\nurl = '{server.url('embeddings')}'\nmodel = 'fake'\n"
        f"dimensions = 64\nbatch_size = {batch_size}\nconcurrency = {concurrency}\n"
    )
    before = len(server.calls())
    with BenchHome(config=config) as home:
        home.cli("vault", "create", "notes")
        home.cli("rag", "ingest", "notes", str(notes))
        seconds = timed(lambda: home.cli("rag", "index", "notes"))
        status = home.cli("rag", "status", "notes")
    if status["embedded"] != chunks:
        raise RuntimeError(f"expected {chunks} chunks embedded, got {status['embedded']}")
    return {"seconds": seconds, "per_second": chunks / seconds, "requests": len(server.calls()) - before}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=512, help="notes of one chunk each (default 512)")
    parser.add_argument("--latency-ms", type=float, default=100, help="the fake's time per request (default 100)")
    args = parser.parse_args()
    server = ModelServer()
    server.latency = args.latency_ms / 1000
    try:
        with tempfile.TemporaryDirectory(prefix="memories-bench-notes-") as folder:
            notes = Path(folder)
            for number in range(args.chunks):
                text = f"Note {number}: a short remark about topic {number % 37}.\n"
                (notes / f"note{number:05}.md").write_text(text)
            print(f"{args.chunks} chunks, fake latency {args.latency_ms:g} ms per request")
            print(f"{'concurrency':>11} {'batch_size':>10} {'requests':>8} {'seconds':>8} {'chunks/s':>9}")
            for concurrency, batch_size in CONFIGURATIONS:
                figures = measure(server, notes, args.chunks, concurrency, batch_size)
                print(
                    f"{concurrency:>11} {batch_size:>10} {figures['requests']:>8.0f} {figures['seconds']:>8.2f} "
                    f"{figures['per_second']:>9.1f}"
                )
    finally:
        server.close()


if __name__ == "__main__":
    main()

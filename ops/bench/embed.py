"""Embedding benchmark: the local ONNX embedder against a bare onnxruntime loop on the same model (issue 4).

Usage::

    python -m ops.bench.embed [--model-dir DIR] [--threads N] [--batch-size N] [--chunks N] [--daemon-only] [--json]

Without ``--model-dir`` it builds the tiny test model (``ops/make_tiny_model.py``) into a temporary folder; with
it, it runs on an installed model (``<home>/models/embeddinggemma`` or a ``local_model_dir``). Figures:

- **throughput** (chunks/s, tokens/s) of :class:`~memories.models.local_onnx.LocalOnnxEmbedder` and of a bare
  ``InferenceSession.run`` loop over the same pre-tokenized, length-sorted batches, same threads and batch size;
  the ratio is the embedder's overhead (tokenization, checks, normalization). Target: >= 0.95.
- **length-sorted vs unsorted** batches on mixed-length chunks (the corpus notes cut by the product's chunker,
  at most 768 code points each, in a shuffled order), through the embedder and graph-only. Target: sorted >=
  1.3x unsorted.
- **query latency** p50/p95 in milliseconds, one query per call, as a search does.
- **tokenization only** (chunks/s): on the tiny model the graph costs almost nothing, so this, not the graph,
  bounds the embedder there; on the real model (about 4 chunks/s on 2 threads) it is noise.
- **peak RSS** of this process, which holds what the embedding worker holds (the model and one batch).

- **through the daemon**: ``rag index`` chunks/s and tokens/s against :func:`bare_loop` on the same model
  inputs, threads and batch size (the ratio is the figure; target >= 0.95), and the memory of the daemon with
  its workers: summed RSS and summed PSS (``smaps_rollup``; target <= 700 MiB with the Q4 model loaded).

``--daemon-only`` measures the last item alone (on the real model the in-process figures take about 20 minutes
on 2 cores). Each in-process throughput figure is the best of ``--rounds`` runs. Timings are figures to read, never test
assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memories.config import DEFAULT_LOCAL_THREADS, RagConfig
from memories.models.embedding import document_input, query_input
from memories.models.local_onnx import GRAPH_PATH, PAD_ID, LocalOnnxEmbedder
from memories.models.telemetry import disable_telemetry_environment
from memories.protocol import MemoryAdd, RagIndex, RagSearch
from memories.rag.notes import note_chunks
from ops.bench.harness import BenchHome, proportional_megabytes, resident_megabytes, timed
from ops.corpus import CORPUS, load_notes, load_queries

REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Throughput:
    """One throughput figure: ``chunks`` texts of ``tokens`` real (unpadded) tokens in ``seconds``."""

    chunks: int
    tokens: int
    seconds: float

    @property
    def chunks_per_second(self) -> float:
        return self.chunks / self.seconds

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds


def build_tiny_model(out_dir: Path) -> Path:
    """Run ``ops/make_tiny_model.py`` into ``out_dir``; return ``out_dir``."""
    subprocess.run([sys.executable, str(REPO / "ops" / "make_tiny_model.py"), str(out_dir)], check=True)
    return out_dir


def corpus_chunks(limit: int, corpus: Path = CORPUS, seed: int = 7) -> list[str]:
    """Up to ``limit`` document inputs (prefix and title included) from the sample notes, in a shuffled order.

    The notes are cut by :func:`~memories.rag.notes.note_chunks` and titled as ``rag ingest`` titles them, so
    these are the model inputs the daemon would embed for the corpus: at most
    :data:`~memories.rag.chunking.MAX_CHUNK_CHARS` code points each, of mixed token lengths (prose and code,
    Chinese and English, a shorter last chunk per note).
    """
    return [document_input(title, text) for title, text in corpus_texts(limit, corpus, seed)]


def corpus_texts(limit: int, corpus: Path = CORPUS, seed: int = 7) -> list[tuple[str, str]]:
    """The ``(title, chunk text)`` pairs behind :func:`corpus_chunks`, in the same order."""
    pairs = [(note.title, chunk.text) for note in load_notes(corpus) for chunk in note_chunks(note.body)]
    random.Random(seed).shuffle(pairs)
    return pairs[:limit]


def bare_loop(
    embedder: LocalOnnxEmbedder, inputs: Sequence[str], rounds: int, *, length_sorted: bool = True
) -> Throughput:
    """A plain ``InferenceSession`` with the embedder's settings over the embedder's batches, ids prepared ahead.

    Only ``session.run`` is timed: this is the ceiling the embedder (and the daemon) are measured against.
    ``length_sorted=False`` takes batches in input order instead: the graph-only cost of padding.
    """
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = embedder.threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.add_session_config_entry("session.inter_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(str(embedder.model_dir / GRAPH_PATH), sess_options=options)
    encoded = [embedder.token_ids(text) for text in inputs]
    size = embedder.batch_size
    if length_sorted:
        batches = embedder.batches(inputs)
    else:
        batches = [list(range(first, min(first + size, len(inputs)))) for first in range(0, len(inputs), size)]
    feeds = [_padded([encoded[i] for i in positions]) for positions in batches]
    session.run(["sentence_embedding"], feeds[0])  # warm-up: first-run allocations
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for feed in feeds:
            session.run(["sentence_embedding"], feed)
        best = min(best, time.perf_counter() - start)
    return Throughput(len(inputs), sum(map(len, encoded)), best)


def embedder_throughput(embedder: LocalOnnxEmbedder, inputs: Sequence[str], rounds: int) -> Throughput:
    """:meth:`LocalOnnxEmbedder.embed` end to end (tokenization, length-sorted batches, checks, normalization)."""
    embedder.embed(inputs[: embedder.batch_size])  # warm-up
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        embedder.embed(inputs)
        best = min(best, time.perf_counter() - start)
    return Throughput(len(inputs), sum(len(embedder.token_ids(text)) for text in inputs), best)


def tokenization(embedder: LocalOnnxEmbedder, inputs: Sequence[str], rounds: int) -> Throughput:
    """:meth:`LocalOnnxEmbedder.token_ids` alone: the share of the embedder's time the graph does not take."""
    best = float("inf")
    tokens = 0
    for _ in range(rounds):
        start = time.perf_counter()
        tokens = sum(len(embedder.token_ids(text)) for text in inputs)
        best = min(best, time.perf_counter() - start)
    return Throughput(len(inputs), tokens, best)


def unsorted_throughput(embedder: LocalOnnxEmbedder, inputs: Sequence[str], rounds: int) -> Throughput:
    """Like :func:`embedder_throughput` but batches taken in input order, so short texts pad to long ones."""
    size = embedder.batch_size
    embedder.embed_batch(inputs[:size])
    best = float("inf")
    for _ in range(rounds):
        start = time.perf_counter()
        for first in range(0, len(inputs), size):
            embedder.embed_batch(inputs[first : first + size])
        best = min(best, time.perf_counter() - start)
    return Throughput(len(inputs), sum(len(embedder.token_ids(text)) for text in inputs), best)


def query_latency(embedder: LocalOnnxEmbedder, queries: Sequence[str], repeats: int) -> dict[str, float]:
    """p50 and p95 in milliseconds of embedding one query (prefix added) per call."""
    embedder.embed([query_input(queries[0])])
    samples = []
    for _ in range(repeats):
        for query in queries:
            start = time.perf_counter()
            embedder.embed([query_input(query)])
            samples.append((time.perf_counter() - start) * 1000)
    p50, p95 = np.percentile(samples, [50, 95])
    return {"p50_ms": float(p50), "p95_ms": float(p95), "samples": len(samples)}


def daemon_throughput(
    model_dir: Path, texts: Sequence[str], *, threads: int, batch_size: int, max_tokens: int
) -> dict[str, Any]:
    """``rag index`` through a real daemon (supervisor, index and embedding workers) on the same model and settings.

    Each text (a chunk's text, at most one chunk long) becomes one record titled ``note <i>``, so the daemon embeds
    exactly the inputs ``document_input("note <i>", text)`` that the bare loop is given (checked: a text the
    chunker cut in two raises ``RuntimeError``). The model is used as a ``local_model_dir``, with a job budget of a
    day so that a slow or shared machine finishes the run in one ``rag index``.
    Returns the throughput, the bare-loop throughput over the *same* model inputs (prefix, title and text), the
    resident and proportional memory (MiB) of the daemon and its workers after the run, with the embedding
    worker's peak, and the 1-minute load average before and after ``rag index`` (the machine may be shared).
    """
    config = (
        f"[daemon]\njob_budget_seconds = 86400\n"
        f"[rag]\nlocal_model_dir = '{model_dir}'\nlocal_threads = {threads}\nauto_index = 'off'\n"
        f"embed_batch_size = {batch_size}\nmax_tokens = {max_tokens}\n"
    )
    titles = [f"note {number}" for number in range(len(texts))]
    with BenchHome(config) as home:
        home.cli("vault", "create", "bench")
        for title, text in zip(titles, texts, strict=True):
            home.client.request(
                MemoryAdd(vault="bench", kind="card", sensitivity="general", title=title, body=text.encode())
            )
        home.client.request(RagSearch(vault="bench", query="warm", mode="bm25"))  # build the lexical cache first
        load_before = os.getloadavg()[0]
        seconds = timed(lambda: home.client.request(RagIndex(vault="bench")))
        load_after = os.getloadavg()[0]
        status = home.cli("rag", "status", "bench")
        if status["chunks"] != len(texts):
            raise RuntimeError(f"{len(texts)} texts made {status['chunks']} chunks: the figures would not compare")
        pids = home.daemon_pids()
        embedding_pid = next(w["pid"] for w in home.cli("daemon", "status")["workers"] if w["name"] == "embedding")
        resident = resident_megabytes(pids)
        proportional = proportional_megabytes(pids)
        embedding_peak = (
            float(
                next(
                    line.split()[1]
                    for line in Path(f"/proc/{embedding_pid}/status").read_text().splitlines()
                    if line.startswith("VmHWM:")
                )
            )
            / 1024
        )
    embedder = LocalOnnxEmbedder(model_dir, threads=threads, max_tokens=max_tokens, batch_size=batch_size)
    inputs = [document_input(title, text) for title, text in zip(titles, texts, strict=True)]
    tokens = sum(len(embedder.token_ids(text)) for text in inputs)
    bare = bare_loop(embedder, inputs, rounds=1)
    daemon = Throughput(status["embedded"], tokens, seconds)
    return {
        "daemon_rag_index": _figures(daemon),
        "bare_same_inputs": _figures(bare),
        "daemon_over_bare": daemon.chunks_per_second / bare.chunks_per_second,
        "load_average_1m": [load_before, load_after],
        "resident_mib_daemon_and_workers": resident,
        "proportional_mib_daemon_and_workers": proportional,
        "embedding_worker_peak_mib": embedding_peak,
    }


def peak_rss_mib() -> float:
    """Peak resident memory of this process in MiB (``ru_maxrss`` is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run(
    model_dir: Path,
    *,
    threads: int,
    batch_size: int,
    max_tokens: int,
    chunks: int,
    rounds: int,
    daemon_only: bool = False,
) -> dict[str, Any]:
    """Every figure of the module docstring for the model in ``model_dir``, as a JSON-able dict (``daemon_only``:
    the settings and ``through_daemon`` alone)."""
    texts = corpus_texts(chunks)
    inputs = [document_input(title, text) for title, text in texts]
    settings = {"model_dir": str(model_dir), "threads": threads, "batch_size": batch_size, "max_tokens": max_tokens}
    through_daemon = daemon_throughput(
        model_dir, [text for _, text in texts], threads=threads, batch_size=batch_size, max_tokens=max_tokens
    )
    if daemon_only:
        return {**settings, "chunks": len(inputs), "through_daemon": through_daemon}
    embedder = LocalOnnxEmbedder(model_dir, threads=threads, max_tokens=max_tokens, batch_size=batch_size)
    bare = bare_loop(embedder, inputs, rounds)
    bare_unsorted = bare_loop(embedder, inputs, rounds, length_sorted=False)
    local = embedder_throughput(embedder, inputs, rounds)
    unsorted = unsorted_throughput(embedder, inputs, rounds)
    tokenizer = tokenization(embedder, inputs, rounds)
    lengths = [len(embedder.token_ids(text)) for text in inputs]
    return {
        **settings,
        "space_key": embedder.space_key,
        "warnings": embedder.warnings,
        "chunks": len(inputs),
        "tokens_per_chunk": {"min": min(lengths), "mean": float(np.mean(lengths)), "max": max(lengths)},
        "bare_onnxruntime": _figures(bare),
        "bare_onnxruntime_unsorted": _figures(bare_unsorted),
        "local_onnx": _figures(local),
        "local_over_bare": local.chunks_per_second / bare.chunks_per_second,
        "unsorted_batches": _figures(unsorted),
        "tokenization_only": _figures(tokenizer),
        "sorted_over_unsorted": local.chunks_per_second / unsorted.chunks_per_second,
        "bare_sorted_over_unsorted": bare.chunks_per_second / bare_unsorted.chunks_per_second,
        "query_latency": query_latency(embedder, [query.query for query in load_queries()], repeats=5),
        "peak_rss_mib": peak_rss_mib(),
        "through_daemon": through_daemon,
    }


def main(argv: list[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    disable_telemetry_environment()
    defaults = RagConfig()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="an installed model folder (default: build the tiny model)")
    parser.add_argument("--threads", type=int, default=min(DEFAULT_LOCAL_THREADS, cores))
    parser.add_argument("--batch-size", type=int, default=defaults.embed_batch_size)
    parser.add_argument("--max-tokens", type=int, default=defaults.max_tokens)
    parser.add_argument("--chunks", type=int, default=400, help="corpus chunks to embed")
    parser.add_argument("--rounds", type=int, default=3, help="runs per throughput figure (best is kept)")
    parser.add_argument("--daemon-only", action="store_true", help="only the figures through the daemon")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    settings = {
        "daemon_only": args.daemon_only,
        "threads": args.threads,
        "batch_size": args.batch_size,
        "max_tokens": args.max_tokens,
        "chunks": args.chunks,
        "rounds": args.rounds,
    }
    if args.model_dir is not None:
        figures = run(args.model_dir, **settings)
    else:
        with tempfile.TemporaryDirectory(prefix="memories-bench-") as scratch:
            figures = run(build_tiny_model(Path(scratch) / "tiny-model"), **settings)
    print(json.dumps(figures, indent=2) if args.json else _report(figures))
    return 0


def _padded(encoded: list[list[int]]) -> dict[str, np.ndarray]:
    width = max(map(len, encoded))
    input_ids = np.full((len(encoded), width), PAD_ID, dtype=np.int64)
    attention_mask = np.zeros_like(input_ids)
    for row, ids in enumerate(encoded):
        input_ids[row, : len(ids)] = ids
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def _figures(throughput: Throughput) -> dict[str, float]:
    return {
        **asdict(throughput),
        "chunks_per_second": throughput.chunks_per_second,
        "tokens_per_second": throughput.tokens_per_second,
    }


def _report(figures: dict[str, Any]) -> str:
    lines = [
        f"model        {figures['model_dir']}",
        f"settings     threads={figures['threads']} batch_size={figures['batch_size']} "
        f"max_tokens={figures['max_tokens']}",
    ]
    if "local_onnx" in figures:
        lines += _in_process_report(figures)
    else:
        lines.append(f"corpus       {figures['chunks']} chunks")
    daemon = figures["through_daemon"]
    lines += [
        "",
        f"rag index (daemon)   {daemon['daemon_rag_index']['chunks_per_second']:.1f} chunks/s, "
        f"{daemon['daemon_rag_index']['tokens_per_second']:.0f} tokens/s; bare loop on the same inputs "
        f"{daemon['bare_same_inputs']['chunks_per_second']:.1f} chunks/s",
        f"daemon / bare        {daemon['daemon_over_bare']:.3f}   (target >= 0.95; 1-minute load average "
        f"{daemon['load_average_1m'][0]:.2f} before, {daemon['load_average_1m'][1]:.2f} after)",
        f"resident memory      {daemon['resident_mib_daemon_and_workers']:.0f} MiB daemon + workers "
        f"(embedding worker peak {daemon['embedding_worker_peak_mib']:.0f} MiB)",
        f"proportional memory  {daemon['proportional_mib_daemon_and_workers']:.0f} MiB PSS, daemon + workers "
        "(target <= 700 MiB with the Q4 model)",
    ]
    lines += [f"warning      {warning}" for warning in figures.get("warnings", [])]
    return "\n".join(lines)


def _in_process_report(figures: dict[str, Any]) -> list[str]:
    bare, local, unsorted = figures["bare_onnxruntime"], figures["local_onnx"], figures["unsorted_batches"]
    tokenizer = figures["tokenization_only"]
    bare_unsorted = figures["bare_onnxruntime_unsorted"]
    latency = figures["query_latency"]
    tokens = figures["tokens_per_chunk"]
    return [
        f"space key    {figures['space_key']}",
        f"corpus       {figures['chunks']} chunks, tokens per chunk min {tokens['min']} "
        f"mean {tokens['mean']:.0f} max {tokens['max']}",
        "",
        f"{'':24}{'chunks/s':>12}{'tokens/s':>12}",
        f"{'bare onnxruntime':24}{bare['chunks_per_second']:12.1f}{bare['tokens_per_second']:12.0f}",
        f"{'bare (unsorted)':24}{bare_unsorted['chunks_per_second']:12.1f}{bare_unsorted['tokens_per_second']:12.0f}",
        f"{'local_onnx (sorted)':24}{local['chunks_per_second']:12.1f}{local['tokens_per_second']:12.0f}",
        f"{'local_onnx (unsorted)':24}{unsorted['chunks_per_second']:12.1f}{unsorted['tokens_per_second']:12.0f}",
        f"{'tokenization only':24}{tokenizer['chunks_per_second']:12.1f}{tokenizer['tokens_per_second']:12.0f}",
        "",
        f"local / bare         {figures['local_over_bare']:.3f}   (target >= 0.95)",
        f"sorted / unsorted    {figures['sorted_over_unsorted']:.2f}x  (target >= 1.3x; "
        f"graph only {figures['bare_sorted_over_unsorted']:.2f}x)",
        f"query latency        p50 {latency['p50_ms']:.2f} ms, p95 {latency['p95_ms']:.2f} ms "
        f"({latency['samples']} queries)",
        f"peak RSS             {figures['peak_rss_mib']:.0f} MiB (this process)",
    ]


if __name__ == "__main__":
    sys.exit(main())

"""Search quality benchmark through the daemon: nDCG@10, Recall@10, MRR@10 and p50 latency per mode (issue 11).

Usage::

    python -m ops.bench.quality SET [--model-dir DIR] [--docs N] [--queries N] [--threads N] [--headings] [--json]

``SET`` is either a retrieval set folder (``corpus.jsonl`` ``{"id","title","text"}``, ``queries.jsonl``
``{"id","text"}``, ``qrels.tsv`` with a ``query_id doc_id relevance`` header, as in ``../shared/devsets``) or
the sample corpus folder (``tests/corpus``: ``MANIFEST.tsv`` and ``queries.md``). Without ``--model-dir`` the
tiny test model is built and used (the figures then mean nothing; the code path is what CI checks).

What it does, as a user would:

1. **Files.** A set's documents are written as ``<id>.md`` in a scratch folder: the text alone when the title is
   empty (an untitled note), else ``# <title>``, a blank line and the text. The corpus is used as it is.
2. **Daemon.** A throwaway home (:class:`ops.bench.harness.BenchHome`) with ``[rag] local_model_dir`` set to the
   model; ``rag ingest`` of the folder, then ``rag index`` until every chunk has a vector.
3. **Searches.** Every query in each mode, ``--limit 100``: ``bm25``, ``vector``, ``hybrid``, ``hybrid
   --no-rerank`` and ``vector --no-rerank`` (the cosine ranking alone, what the bare reference compares
   with), through the client library (the CLI's own request path, without a process start per query).
4. **Scoring at the record level**: a record counts at the rank of its first chunk; later chunks of the same
   record are skipped. Gains are the graded relevances; nDCG@10, Recall@10 and MRR@10 as
   :mod:`memories.rag.metrics` (``rag bench``'s) computes them.

   For a set, relevance comes from ``qrels.tsv`` (documents matched by file name); for ``queries.md`` the
   "expected top" note has relevance 2 and the "also relevant" ones 1, matched by ``source``.
5. **Subsets**: the query-id prefix before ``-`` (a set's ``zht2zhs``) or the id's letters (``queries.md``'s
   ``T``, ``S``, ``E``, ``M``), besides ``all``.
   With ``--headings`` (the sample corpus only), the same index also answers the heading check of
   :mod:`ops.bench.headings` (hundreds of section headings as queries, each note's translations also relevant),
   reported as a second table with subsets ``HT``, ``HS``, ``HE`` and ``HN``.
6. **Paired differences**: each hybrid row minus the better arm (``bm25`` or ``vector``, by mean nDCG@10), query
   by query, with a 95 % bootstrap interval (:data:`RESAMPLES` resamples of the queries, seed :data:`SEED`).
7. **Bare reference** on the same model, in this process: every document embedded whole with the model card's
   document prompt (``title: {title | "none"} | text: …``, the first :data:`~memories.config.RagConfig.max_tokens`
   tokens), every query with its query prompt, ranked by cosine; the same scoring. The product's ``vector`` row
   should be within 0.01 of it.

After ``rag index`` it also records the summed PSS (``smaps_rollup``) of the daemon and its workers, the memory
figure of issue 11 for the sample corpus, and the 1-minute load average before and after it (the machine may be
shared). The JSON output adds, per row and query, nDCG@10 and the first three document ids.

p50 latency is the median seconds of one search request (socket, supervisor, workers; the query embedding
included in ``vector`` and ``hybrid``), shown in ms. Figures are for reading, never test assertions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from memories.config import DEFAULT_LOCAL_THREADS, RagConfig
from memories.errors import MemoriesError
from memories.models.embedding import document_input, query_input
from memories.models.telemetry import disable_telemetry_environment
from memories.protocol import RagIndex, RagSearch
from memories.rag.metrics import mrr_at, ndcg_at, recall_at
from ops.bench.embed import build_tiny_model
from ops.bench.harness import BenchHome, proportional_megabytes
from ops.bench.headings import heading_queries
from ops.corpus import load_notes, load_queries

MODES: tuple[tuple[str, str, bool], ...] = (
    ("bm25", "bm25", False),
    ("vector", "vector", False),
    ("hybrid", "hybrid", False),
    ("hybrid --no-rerank", "hybrid", True),
    ("vector --no-rerank", "vector", True),
)
"""(row label, search mode, no_rerank) of each product row."""
BARE = "bare vector reference"
RESAMPLES = 1000
"""Bootstrap resamples of the paired differences (:func:`paired_difference`)."""
SEED = 24
"""Seed of the bootstrap: the same intervals on every run of the same figures."""
LIMIT = 100


@dataclass(frozen=True)
class Document:
    """One document of a set: ``id`` (also its file name stem for sets, its ``source`` for the corpus)."""

    id: str
    title: str
    text: str


@dataclass(frozen=True)
class Query:
    """One query: ``relevance`` maps document ids to graded relevance (> 0)."""

    id: str
    text: str
    relevance: dict[str, int]

    @property
    def subset(self) -> str:
        """``zht2zhs`` for ``zht2zhs-38``; ``T`` for ``T1``; ``HT`` for ``HT12``."""
        return self.id.split("-", 1)[0] if "-" in self.id else self.id.rstrip("0123456789")


@dataclass
class Benchmark:
    """A loaded set: its documents, queries and how to lay it out as files to ingest."""

    name: str
    documents: list[Document]
    queries: list[Query]
    folder: Path | None = None
    """The folder to ingest when the documents are already files (the corpus); else they are written out."""
    excludes: tuple[str, ...] = ()


@dataclass
class Scores:
    """Per-query figures of one row, keyed by query id."""

    ndcg: dict[str, float] = field(default_factory=dict)
    recall: dict[str, float] = field(default_factory=dict)
    mrr: dict[str, float] = field(default_factory=dict)
    seconds: list[float] = field(default_factory=list)
    top: dict[str, list[str]] = field(default_factory=dict)
    """The first three document ids of each query's ranking."""

    def add(self, query: Query, ranked: Sequence[str], seconds: float | None = None) -> None:
        """Score one query's ranked document ids (duplicates already removed)."""
        self.ndcg[query.id] = ndcg_at(ranked, query.relevance)
        self.recall[query.id] = recall_at(ranked, query.relevance)
        self.mrr[query.id] = mrr_at(ranked, query.relevance)
        self.top[query.id] = list(ranked[:3])
        if seconds is not None:
            self.seconds.append(seconds)

    def summary(self, query_ids: Iterable[str]) -> dict[str, float]:
        """Means over ``query_ids``."""
        ids = list(query_ids)
        return {
            "ndcg@10": statistics.fmean(self.ndcg[q] for q in ids),
            "recall@10": statistics.fmean(self.recall[q] for q in ids),
            "mrr@10": statistics.fmean(self.mrr[q] for q in ids),
        }


def load_set(folder: Path, *, docs: int | None = None, queries: int | None = None) -> Benchmark:
    """A retrieval set folder, or the sample corpus folder (``queries.md``), as a :class:`Benchmark`.

    ``queries`` keeps the first N queries; ``docs`` keeps at most N documents, the relevant ones of the kept
    queries first, then the others in file order (so every kept query can still be answered).

    Raises:
        ValueError: the folder holds neither layout, or a qrel names an unknown document.
    """
    if (folder / "queries.md").is_file():
        notes = load_notes(folder)
        documents = [Document(note.source or note.id, note.title, note.body) for note in notes]
        kept = [
            Query(row.id, row.query, {row.expected: 2, **dict.fromkeys(row.also_relevant, 1)})
            for row in load_queries(folder)
        ]
        excludes = ("SOURCES.md", "queries.md")
        return _bounded(Benchmark(folder.name, documents, kept, folder=folder, excludes=excludes), docs, queries)
    if not (folder / "corpus.jsonl").is_file():
        raise ValueError(f"{folder} has neither corpus.jsonl nor queries.md")
    documents = [Document(row["id"], row.get("title") or "", row["text"]) for row in _jsonl(folder / "corpus.jsonl")]
    relevance: dict[str, dict[str, int]] = {}
    lines = (folder / "qrels.tsv").read_text(encoding="utf-8").splitlines()
    for line in lines[1:]:
        if line.strip():
            query_id, doc_id, grade = line.split("\t")
            relevance.setdefault(query_id, {})[doc_id] = int(grade)
    known = {document.id for document in documents}
    unknown = {doc for grades in relevance.values() for doc in grades} - known
    if unknown:
        raise ValueError(f"{folder / 'qrels.tsv'} names {len(unknown)} documents not in corpus.jsonl")
    kept = [
        Query(row["id"], row["text"], relevance[row["id"]])
        for row in _jsonl(folder / "queries.jsonl")
        if row["id"] in relevance
    ]
    return _bounded(Benchmark(folder.name, documents, kept), docs, queries)


def _bounded(benchmark: Benchmark, docs: int | None, queries: int | None) -> Benchmark:
    if queries is not None:
        benchmark.queries = benchmark.queries[:queries]
    if docs is not None:
        if benchmark.folder is not None:
            raise ValueError("--docs applies to a set folder, not to the sample corpus")
        needed = {doc for query in benchmark.queries for doc in query.relevance}
        first = [document for document in benchmark.documents if document.id in needed]
        rest = [document for document in benchmark.documents if document.id not in needed]
        chosen = {document.id for document in (first + rest)[: max(docs, len(first))]}
        benchmark.documents = [document for document in benchmark.documents if document.id in chosen]
    return benchmark


def headings_check(corpus: Benchmark, queries: int | None = None) -> Benchmark:
    """The heading check (:mod:`ops.bench.headings`) over the sample corpus ``corpus``, ids prefixed ``H``; the
    first ``queries`` only when given.

    Raises:
        ValueError: ``corpus`` is a retrieval set, not the sample corpus.
    """
    if corpus.folder is None:
        raise ValueError("--headings applies to the sample corpus, not to a retrieval set")
    kept = [Query("H" + query.id, query.text, query.relevance) for query in heading_queries(corpus.folder)]
    return Benchmark(f"{corpus.name} headings", corpus.documents, kept[:queries], folder=corpus.folder)


def write_files(documents: Sequence[Document], folder: Path) -> None:
    """Each document as ``<id>.md``: the text alone when untitled, else ``# title``, a blank line, the text."""
    for document in documents:
        body = f"# {document.title}\n\n{document.text}\n" if document.title else f"{document.text}\n"
        (folder / f"{document.id}.md").write_text(body, encoding="utf-8")


def run_product(
    benchmark: Benchmark, model_dir: Path, threads: int, queries: Sequence[Query]
) -> tuple[dict[str, Scores], dict[str, Any]]:
    """Ingest and index the benchmark's documents through a daemon and search ``queries`` (the benchmark's, and
    the heading check's with ``--headings``); per-row scores and what the index held."""
    config = (
        f"[daemon]\njob_budget_seconds = 86400\n[rag]\nlocal_model_dir = '{model_dir}'\nlocal_threads = {threads}\n"
        "auto_index = 'off'\n"
    )
    with tempfile.TemporaryDirectory(prefix="memories-quality-") as scratch, BenchHome(config) as home:
        folder = benchmark.folder
        if folder is None:
            folder = Path(scratch)
            write_files(benchmark.documents, folder)
        excludes = [arg for name in benchmark.excludes for arg in ("--exclude", name)]
        home.cli("vault", "create", "bench")
        started = time.perf_counter()
        home.cli("rag", "ingest", "bench", str(folder), "--recursive", *excludes)
        ingest_seconds = time.perf_counter() - started
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        home.client.request(RagIndex(vault="bench"))
        index_seconds = time.perf_counter() - started
        load_after = os.getloadavg()[0]
        pss = proportional_megabytes(home.daemon_pids())
        status = home.cli("rag", "status", "bench")
        if status["missing"]:
            raise RuntimeError(f"rag index left {status['missing']} chunks without a vector")
        to_id = _source_to_id(benchmark)
        rows = {label: Scores() for label, _, _ in MODES}
        for query in queries:
            for label, mode, no_rerank in MODES:
                request = RagSearch(vault="bench", query=query.text, mode=mode, limit=LIMIT, no_rerank=no_rerank)
                started = time.perf_counter()
                report = home.client.request(request).result
                seconds = time.perf_counter() - started
                if report.mode != mode:
                    raise RuntimeError(f"asked for {mode}, the daemon searched in {report.mode}")
                ranked = list(dict.fromkeys(to_id(hit.source or "") for hit in report.results))
                rows[label].add(query, ranked, seconds)
    held = {
        "records": status["records"],
        "chunks": status["chunks"],
        "ingest_seconds": ingest_seconds,
        "index_seconds": index_seconds,
        "pss_mib_after_index": pss,
        "load_average_1m": [load_before, load_after],
    }
    return rows, held


def _source_to_id(benchmark: Benchmark) -> Any:
    if benchmark.folder is not None:
        return lambda source: source
    return lambda source: source.removesuffix(".md")


def run_bare(benchmark: Benchmark, model_dir: Path, threads: int, queries: Sequence[Query]) -> Scores:
    """The bare vector reference: the benchmark's documents whole and ``queries``, with the model card's prompts,
    cosine ranking."""
    from memories.models.local_onnx import LocalOnnxEmbedder

    defaults = RagConfig()
    embedder = LocalOnnxEmbedder(
        model_dir, threads=threads, max_tokens=defaults.max_tokens, batch_size=defaults.embed_batch_size
    )
    inputs = [document_input(document.title or None, document.text) for document in benchmark.documents]
    documents = embedder.embed(inputs)
    similarity = embedder.embed([query_input(query.text) for query in queries]) @ documents.T
    ids = [document.id for document in benchmark.documents]
    scores = Scores()
    for query, row in zip(queries, similarity, strict=True):
        order = np.argsort(-row, kind="stable")[:LIMIT]
        scores.add(query, [ids[position] for position in order])
    return scores


def paired_difference(
    first: Sequence[float], second: Sequence[float], resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``first[i] - second[i]`` over the queries and its 95 % percentile bootstrap
    interval (Efron & Tibshirani, 1993): the queries resampled with replacement ``resamples`` times by numpy's
    default generator seeded with ``seed``, the 2.5th and 97.5th percentiles of the resampled means.

    >>> paired_difference([1.0, 1.0], [1.0, 1.0])
    (0.0, 0.0, 0.0)
    """
    differences = np.asarray(first, dtype=np.float64) - np.asarray(second, dtype=np.float64)
    picks = np.random.default_rng(seed).integers(0, len(differences), size=(resamples, len(differences)))
    means = differences[picks].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(differences.mean()), float(low), float(high)


def paired(ids: Sequence[str], rows: dict[str, Scores]) -> dict[str, Any]:
    """``{"better_arm", row: {metric: [mean, low, high]}}``: each hybrid row minus the better arm (``bm25`` or
    ``vector``, whichever has the higher mean nDCG@10 over ``ids``), query by query (:func:`paired_difference`)."""
    better = max(("bm25", "vector"), key=lambda arm: statistics.fmean(rows[arm].ndcg[q] for q in ids))
    result: dict[str, Any] = {"better_arm": better}
    for label in ("hybrid", "hybrid --no-rerank"):
        result[label] = {
            metric: list(
                paired_difference(
                    [getattr(rows[label], field)[q] for q in ids], [getattr(rows[better], field)[q] for q in ids]
                )
            )
            for metric, field in (("ndcg@10", "ndcg"), ("recall@10", "recall"), ("mrr@10", "mrr"))
        }
    return result


def report(benchmark: Benchmark, rows: dict[str, Scores]) -> dict[str, Any]:
    """``{"set", "queries", "subsets": {subset: {row: {metric: value}}}, "paired": ..., "p50_ms": {row: ms},
    "per_query": {row: {query id: {"ndcg@10", "top"}}}}`` (``top``: the first three document ids; ``paired``: see
    :func:`paired`) over the benchmark's queries; ``p50_ms`` is over every search of ``rows``."""
    subsets: dict[str, list[str]] = {"all": [query.id for query in benchmark.queries]}
    for query in benchmark.queries:
        subsets.setdefault(query.subset, []).append(query.id)
    return {
        "set": benchmark.name,
        "queries": len(benchmark.queries),
        "documents": len(benchmark.documents),
        "subsets": {
            name: {"n": len(ids), **{label: scores.summary(ids) for label, scores in rows.items()}}
            for name, ids in subsets.items()
        },
        "paired": paired(subsets["all"], rows),
        "p50_ms": {label: statistics.median(scores.seconds) * 1000 for label, scores in rows.items() if scores.seconds},
        "per_query": {
            label: {query: {"ndcg@10": scores.ndcg[query], "top": scores.top[query]} for query in subsets["all"]}
            for label, scores in rows.items()
        },
    }


def markdown(figures: dict[str, Any]) -> str:
    """nDCG@10 (Recall@10, MRR@10) per subset and row as a Markdown table, then p50 latency."""
    labels = [label for label, _, _ in MODES] + ([BARE] if BARE in figures["subsets"]["all"] else [])
    lines = [
        f"**{figures['set']}** ({figures['documents']} documents, {figures['queries']} queries; model "
        f"{figures['model']}): nDCG@10 / Recall@10 / MRR@10",
        "",
        "| subset | n | " + " | ".join(labels) + " |",
        "|---|---:|" + "---:|" * len(labels),
    ]
    for name, row in figures["subsets"].items():
        cells = [
            f"{row[label]['ndcg@10']:.3f} / {row[label]['recall@10']:.3f} / {row[label]['mrr@10']:.3f}"
            for label in labels
        ]
        lines.append(f"| {name} | {row['n']} | " + " | ".join(cells) + " |")
    better = figures["paired"]["better_arm"]
    lines.append("")
    for label in ("hybrid", "hybrid --no-rerank"):
        cells = ", ".join(
            f"{metric} {mean:+.4f} [{low:+.4f}, {high:+.4f}]"
            for metric, (mean, low, high) in figures["paired"][label].items()
        )
        lines.append(f"{label} − {better} (the better arm), per query: {cells}.")
    latency = ", ".join(f"{label} {ms:.1f} ms" for label, ms in figures["p50_ms"].items())
    lines += ["", f"p50 search latency: {latency}."]
    held = figures["index"]
    lines.append(
        f"Index: {held['records']} records, {held['chunks']} chunks; ingest {held['ingest_seconds']:.1f} s, "
        f"rag index {held['index_seconds']:.1f} s; daemon and workers {held['pss_mib_after_index']:.0f} MiB PSS after "
        f"rag index (1-minute load average {held['load_average_1m'][0]:.2f} before it, "
        f"{held['load_average_1m'][1]:.2f} after)."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    disable_telemetry_environment()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("set", type=Path, help="a retrieval set folder, or the sample corpus folder")
    parser.add_argument("--model-dir", type=Path, help="the model folder (default: build the tiny model)")
    parser.add_argument(
        "--docs", type=_positive, help="keep at most N documents (the kept queries' relevant ones first)"
    )
    parser.add_argument("--queries", type=_positive, help="keep the first N queries")
    parser.add_argument("--threads", type=int, default=min(DEFAULT_LOCAL_THREADS, cores))
    parser.add_argument("--no-bare", action="store_true", help="skip the bare vector reference")
    parser.add_argument("--headings", action="store_true", help="also the heading check (the sample corpus only)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        benchmark = load_set(args.set, docs=args.docs, queries=args.queries)
        checks = [benchmark, *([headings_check(benchmark, args.queries)] if args.headings else [])]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    asked = [query for check in checks for query in check.queries]
    with tempfile.TemporaryDirectory(prefix="memories-bench-") as scratch:
        model_dir = args.model_dir or build_tiny_model(Path(scratch) / "tiny-model")
        try:
            rows, held = run_product(benchmark, model_dir.resolve(), args.threads, asked)
            if not args.no_bare:
                rows[BARE] = run_bare(benchmark, model_dir, args.threads, asked)
        except MemoriesError as exc:
            print(f"error: {exc.code}: {exc}", file=sys.stderr)
            return 1
    model = str(args.model_dir) if args.model_dir else "tiny test model"
    figures = [report(check, rows) | {"model": model, "index": held} for check in checks]
    if args.json:
        print(
            json.dumps(figures[0] | ({"headings": figures[1]} if args.headings else {}), indent=2, ensure_ascii=False)
        )
    else:
        print("\n\n".join(markdown(check) for check in figures))
    return 0


def _positive(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


if __name__ == "__main__":
    sys.exit(main())

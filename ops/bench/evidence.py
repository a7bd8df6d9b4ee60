"""Where the vector evidence threshold of ``rag ask`` sits for a model: the cosine of each query's relevant chunk
against its best irrelevant ones (issue 8, ``min_similarity``).

Usage::

    python -m ops.bench.evidence SET [SET ...] [--model-dir DIR] [--docs N] [--queries N] [--threads N] [--json]

``SET`` is a retrieval set folder or the sample corpus folder, as for :mod:`ops.bench.quality` (several sets are
pooled, and each is reported too). Without ``--model-dir`` the tiny test model is used (figures meaningless; the
code path is what CI checks).

In this process, with the product's recipe: every document cut by :func:`~memories.rag.notes.note_chunks`, each
chunk embedded as ``document_input(title or None, chunk)``, every query as ``query_input(query)``; cosine of each
query to every chunk. Then, as ``rag ask`` does in vector mode (the evidence filter runs over the semantic ranking
before ``--limit`` applies, :mod:`memories.rag.pipeline`), a chunk is *called evidence* at threshold ``t`` when its
cosine is at least ``t``, and the first :data:`LIMIT` such chunks are shown to the generation service. Per ``t``:

- **recall**: share of queries for which a chunk of a relevant document is shown;
- **precision**: share of the shown chunks that belong to a relevant document (over all queries);
- **false evidence without the answer**: the relevant documents removed (the question's answer is not in the
  vault), share of queries for which some chunk still reaches ``t``, so the generation service is called with
  unrelated text instead of ``insufficient_evidence``.

And the distributions (percentiles) of the relevant chunk's cosine (the best chunk of the best relevant
document), of the best irrelevant chunk's and of the :data:`LIMIT`-th irrelevant chunk's, per query subset.
The lexical half of the evidence rule (query-term coverage) is not measured here: it does not depend on the model.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memories.config import DEFAULT_LOCAL_THREADS, RagConfig
from memories.models.embedding import document_input, query_input
from memories.models.telemetry import disable_telemetry_environment
from memories.rag.notes import note_chunks
from ops.bench.embed import build_tiny_model
from ops.bench.quality import Benchmark, load_set

LIMIT = 8
"""Chunks ``rag ask`` shows the generation service by default (``--limit``)."""
THRESHOLDS = tuple(round(0.25 + 0.05 * step, 2) for step in range(11))
"""Candidate ``min_similarity`` values: 0.25 … 0.75."""
PERCENTILES = (5, 25, 50, 75, 95)


@dataclass(frozen=True)
class QueryCosines:
    """One query's cosines: ``relevant`` to the chunks of its relevant documents, ``irrelevant`` to all others
    (float32, best first)."""

    id: str
    subset: str
    relevant: np.ndarray
    irrelevant: np.ndarray


def cosines(benchmark: Benchmark, model_dir: Path, threads: int) -> list[QueryCosines]:
    """Embed ``benchmark`` with the product's recipe and return every query's cosines, split by relevance."""
    from memories.models.local_onnx import LocalOnnxEmbedder

    defaults = RagConfig()
    embedder = LocalOnnxEmbedder(
        model_dir, threads=threads, max_tokens=defaults.max_tokens, batch_size=defaults.embed_batch_size
    )
    owners: list[str] = []
    inputs: list[str] = []
    for document in benchmark.documents:
        for chunk in note_chunks(document.text):
            owners.append(document.id)
            inputs.append(document_input(document.title or None, chunk.text))
    chunks = embedder.embed(inputs)
    queries = embedder.embed([query_input(query.text) for query in benchmark.queries])
    owner = np.array(owners)
    result = []
    for query, row in zip(benchmark.queries, queries @ chunks.T, strict=True):
        relevant = np.isin(owner, [doc for doc, grade in query.relevance.items() if grade > 0])
        result.append(QueryCosines(query.id, query.subset, -np.sort(-row[relevant]), -np.sort(-row[~relevant])))
    return result


def threshold_table(rows: Sequence[QueryCosines], thresholds: Sequence[float] = THRESHOLDS) -> list[dict[str, float]]:
    """Recall, precision and false evidence without the answer (module docstring) at each threshold.

    >>> rows = [QueryCosines("q", "q", np.array([0.6]), np.array([0.45, 0.2]))]
    >>> [(r["threshold"], r["recall"], r["precision"], r["false_evidence"]) for r in threshold_table(rows, [0.4, 0.5])]
    [(0.4, 1.0, 0.5, 1.0), (0.5, 1.0, 1.0, 0.0)]
    """
    table = []
    for threshold in thresholds:
        found = shown = relevant_shown = alone = 0
        for row in rows:
            scored = sorted(
                [(float(c), True) for c in row.relevant if c >= threshold]
                + [(float(c), False) for c in row.irrelevant if c >= threshold],
                reverse=True,
            )[:LIMIT]
            hits = sum(1 for _, relevant in scored if relevant)
            found += hits > 0
            shown += len(scored)
            relevant_shown += hits
            alone += bool(len(row.irrelevant)) and float(row.irrelevant[0]) >= threshold
        table.append(
            {
                "threshold": threshold,
                "recall": found / len(rows),
                "precision": relevant_shown / shown if shown else 1.0,
                "false_evidence": alone / len(rows),
            }
        )
    return table


def distributions(rows: Sequence[QueryCosines]) -> dict[str, dict[str, list[float]]]:
    """Per subset (and ``all``): percentiles :data:`PERCENTILES` of the relevant chunk's cosine, of the best
    irrelevant chunk's and of the :data:`LIMIT`-th irrelevant chunk's."""
    subsets: dict[str, list[QueryCosines]] = {"all": list(rows)}
    for row in rows:
        subsets.setdefault(row.subset, []).append(row)
    result = {}
    for name, members in subsets.items():
        relevant = [float(row.relevant[0]) for row in members if len(row.relevant)]
        best = [float(row.irrelevant[0]) for row in members if len(row.irrelevant)]
        deep = [float(row.irrelevant[min(LIMIT, len(row.irrelevant)) - 1]) for row in members if len(row.irrelevant)]
        result[name] = {
            "n": [float(len(members))],
            "relevant": _percentiles(relevant),
            "best_irrelevant": _percentiles(best),
            f"irrelevant_{LIMIT}th": _percentiles(deep),
        }
    return result


def _percentiles(values: list[float]) -> list[float]:
    return [float(v) for v in np.percentile(values, PERCENTILES)] if values else []


def markdown(name: str, rows: Sequence[QueryCosines]) -> str:
    """The distributions and the threshold table of one set (or the pooled sets) as Markdown."""
    lines = [
        f"**{name}** ({len(rows)} queries): cosine percentiles {'/'.join(f'p{p}' for p in PERCENTILES)}",
        "",
        f"| subset | n | relevant chunk | best irrelevant | {LIMIT}th irrelevant |",
        "|---|---:|---|---|---|",
    ]
    for subset, figures in distributions(rows).items():
        cells = [" / ".join(f"{v:.2f}" for v in figures[key]) for key in ("relevant", "best_irrelevant")]
        cells.append(" / ".join(f"{v:.2f}" for v in figures[f"irrelevant_{LIMIT}th"]))
        lines.append(f"| {subset} | {int(figures['n'][0])} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "| min_similarity | recall | precision | false evidence without the answer |",
        "|---:|---:|---:|---:|",
    ]
    for row in threshold_table(rows):
        lines.append(
            f"| {row['threshold']:.2f} | {row['recall']:.3f} | {row['precision']:.3f} | {row['false_evidence']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    disable_telemetry_environment()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", type=Path, nargs="+", help="retrieval set folders, or the sample corpus folder")
    parser.add_argument("--model-dir", type=Path, help="the model folder (default: build the tiny model)")
    parser.add_argument("--docs", type=int, help="keep at most N documents per set")
    parser.add_argument("--queries", type=int, help="keep the first N queries per set")
    parser.add_argument("--threads", type=int, default=min(DEFAULT_LOCAL_THREADS, cores))
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    try:
        benchmarks = [load_set(folder, docs=args.docs, queries=args.queries) for folder in args.sets]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="memories-bench-") as scratch:
        model_dir = args.model_dir or build_tiny_model(Path(scratch) / "tiny-model")
        per_set = {benchmark.name: cosines(benchmark, model_dir, args.threads) for benchmark in benchmarks}
    pooled = [row for rows in per_set.values() for row in rows]
    model = str(args.model_dir) if args.model_dir else "tiny test model"
    if args.json:
        figures: dict[str, Any] = {
            name: {"distributions": distributions(rows), "thresholds": threshold_table(rows)}
            for name, rows in per_set.items()
        }
        if len(per_set) > 1:
            figures["pooled"] = {"distributions": distributions(pooled), "thresholds": threshold_table(pooled)}
        print(json.dumps({"model": model, "sets": figures}, indent=2))
        return 0
    parts = [f"model {model}"] + [markdown(name, rows) for name, rows in per_set.items()]
    if len(per_set) > 1:
        parts.append(markdown("pooled", pooled))
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

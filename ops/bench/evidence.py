"""The evidence rule of ``rag ask``, measured: where the vector threshold sits for a model (issue 8,
``min_similarity``), and what the whole rule lets through in each mode (issue 22).

Usage::

    python -m ops.bench.evidence SET [SET ...] [--model-dir DIR] [--docs N] [--queries N] [--threads N]
        [--vector-cache FILE] [--rule-only] [--json]

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

**The whole rule** (:func:`rule_figures`), as ``rag ask`` applies it: each document becomes the record ``rag
ingest`` makes of it (``<id>.md``, titled by its heading, else by its file name), in the index worker's own cache
(:class:`~memories.rag.pipeline.VaultCache`: chunks, BM25, vectors, fusion, reranker), and every query is searched
with ``evidence`` as ``rag ask`` searches (its BM25 query and the evidence filter, ``--limit 8``), in ``bm25``,
``vector`` and ``hybrid`` modes. The same three figures: *found* (a chunk of a relevant document is shown),
*precision* (share of the shown chunks that are relevant) and *reaches the model without the answer*: the queries
are split in :data:`FOLDS` folds, and each fold is asked of a cache without the relevant documents of its queries
(so about a tenth of the answers are missing for each query, not only its own: a query sees slightly fewer
distractors than in the full set). Per mode and, for the vector and hybrid modes, per threshold of
:data:`RULE_THRESHOLDS`.

With the whole rule, the ``weak_matches`` flag of ``rag search`` (issue 30 item 4) is measured too, at each
threshold: the share of queries flagged with their answer in the vault (false alarms; and of those, flagged
although a relevant record is among the :data:`SEARCH_LIMIT` results), and the share flagged when their answers
are removed (the same folds: what the flag should say). ``--rule-only`` skips the per-document cosine tables.

``--vector-cache FILE`` keeps the chunk vectors (by the model input's hash, so valid for any code version with the
same recipe and model) in an ``.npz`` outside the repository, so a rule can be measured before and after a change
without embedding again.
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

from memories import worker_protocol as w
from memories.config import DEFAULT_LOCAL_THREADS, RagConfig
from memories.models.embedding import DOCUMENT_PREFIX, document_input, query_input
from memories.models.telemetry import disable_telemetry_environment
from memories.rag.metrics import ndcg_at
from memories.rag.notes import note_chunks
from memories.rag.pipeline import VaultCache
from memories.rag.vectors import input_hash
from ops.bench.embed import build_tiny_model
from ops.bench.quality import Benchmark, load_set

LIMIT = 8
"""Chunks ``rag ask`` shows the generation service by default (``--limit``)."""
SEARCH_LIMIT = 10
"""Results ``rag search`` and ``memory_retrieve`` show by default (``--limit``): what ``weak_matches`` judges."""
THRESHOLDS = tuple(round(0.25 + 0.05 * step, 2) for step in range(11))
"""Candidate ``min_similarity`` values: 0.25 … 0.75."""
RULE_THRESHOLDS = (0.45, 0.5, 0.55, 0.6, 0.65)
"""``min_similarity`` values the whole rule is measured at, around the local default."""
PERCENTILES = (5, 25, 50, 75, 95)
FOLDS = 10
"""Folds of the queries for "without the answer" (each fold asked of a cache without its queries' answers)."""
SPACE = w.VectorSpace(key="bench", recipe=w.InputRecipe(prefix=DOCUMENT_PREFIX))
RULE_MODES = ("bm25", "vector", "hybrid")


class Vectors:
    """Chunk vectors by model input key, embedded once (and kept in ``cache`` when given), and query vectors."""

    def __init__(self, model_dir: Path, threads: int, cache: Path | None) -> None:
        from memories.models.local_onnx import LocalOnnxEmbedder

        defaults = RagConfig()
        self._embedder = LocalOnnxEmbedder(
            model_dir, threads=threads, max_tokens=defaults.max_tokens, batch_size=defaults.embed_batch_size
        )
        self._cache = cache
        self.by_key: dict[str, np.ndarray] = {}
        if cache is not None and cache.is_file():
            with np.load(cache) as stored:
                self.by_key = dict(zip(stored["keys"].tolist(), stored["vectors"], strict=True))

    def texts(self, inputs: Sequence[str]) -> np.ndarray:
        """float32[len(inputs), 768] for exact model inputs, embedding only those never seen (keyed as the index
        worker keys them, :func:`~memories.rag.vectors.input_hash`)."""
        keys = [input_hash(text) for text in inputs]
        todo = {key: text for key, text in zip(keys, inputs, strict=True) if key not in self.by_key}
        if todo:
            for key, vector in zip(todo, self._embedder.embed(list(todo.values())), strict=True):
                self.by_key[key] = vector
            if self._cache is not None:
                np.savez(self._cache, keys=np.array(list(self.by_key)), vectors=np.stack(list(self.by_key.values())))
        return np.stack([self.by_key[key] for key in keys]) if keys else np.empty((0, 768), dtype=np.float32)

    def fill(self, cache: VaultCache) -> None:
        """Store a vector for every chunk of ``cache``, embedding only inputs never seen."""
        plan = cache.vectors.missing(SPACE, 10**9)
        self.texts([item.text for item in plan.inputs])
        if plan.keys:
            matrix = np.stack([self.by_key[key] for key in plan.keys]).astype(np.float32)
            request = w.IndexStoreVectors(
                vault=cache.vault_id, space_key=SPACE.key, keys=plan.keys, vectors=matrix.tobytes(), dimension=768
            )
            cache.vectors.store_vectors(request)

    def queries(self, texts: Sequence[str]) -> np.ndarray:
        """float32[len(texts), 768] query vectors (the model card's query prompt)."""
        return self.texts([query_input(text) for text in texts])


@dataclass(frozen=True)
class QueryCosines:
    """One query's cosines: ``relevant`` to the chunks of its relevant documents, ``irrelevant`` to all others
    (float32, best first)."""

    id: str
    subset: str
    relevant: np.ndarray
    irrelevant: np.ndarray


def cosines(benchmark: Benchmark, vectors: Vectors) -> list[QueryCosines]:
    """Embed ``benchmark`` with the product's recipe and return every query's cosines, split by relevance."""
    owners: list[str] = []
    inputs: list[str] = []
    for document in benchmark.documents:
        for chunk in note_chunks(document.text):
            owners.append(document.id)
            inputs.append(document_input(document.title or None, chunk.text))
    chunks = vectors.texts(inputs)
    queries = vectors.queries([query.text for query in benchmark.queries])
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


def index_records(benchmark: Benchmark) -> list[w.IndexRecord]:
    """The records ``rag ingest`` makes of the documents as :func:`~ops.bench.quality.write_files` lays them out:
    ``<id>.md``, titled by its heading, else by its file name."""
    records = []
    for document in benchmark.documents:
        name = f"{document.id}.md"
        body = f"# {document.title}\n\n{document.text}\n" if document.title else f"{document.text}\n"
        title = document.title or name
        records.append(w.IndexRecord(id=document.id, revision=1, kind="card", title=title, body=body, source=name))
    return records


def _cache(records: Sequence[w.IndexRecord], vectors: Vectors) -> VaultCache:
    cache = VaultCache("bench")
    cache.apply(list(records), [])
    cache.stamp(1)
    vectors.fill(cache)
    return cache


def _shown(
    cache: VaultCache, query: str, vector: np.ndarray, mode: str, threshold: float | None, limit: int
) -> list[str]:
    """The record ids of the chunks ``rag ask`` would show for ``query`` (first ``limit``), in rank order."""
    request = _query(query, vector, mode, limit, evidence=w.Evidence(None if mode == "bm25" else threshold))
    return [hit.asset_id for hit in cache.search(request)]


def _query(query: str, vector: np.ndarray, mode: str, limit: int, **extra: Any) -> w.IndexQuery:
    """The index worker's query of ``query`` in ``mode`` (``vector``: the query's embedding, unused in bm25)."""
    return w.IndexQuery(
        vault="bench",
        epoch=1,
        query=query,
        mode=mode,  # type: ignore[arg-type]
        match_mode="any",
        limit=limit,
        cards_only=False,
        no_rerank=False,
        space=None if mode == "bm25" else SPACE,
        query_vector=None if mode == "bm25" else vector.astype(np.float32).tobytes(),
        **extra,
    )


def _searched(
    cache: VaultCache, query: str, vector: np.ndarray, mode: str, threshold: float | None
) -> tuple[list[str], bool]:
    """The record ids ``rag search`` shows for ``query`` (:data:`SEARCH_LIMIT`), in rank order, and whether they
    are flagged ``weak_matches`` at evidence cosine ``threshold``."""
    request = _query(query, vector, mode, SEARCH_LIMIT, min_similarity=None if mode == "bm25" else threshold)
    found = cache.query(request)
    return [hit.asset_id for hit in found.hits], found.weak_matches


def rule_figures(benchmark: Benchmark, vectors: Vectors) -> dict[str, dict[str, float]]:
    """Found, precision and reaches-the-model-without-the-answer of the whole evidence rule (module docstring),
    keyed ``bm25``, ``vector@0.55``, ``hybrid@0.55``…; and the ``weak_matches`` flag of ``rag search``
    (:data:`SEARCH_LIMIT` results) at the same threshold: ``weak`` share of the queries flagged with their answer
    in the vault, ``weak_found`` flagged although a relevant record is among the results, ``weak_without_answer``
    flagged when the answers are removed (the folds as above: what the flag should say); ``weak_ndcg_cost`` the
    mean nDCG@10 (record level, :data:`SEARCH_LIMIT` results) a search would lose if it showed nothing when weak."""
    records = index_records(benchmark)
    full = _cache(records, vectors)
    queries = benchmark.queries
    query_vectors = vectors.queries([query.text for query in queries])
    settings: list[tuple[str, float | None]] = [("bm25", None)]
    settings += [(mode, threshold) for mode in RULE_MODES[1:] for threshold in RULE_THRESHOLDS]
    found = {setting: 0 for setting in settings}
    shown = {setting: 0 for setting in settings}
    relevant = {setting: 0 for setting in settings}
    reaches = {setting: 0 for setting in settings}
    weak = {setting: 0 for setting in settings}
    weak_found = {setting: 0 for setting in settings}
    weak_alone = {setting: 0 for setting in settings}
    weak_ndcg = {setting: 0.0 for setting in settings}
    for query, vector in zip(queries, query_vectors, strict=True):
        for mode, threshold in settings:
            ids = _shown(full, query.text, vector, mode, threshold, LIMIT)
            hits = sum(1 for record in ids if query.relevance.get(record, 0) > 0)
            found[mode, threshold] += hits > 0
            shown[mode, threshold] += len(ids)
            relevant[mode, threshold] += hits
            results, flagged = _searched(full, query.text, vector, mode, threshold)
            weak[mode, threshold] += flagged
            weak_found[mode, threshold] += flagged and any(query.relevance.get(r, 0) > 0 for r in results)
            if flagged:
                weak_ndcg[mode, threshold] += ndcg_at(list(dict.fromkeys(results)), query.relevance)
    for fold in range(FOLDS):
        members = [index for index in range(len(queries)) if index % FOLDS == fold]
        answers = {doc for index in members for doc in queries[index].relevance}
        held_out = _cache([record for record in records if record.id not in answers], vectors)
        for index in members:
            for mode, threshold in settings:
                alone = _shown(held_out, queries[index].text, query_vectors[index], mode, threshold, 1)
                reaches[mode, threshold] += bool(alone)
                weak_alone[mode, threshold] += _searched(
                    held_out, queries[index].text, query_vectors[index], mode, threshold
                )[1]
    count = len(queries)
    return {
        mode if threshold is None else f"{mode}@{threshold:.2f}": {
            "found": found[mode, threshold] / count,
            "precision": relevant[mode, threshold] / shown[mode, threshold] if shown[mode, threshold] else 1.0,
            "reaches_without_answer": reaches[mode, threshold] / count,
            "shown_per_query": shown[mode, threshold] / count,
            "weak": weak[mode, threshold] / count,
            "weak_found": weak_found[mode, threshold] / count,
            "weak_without_answer": weak_alone[mode, threshold] / count,
            "weak_ndcg_cost": weak_ndcg[mode, threshold] / count,
        }
        for mode, threshold in settings
    }


def rule_markdown(name: str, queries: int, figures: dict[str, dict[str, float]]) -> str:
    """The whole rule's figures of one set as a Markdown table."""
    lines = [
        f"**{name}** ({queries} queries): the evidence rule as `rag ask` applies it, `--limit {LIMIT}`",
        "",
        "| mode | found | precision | reaches the model without the answer | chunks shown per query | "
        f"search weak_matches (top {SEARCH_LIMIT}): with the answer / answer shown / without the answer | "
        "nDCG@10 lost if weak results were dropped |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for setting, row in figures.items():
        lines.append(
            f"| {setting} | {row['found']:.3f} | {row['precision']:.3f} | {row['reaches_without_answer']:.3f} | "
            f"{row['shown_per_query']:.2f} | {row['weak']:.3f} / {row['weak_found']:.3f} / "
            f"{row['weak_without_answer']:.3f} | {row['weak_ndcg_cost']:.4f} |"
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
    parser.add_argument("--vector-cache", type=Path, help="an .npz that keeps the chunk vectors between runs")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument(
        "--rule-only", action="store_true", help="only the whole rule's figures (no per-document cosine tables)"
    )
    args = parser.parse_args(argv)
    try:
        benchmarks = [load_set(folder, docs=args.docs, queries=args.queries) for folder in args.sets]
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="memories-bench-") as scratch:
        model_dir = args.model_dir or build_tiny_model(Path(scratch) / "tiny-model")
        vectors = Vectors(model_dir, args.threads, args.vector_cache)
        rules = {benchmark.name: rule_figures(benchmark, vectors) for benchmark in benchmarks}
        per_set = {benchmark.name: [] if args.rule_only else cosines(benchmark, vectors) for benchmark in benchmarks}
    pooled = [row for rows in per_set.values() for row in rows]
    model = str(args.model_dir) if args.model_dir else "tiny test model"
    if args.json:
        figures: dict[str, Any] = {
            name: {"rule": rules[name]}
            if args.rule_only
            else {"distributions": distributions(rows), "thresholds": threshold_table(rows), "rule": rules[name]}
            for name, rows in per_set.items()
        }
        if len(per_set) > 1 and not args.rule_only:
            figures["pooled"] = {"distributions": distributions(pooled), "thresholds": threshold_table(pooled)}
        print(json.dumps({"model": model, "sets": figures}, indent=2))
        return 0
    parts = [f"model {model}"]
    if not args.rule_only:
        parts += [markdown(name, rows) for name, rows in per_set.items()]
        if len(per_set) > 1:
            parts.append(markdown("pooled", pooled))
    counts = {benchmark.name: len(benchmark.queries) for benchmark in benchmarks}
    parts += [rule_markdown(name, counts[name], figures) for name, figures in rules.items()]
    print("\n\n".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

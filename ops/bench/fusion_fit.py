"""Fitting and cross-validating the hybrid fusion offline, over the product's own pipeline (issue 30, item 3).

Usage::

    python -m ops.bench.fusion_fit SET [SET ...] --cache DIR [--model-dir DIR] [--threads N] [--json]

``SET`` is a retrieval set folder or the sample corpus folder, as for :mod:`ops.bench.quality`. Without
``--model-dir`` the tiny test model is built and used (the figures then mean nothing; the code path is what CI
checks). ``--cache DIR`` (outside the repository) keeps, per set, the chunk and query vectors (``SET.npz``, by the
model input's hash, as :class:`ops.bench.evidence.Vectors` keeps them) and the per-query arms (``SET.arms.pkl``).

What it does:

1. **Arms, once per set** (:func:`prepare`). Each document becomes the record ``rag ingest`` makes of it (the sample
   corpus as :func:`ops.corpus.load_notes` reads it) in the index worker's own cache
   (:class:`~memories.rag.pipeline.VaultCache`: chunking, Jieba BM25, the vectors by the product's recipe); each
   query is analyzed as :meth:`VaultCache.query` analyzes it, and its two rankings are taken from the cache's own
   arms (the BM25 ranking with the query's script first, the cosine ranking), :data:`DEPTH` deep each, with every
   chunk as fusion sees it (:class:`~memories.rag.fusion.Candidate`) and its record id. That is what the fusion and
   the reranker are given in the product: from here on nothing needs the model.
2. **Rules** (:data:`RULES`): each takes one query's :class:`Arms` and returns the chunks best first, by calling
   :func:`memories.rag.fusion.fuse` and :func:`~memories.rag.fusion.rerank` with its own settings (the product's
   code, not a copy of it). Scored as :mod:`ops.bench.quality` scores (a record at the rank of its first chunk,
   nDCG@10 of :mod:`memories.rag.metrics`).
3. **Leave one set out** (:func:`cross_validate`): for each set, the rule is chosen on the others by
   :func:`criterion` (the worst per-set difference hybrid − better arm, then the mean), and judged on the one left
   out: hybrid − better arm, paired per query with the 95 % bootstrap interval of
   :func:`ops.bench.quality.paired_difference`; and reranked ``vector`` against the cosine ranking alone.

Figures are for reading, never test assertions.
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from memories import worker_protocol as w
from memories.models.telemetry import disable_telemetry_environment
from memories.rag.analysis import analyze_query, text_language, written_forms
from memories.rag.fusion import Candidate, QueryFacts
from memories.rag.metrics import ndcg_at
from memories.rag.pipeline import VaultCache
from ops.bench.embed import build_tiny_model
from ops.bench.evidence import SPACE, Vectors, index_records
from ops.bench.quality import Benchmark, load_set, paired_difference
from ops.corpus import load_notes

DEPTH = 100
"""Depth of each arm, as :data:`memories.rag.pipeline.CANDIDATES`."""


@dataclass
class Arms:
    """One query as fusion sees it: its facts, both rankings (``(Candidate, score)`` best first: BM25 with the
    query's script first, cosines), each chunk's record id, and the graded relevance of records."""

    id: str
    facts: QueryFacts
    lexical: list[tuple[Candidate[int], float]]
    vector: list[tuple[Candidate[int], float]]
    records: dict[int, str]
    relevance: dict[str, int]


Rule = Callable[[Arms, str], list[int]]
"""A ranking rule: one query's arms and the mode (``hybrid`` or ``vector``) → chunk row ids best first."""


def records_of(benchmark: Benchmark) -> list[w.IndexRecord]:
    """The records ``rag ingest`` makes of the benchmark's documents."""
    return load_notes(benchmark.folder) if benchmark.folder is not None else index_records(benchmark)


def prepare(benchmark: Benchmark, vectors: Vectors) -> list[Arms]:
    """Every query's :class:`Arms` through the product's cache (module docstring, step 1)."""
    cache = VaultCache("bench")
    cache.apply(records_of(benchmark), [])
    cache.stamp(1)
    vectors.fill(cache)
    query_vectors = vectors.queries([query.text for query in benchmark.queries])
    result = []
    for query, vector in zip(benchmark.queries, query_vectors, strict=True):
        analyzed = analyze_query(query.text)
        facts = QueryFacts(
            weights=cache.index.term_weights(analyzed),
            phrase=analyzed.phrase,
            language=text_language(query.text),
            forms=written_forms(query.text, analyzed.terms),
        )
        request = w.IndexQuery(
            vault="bench",
            epoch=1,
            query=query.text,
            mode="hybrid",
            match_mode="any",
            limit=DEPTH,
            cards_only=False,
            no_rerank=False,
            space=SPACE,
            query_vector=vector.astype(np.float32).tobytes(),
        )
        lexical = cache._lexical(analyzed, facts, request, DEPTH) if analyzed.terms else []
        cosine = cache._cosine(analyzed, request, DEPTH) if analyzed.terms else []
        rowids = {rowid for rowid, _ in lexical} | {rowid for rowid, _ in cosine}
        result.append(
            Arms(
                id=query.id,
                facts=facts,
                lexical=[(cache._candidate(rowid), score) for rowid, score in lexical],
                vector=[(cache._candidate(rowid), score) for rowid, score in cosine],
                records={rowid: cache.index.row(rowid).record_id for rowid in rowids},
                relevance=dict(query.relevance),
            )
        )
    return result


def load_arms(folder: Path, cache_dir: Path, model_dir: Path, threads: int) -> list[Arms]:
    """:func:`prepare` of the set at ``folder``, from ``cache_dir/NAME.arms.pkl`` when there, else computed (the
    vectors from ``cache_dir/NAME.npz``, embedding only what is not there) and written there."""
    benchmark = load_set(folder)
    stored = cache_dir / f"{benchmark.name}.arms.pkl"
    if stored.is_file():
        arms: list[Arms] = pickle.loads(stored.read_bytes())
        return arms
    arms = prepare(benchmark, Vectors(model_dir, threads, cache_dir / f"{benchmark.name}.npz"))
    stored.write_bytes(pickle.dumps(arms))
    return arms


def ndcg(arms: Arms, ranked: Sequence[int]) -> float:
    """nDCG@10 of a chunk ranking at the record level (a record at the rank of its first chunk)."""
    return ndcg_at(list(dict.fromkeys(arms.records[rowid] for rowid in ranked)), arms.relevance)


def scores(arms: Sequence[Arms], rule: Rule, mode: str = "hybrid") -> list[float]:
    """Per-query nDCG@10 of ``rule`` over ``arms``."""
    return [ndcg(query, rule(query, mode)) for query in arms]


def bm25_arm(arms: Arms, mode: str) -> list[int]:
    """The BM25 ranking alone (``--mode bm25``)."""
    return [candidate.document for candidate, _ in arms.lexical]


def vector_arm(arms: Arms, mode: str) -> list[int]:
    """The cosine ranking alone (``--mode vector --no-rerank``)."""
    return [candidate.document for candidate, _ in arms.vector]


def criterion(sets: Mapping[str, Mapping[str, Sequence[float]]], rule: str) -> tuple[float, float]:
    """``(worst, mean)`` over ``sets`` (name → row → per-query nDCG@10, rows ``bm25``, ``vector`` and the rule's) of
    mean(rule) − mean(better arm): the key a rule is chosen by, higher is better."""
    gaps = []
    for rows in sets.values():
        better = max(statistics.fmean(rows["bm25"]), statistics.fmean(rows["vector"]))
        gaps.append(statistics.fmean(rows[rule]) - better)
    return (min(gaps), statistics.fmean(gaps))


def cross_validate(figures: Mapping[str, Mapping[str, Sequence[float]]], rules: Sequence[str]) -> list[dict[str, Any]]:
    """Leave one set out: for each set, the rule of ``rules`` best by :func:`criterion` on the others, judged on
    it: ``{"held_out", "chosen", "hybrid", "better_arm", "difference": [mean, low, high]}``."""
    result = []
    for held_out, rows in figures.items():
        others = {name: value for name, value in figures.items() if name != held_out}
        chosen = max(rules, key=lambda rule: criterion(others, rule))
        better = max(("bm25", "vector"), key=lambda arm: statistics.fmean(rows[arm]))
        result.append(
            {
                "held_out": held_out,
                "chosen": chosen,
                "hybrid": statistics.fmean(rows[chosen]),
                "better_arm": better,
                "arm": statistics.fmean(rows[better]),
                "difference": list(paired_difference(rows[chosen], rows[better])),
            }
        )
    return result


def evaluate(sets: Mapping[str, Sequence[Arms]], rules: Mapping[str, Rule]) -> dict[str, dict[str, list[float]]]:
    """Per set, per row (``bm25``, ``vector`` and each rule): per-query nDCG@10."""
    return {
        name: {
            "bm25": scores(arms, bm25_arm),
            "vector": scores(arms, vector_arm),
            **{label: scores(arms, rule) for label, rule in rules.items()},
        }
        for name, arms in sets.items()
    }


def main(argv: list[str] | None = None) -> int:
    """The command line of the module docstring; returns the exit status."""
    from ops.bench.fusion_rules import RULES

    disable_telemetry_environment()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", type=Path, help="retrieval set folders, or the sample corpus folder")
    parser.add_argument("--cache", type=Path, required=True, help="a folder outside the repository")
    parser.add_argument("--model-dir", type=Path, help="the model folder (default: build the tiny model)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memories-fit-") as scratch:
        model_dir = args.model_dir or build_tiny_model(Path(scratch) / "tiny-model")
        sets = {load_set(folder).name: load_arms(folder, args.cache, model_dir, args.threads) for folder in args.sets}
    figures = evaluate(sets, RULES)
    folds = cross_validate(figures, list(RULES))
    means = {name: {row: statistics.fmean(values) for row, values in rows.items()} for name, rows in figures.items()}
    if args.json:
        print(json.dumps({"means": means, "folds": folds}, indent=2))
        return 0
    for name, rows in means.items():
        print(name, " ".join(f"{row}={value:.4f}" for row, value in rows.items()))
    for fold in folds:
        mean, low, high = fold["difference"]
        print(
            f"{fold['held_out']}: chose {fold['chosen']}, hybrid {fold['hybrid']:.4f}, {fold['better_arm']} "
            f"{fold['arm']:.4f}, difference {mean:+.4f} [{low:+.4f}, {high:+.4f}]"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())

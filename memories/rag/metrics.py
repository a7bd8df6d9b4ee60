"""Ranking quality at a cutoff: nDCG, recall and reciprocal rank of one ranked list (``rag bench``, the benchmarks).

Pure Python, no numpy: the daemon's ``rag bench`` and ``ops/bench`` score with the same three functions. A ranked
list holds distinct ids (records, documents), best first; ``relevance`` maps the relevant ids to their gains
(graded, > 0; ``rag bench`` gives each relevant record 1).

- ``nDCG@k = DCG@k / ideal DCG@k`` (Järvelin & Kekäläinen, "Cumulated gain-based evaluation of IR techniques",
  TOIS 2002), linear gains and a ``log2(rank + 1)`` discount: ``DCG@k = Σ rel_i / log2(i + 1)``, i = 1 … k;
- ``Recall@k`` = relevant ids in the top k / relevant ids;
- ``MRR@k`` (the reciprocal rank of one query; its mean over queries is the MRR) = 1 / rank of the first relevant
  id within the top k, else 0.

Each is 0 … 1, and 0 for a query with nothing relevant.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

CUTOFF = 10
"""The ``k`` of nDCG@10, Recall@10 and MRR@10."""


def ndcg_at(ranked: Sequence[str], relevance: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """nDCG at ``cutoff`` with linear gains (0 … 1).

    >>> round(ndcg_at(["b", "a"], {"a": 1}), 4)
    0.6309
    """
    dcg = sum(relevance.get(doc, 0) / math.log2(rank + 1) for rank, doc in enumerate(ranked[:cutoff], start=1))
    ideal = sorted(relevance.values(), reverse=True)[:cutoff]
    best = sum(gain / math.log2(rank + 1) for rank, gain in enumerate(ideal, start=1))
    return dcg / best if best else 0.0


def recall_at(ranked: Sequence[str], relevance: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """Share of the relevant ids found in the top ``cutoff``.

    >>> recall_at(["a", "x"], {"a": 1, "b": 1})
    0.5
    """
    relevant = {doc for doc, gain in relevance.items() if gain > 0}
    return len(relevant.intersection(ranked[:cutoff])) / len(relevant) if relevant else 0.0


def mrr_at(ranked: Sequence[str], relevance: Mapping[str, int], cutoff: int = CUTOFF) -> float:
    """1 / rank of the first relevant id within the top ``cutoff``, else 0.

    >>> mrr_at(["x", "y", "a"], {"a": 1})
    0.3333333333333333
    """
    for rank, doc in enumerate(ranked[:cutoff], start=1):
        if relevance.get(doc, 0) > 0:
            return 1.0 / rank
    return 0.0

"""The ranking rules :mod:`ops.bench.fusion_fit` compares (issue 30): each one query's arms → chunk ids best first,
through the product's :func:`~memories.rag.fusion.fuse` and :func:`~memories.rag.fusion.rerank` with its settings.

``RULES`` maps a label to a rule; ``current`` is the product's default. The candidates that lost are kept here with
their figures in ``docs/search-quality.md``, so a later change can be measured against them.
"""

from __future__ import annotations

from collections.abc import Callable

from memories.rag.fusion import Candidate, fuse, rerank
from ops.bench.fusion_fit import Arms


def current(arms: Arms, mode: str) -> list[int]:
    """The product's default: :func:`fuse` (hybrid; the cosine ranking in ``vector`` mode), then :func:`rerank`."""
    if mode == "vector":
        fused = [(candidate.document, score) for candidate, score in arms.vector]
    else:
        fused = fuse(arms.facts, [c for c, _ in arms.lexical], [c for c, _ in arms.vector])
    candidates: dict[int, Candidate[int]] = {c.document: c for c, _ in arms.vector + arms.lexical}
    return [document for document, _ in rerank(arms.facts, [(candidates[d], s) for d, s in fused[:100]])]


RULES: dict[str, Callable[[Arms, str], list[int]]] = {"current": current}
"""Label → rule, in the order they are reported."""

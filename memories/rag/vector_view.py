"""A vault's chunk rows as arrays in one vector space, so that a vector ranking is a few numpy passes rather than
Python loops over every chunk (issue 28 item 4).

The vector stage of every vector and hybrid search used to walk every chunk row in Python: the row's input key,
a dict of rows per key, the keys that have a vector, their matrix rows; and the on-demand step before it walked
them again to find none missing. At 100,000 chunks those passes cost several times the matrix-vector product
itself (``ops/bench/scale.py``, ``docs/architecture.md`` "Large vaults"). A :class:`VectorView` holds, per chunk
in the index's row order, its row id, whether it is a card and the number of its input key (keys numbered in
first-seen order), and per key its row in the vector matrix (-1: no vector); it is built once per change of the
rows or of the vectors (:attr:`memories.rag.vault_index.VaultIndex.changes`,
:attr:`memories.rag.vectors.VectorStore.changes`) and costs about 30 bytes per chunk.

:meth:`VectorView.ranked` gives exactly what the Python passes gave (tests compare them): the admitted chunks' keys
that have a vector in first-seen order, their cosines computed the same way (a gather and a product for a few
keys, one product over the whole matrix for most), a stable sort, the best ``limit`` keys, and each key's chunks in
row order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import NDArray

Stamp = tuple[int, int, str, object]
"""``(index changes, store changes, space key, input recipe)`` a view was built at."""


class VectorView:
    """Arrays over a vault's chunk rows in one vector space (module docstring).

    Args:
        stamp: what the view was built at; rowids, cards: each chunk's row id and whether it is a card, in row
        order; keys: each chunk's input key, in row order; positions: input key -> matrix row, for the keys that
        have a vector (:meth:`memories.rag.vectors.VectorStore.positions`).
    """

    def __init__(
        self,
        stamp: Stamp,
        rowids: Sequence[int],
        cards: Sequence[bool],
        keys: Sequence[str],
        positions: dict[str, int],
    ) -> None:
        self.stamp = stamp
        count = len(rowids)
        self.rowids = np.fromiter(rowids, dtype=np.int64, count=count)
        self.cards = np.fromiter(cards, dtype=np.bool_, count=count)
        numbers: dict[str, int] = {}
        self._key_of_row = np.fromiter(
            (numbers.setdefault(key, len(numbers)) for key in keys), dtype=np.int64, count=count
        )
        self._matrix_row = np.fromiter((positions.get(key, -1) for key in numbers), dtype=np.int64, count=len(numbers))
        self._by_key = np.argsort(self._key_of_row, kind="stable")
        self._key_start = np.searchsorted(self._key_of_row[self._by_key], np.arange(len(numbers) + 1))

    @property
    def inputs(self) -> int:
        """Distinct model inputs of the vault's chunks."""
        return len(self._matrix_row)

    @property
    def missing(self) -> int:
        """Distinct model inputs without a vector."""
        return int(np.count_nonzero(self._matrix_row < 0))

    def mask(self, rowids: set[int]) -> NDArray[np.bool_]:
        """The mask (in row order) of the chunks whose row id is in ``rowids``."""
        return np.isin(self.rowids, np.fromiter(rowids, dtype=np.int64, count=len(rowids)))

    def ranked(
        self,
        matrix: NDArray[np.float32],
        vector: NDArray[np.float32],
        allowed: NDArray[np.bool_] | None,
        limit: int | None,
    ) -> list[tuple[int, float]]:
        """``(row id, cosine)`` of the chunks ``allowed`` admits (a mask in row order; ``None``: all) that have a
        vector, best first: the best ``limit`` keys (``None``: all), each with its admitted chunks in row order.
        ``matrix`` and ``vector`` are :meth:`memories.rag.vectors.VectorStore.scanned`'s, for this view's stamp."""
        if allowed is None:
            keys = np.flatnonzero(self._matrix_row >= 0)
        else:
            numbers, first = np.unique(self._key_of_row[allowed], return_index=True)
            keys = numbers[np.argsort(first, kind="stable")]
            keys = keys[self._matrix_row[keys] >= 0]
        if not len(keys):
            return []
        rows = self._matrix_row[keys]
        # A few rows: gather them; most of the matrix: one matrix-vector product is cheaper than the gather.
        scores = matrix[rows] @ vector if len(rows) * 2 < len(matrix) else (matrix @ vector)[rows]
        ranked: list[tuple[int, float]] = []
        for index in np.argsort(-scores, kind="stable")[:limit]:
            key = keys[index]
            members = self._by_key[self._key_start[key] : self._key_start[key + 1]]
            if allowed is not None:
                members = members[allowed[members]]
            score = float(scores[index])
            ranked.extend((rowid, score) for rowid in self.rowids[members].tolist())
        return ranked

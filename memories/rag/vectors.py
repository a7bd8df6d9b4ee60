"""Per-vault vector store of the index worker: content-addressed vectors and cosine search (R-21, R-27, R-34).

A vector is keyed by ``(space_key, input_hash)``: the vector space key of the backend that made it
(:func:`memories.models.embedding.vector_space_key`) and the SHA-256 of the exact model input (task prefix, title
and chunk text, :func:`input_hash`). So:

- a retry after ``budget_exceeded`` or ``cancelled`` embeds only the keys :meth:`VectorStore.missing` reports;
- an edit re-embeds only the chunks whose input changed, and an edit elsewhere in the vault costs nothing;
- vectors of two spaces are never compared: every lookup and search names its space.

Each vector space has its own width and one contiguous float32 matrix, rebuilt lazily on the first search after
adds or drops, so a search is one matrix-vector product. Nothing here is ever written to disk: the supervisor seals
each record's vectors in the home (:mod:`memories.vault.vectors`; this worker never holds a key) and hands them back
after unlock (:mod:`memories.rag.kept`). Not thread-safe: the index worker handles one request at a time.

Example::

    store = VectorStore()
    hashes = [input_hash(text) for text in inputs]
    todo = store.missing(space, hashes)            # -> the hashes still to embed
    store.add(space, todo, vectors)                # float32[len(todo), width], unit rows
    store.search(space, query_vector, hashes)      # -> [(input_hash, cosine), ...] best first
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

import numpy as np
from numpy.typing import NDArray

from memories.errors import MemoriesError
from memories.limits import IndexLimits

NORM_TOLERANCE = 1e-3
"""How far from 1 a stored vector's L2 norm may be; backends normalize to about 1e-6, remote ones less tightly."""

VectorKey = tuple[str, str]
"""``(space_key, input_hash)``."""


def input_hash(model_input: str) -> str:
    """SHA-256 hex of the UTF-8 bytes of the exact model input (prefix + title + chunk text).

    >>> input_hash("task: search result | query: git")[:12]
    '6d29336f7110'
    """
    return hashlib.sha256(model_input.encode("utf-8")).hexdigest()


class VectorStore:
    """Unit vectors of one vault, keyed by ``(space_key, input_hash)``, each space with its own width.

    A space's width is fixed by the first vectors added to it (768 for EmbeddingGemma; a remote backend's
    ``dimensions`` or first reply). ``max_bytes`` (``[rag] max_vector_bytes``) bounds the vault's vectors across all
    spaces: by default (R-21's ratio, 32 MiB per 10,000 chunks) ``max_chunks`` chunks fit up to 838 dimensions
    (32 MiB / (10,000 × 4 bytes)), so a wider configuration makes a large vault ``vault_too_large``.

    Args:
        max_bytes: limit on :attr:`nbytes` (default ``[rag]``'s: 320 MiB; R-21: 32 MiB).
    """

    def __init__(self, *, max_bytes: int = IndexLimits().vector_bytes) -> None:
        self.max_bytes = max_bytes
        self.changes = 0
        """Counts the adds, drops and clears, so that what is derived from the stored rows
        (:class:`memories.rag.vector_view.VectorView`) knows when it is out of date."""
        self.clear()

    def __len__(self) -> int:
        return sum(len(space) for space in self._spaces.values())

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 2:
            return False
        space = self._spaces.get(key[0])
        return space is not None and key[1] in space.rows

    @property
    def nbytes(self) -> int:
        """Bytes of vector data held: Σ vectors × width × 4 over the spaces (what R-21 limits)."""
        return sum(space.nbytes for space in self._spaces.values())

    def dimension(self, space_key: str) -> int | None:
        """The width of ``space_key``'s vectors, or ``None`` before any was added."""
        space = self._spaces.get(space_key)
        return space.dimension if space is not None else None

    def missing(self, space_key: str, input_hashes: Iterable[str]) -> list[str]:
        """The hashes of ``input_hashes`` with no vector in ``space_key``, in first-seen order, without repeats."""
        space = self._spaces.get(space_key)
        rows = space.rows if space is not None else {}
        return [digest for digest in dict.fromkeys(input_hashes) if digest not in rows]

    def add(self, space_key: str, input_hashes: Sequence[str], vectors: NDArray[np.floating]) -> int:
        """Store ``vectors[i]`` under ``(space_key, input_hashes[i])``; return how many keys were new.

        A key already present keeps its vector (same input, same space: same vector). ``vectors`` is
        float32 ``[len(input_hashes), width]`` (other float dtypes are converted); the first add to a space fixes
        its width.

        Raises:
            ValueError: the shapes do not match (a caller bug).
            MemoriesError: ``invalid_vector`` for a NaN, infinite or non-unit row; ``vault_too_large`` when the
                new vectors would pass :attr:`max_bytes`. Either way nothing is stored.
        """
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(input_hashes):
            raise ValueError(f"expected vectors of shape [{len(input_hashes)}, width], got {matrix.shape}")
        space = self._spaces.get(space_key)
        width = space.dimension if space is not None else matrix.shape[1]
        if matrix.shape[1] != width:
            raise ValueError(f"the space holds vectors of width {width}, got {matrix.shape}")
        _check_unit_rows(matrix)
        rows = space.rows if space is not None else {}
        new: dict[str, int] = {}
        for row, digest in enumerate(input_hashes):
            if digest not in rows and digest not in new:
                new[digest] = row
        if not new:
            return 0
        total = self.nbytes + len(new) * width * 4
        if total > self.max_bytes:
            raise MemoriesError(
                "vault_too_large",
                f"the vault's vectors would take {total:,} bytes, over the limit of {self.max_bytes:,} bytes "
                f"({self.max_bytes / 2**20:g} MiB) per vault ({width} dimensions each; [rag] max_vector_bytes "
                "raises it)",
                {"limit": "vector_bytes", "max": self.max_bytes, "value": total, "setting": "rag.max_vector_bytes"},
            )
        if space is None:
            space = self._spaces[space_key] = _Space(width)
        # Every row new and the array read-only (the vectors of a worker message, as kept vectors loaded after an
        # unlock: hundreds of MiB at 100,000 chunks): kept without a copy. A writable array is the caller's to change.
        whole = len(new) == len(matrix) and not matrix.flags.writeable
        space.append(list(new), matrix if whole else matrix[list(new.values())])
        self.changes += 1
        return len(new)

    def search(
        self, space_key: str, query: NDArray[np.floating], input_hashes: Iterable[str], limit: int | None = None
    ) -> list[tuple[str, float]]:
        """Cosine similarity of ``query`` to the stored vectors of ``input_hashes`` in ``space_key``, best first.

        ``query`` is float32 ``[width]`` (or ``[1, width]``), unit norm, from the same space. Hashes with no vector
        are skipped (ask :meth:`missing` first); repeats count once. Equal scores keep the order of
        ``input_hashes``. Scores are in ``[-1, 1]``, higher is better. ``limit`` keeps the best ``limit``.

        Raises:
            ValueError: ``query`` has the wrong shape.
            MemoriesError: ``invalid_vector`` when ``query`` is not finite and unit.
        """
        space = self._spaces.get(space_key)
        if space is None:
            return []
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if vector.shape != (space.dimension,):
            raise ValueError(f"expected a query of {space.dimension} values, got {np.shape(query)}")
        _check_unit_rows(vector[None, :])
        matrix = space.compacted()
        found = [digest for digest in dict.fromkeys(input_hashes) if digest in space.rows]
        if not found:
            return []
        rows = [space.rows[digest] for digest in found]
        # A few rows: gather them; most of the matrix: one matrix-vector product is cheaper than the gather.
        scores = matrix[rows] @ vector if len(rows) * 2 < len(matrix) else (matrix @ vector)[rows]
        order = np.argsort(-scores, kind="stable")[:limit]
        return [(found[index], float(scores[index])) for index in order]

    def rows(self, space_key: str, input_hashes: Sequence[str]) -> NDArray[np.float32]:
        """float32 ``[len(input_hashes), width]``: the vectors of ``input_hashes`` in ``space_key``, in that order
        (a copy).

        Raises:
            KeyError: a hash has no vector in the space (ask :meth:`missing` first).
        """
        space = self._spaces.get(space_key)
        if space is None:
            if input_hashes:
                raise KeyError(input_hashes[0])
            return np.empty((0, 0), dtype=np.float32)
        matrix = space.compacted()
        return matrix[[space.rows[digest] for digest in input_hashes]]

    def retain(self, keys: Iterable[VectorKey]) -> int:
        """Drop every vector whose key is not in ``keys`` (chunks edited or deleted, other spaces); return how many.

        The matrices are compacted at once, so memory never holds dropped rows beyond this call.
        """
        keep: dict[str, set[str]] = {}
        for space_key, digest in keys:
            keep.setdefault(space_key, set()).add(digest)
        dropped = 0
        for space_key, space in list(self._spaces.items()):
            dropped += space.retain(keep.get(space_key, set()))
            if not space.rows:
                del self._spaces[space_key]
        if dropped:
            self.changes += 1
        return dropped

    def clear(self) -> None:
        """Forget every vector (lock, vault invalidation)."""
        self._spaces: dict[str, _Space] = {}
        self.changes += 1

    def positions(self, space_key: str) -> dict[str, int]:
        """Input hash -> row of :meth:`scanned`'s matrix, for every vector of ``space_key`` (``{}``: none). The
        store's own mapping: read it, never change it."""
        space = self._spaces.get(space_key)
        return space.rows if space is not None else {}

    def scanned(self, space_key: str, query: NDArray[np.floating]) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """``(matrix, vector)``: the space's float32 ``[n, width]`` matrix (rows as :meth:`positions` numbers them)
        and ``query`` as a float32 ``[width]`` vector, checked. ``n`` is 0 for a space without vectors.

        Raises:
            ValueError: ``query`` has the wrong shape.
            MemoriesError: ``invalid_vector`` when ``query`` is not finite and unit.
        """
        space = self._spaces.get(space_key)
        vector = np.asarray(query, dtype=np.float32).reshape(-1)
        if space is None:
            return np.empty((0, vector.shape[0]), dtype=np.float32), vector
        if vector.shape != (space.dimension,):
            raise ValueError(f"expected a query of {space.dimension} values, got {np.shape(query)}")
        _check_unit_rows(vector[None, :])
        return space.compacted(), vector


class _Space:
    """The vectors of one space: one contiguous float32 matrix, rows appended lazily, dropped rows compacted."""

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.rows: dict[str, int] = {}
        self._matrix: NDArray[np.float32] = np.empty((0, dimension), dtype=np.float32)
        self._pending: list[NDArray[np.float32]] = []
        self._pending_rows = 0
        self._dropped = False

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def nbytes(self) -> int:
        return len(self.rows) * self.dimension * 4

    def append(self, digests: list[str], matrix: NDArray[np.float32]) -> None:
        first_row = len(self._matrix) + self._pending_rows
        for offset, digest in enumerate(digests):
            self.rows[digest] = first_row + offset
        self._pending.append(matrix)
        self._pending_rows += len(digests)

    def retain(self, keep: set[str]) -> int:
        dropped = [digest for digest in self.rows if digest not in keep]
        if dropped:
            for digest in dropped:
                del self.rows[digest]
            self._dropped = True
            self.compacted()
        return len(dropped)

    def compacted(self) -> NDArray[np.float32]:
        """The matrix with added rows appended and dropped rows removed; ``rows`` points into it."""
        if self._pending:
            parts = [self._matrix, *self._pending] if len(self._matrix) else self._pending
            self._matrix = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
            self._pending = []
            self._pending_rows = 0
        if self._dropped:
            digests = list(self.rows)
            self._matrix = np.ascontiguousarray(self._matrix[[self.rows[digest] for digest in digests]])
            self.rows = {digest: row for row, digest in enumerate(digests)}
            self._dropped = False
        return self._matrix


def _check_unit_rows(matrix: NDArray[np.float32]) -> None:
    """``invalid_vector`` unless every row is finite with an L2 norm within :data:`NORM_TOLERANCE` of 1."""
    if not np.isfinite(matrix).all():
        raise MemoriesError("invalid_vector", "a vector holds NaN or infinite values; nothing was stored")
    # Sums of squares accumulated in float64 without a float64 copy of the matrix (seven times faster at 10,000 rows).
    norms = np.sqrt(np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64))
    off = np.flatnonzero(np.abs(norms - 1.0) > NORM_TOLERANCE)
    if off.size:
        raise MemoriesError(
            "invalid_vector",
            f"{off.size} vector(s) are not unit length (norm {norms[off[0]]:.6f}); nothing was stored",
            {"rows": off.tolist()},
        )

"""A vault's vectors as its chunks use them: which model input each chunk row is in a vector space, which inputs
have a vector or were refused, and which to embed next (R-21, R-27).

:class:`~memories.rag.vectors.VectorStore` holds vectors by ``(space_key, input_hash)`` and knows nothing of chunks;
:class:`ChunkVectors` maps the rows of a :class:`~memories.rag.vault_index.VaultIndex` onto those keys by the
embedding backend's input recipe (:func:`model_input`, :func:`input_key`), plans the embedding batches
(:meth:`ChunkVectors.missing`) and keeps what a service refused. The search pipeline
(:mod:`memories.rag.pipeline`) asks it for each row's key; the vectors kept in the home go through it
(:mod:`memories.rag.kept`).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable

import numpy as np

from memories import worker_protocol as w
from memories.limits import IndexLimits
from memories.models.embedding import estimated_tokens
from memories.protocol import EmbedFailure
from memories.rag.vault_index import ChunkRow, VaultIndex
from memories.rag.vector_view import VectorView
from memories.rag.vectors import VectorStore, input_hash


class ChunkVectors:
    """The vectors of one vault's chunks: the :class:`VectorStore` (``store``), each row's input key per recipe, the
    spaces requests named, the inputs a service refused, and the spaces whose kept vectors were ``loaded``;
    ``max_vector_bytes`` bounds the store (``[rag] max_vector_bytes``)."""

    def __init__(self, index: VaultIndex, *, max_vector_bytes: int = IndexLimits().vector_bytes) -> None:
        self.index = index
        self.store = VectorStore(max_bytes=max_vector_bytes)
        self._input_keys: dict[w.InputRecipe, dict[int, str]] = {}
        self._spaces: dict[str, w.InputRecipe] = {}
        self._failed: dict[str, dict[str, str]] = {}
        """Per space key: input key → the service's reason for refusing it (not offered again)."""
        self.loaded: set[str] = set()
        """Space keys whose vectors kept in the home were given to this cache (:mod:`memories.rag.kept`)."""
        self._views: dict[str, VectorView] = {}

    def view(self, space: w.VectorSpace) -> VectorView:
        """The rows as arrays in ``space`` (:class:`~memories.rag.vector_view.VectorView`), built again only after
        the rows or the vectors changed."""
        stamp = (self.index.changes, self.store.changes, space.key, space.recipe)
        view = self._views.get(space.key)
        if view is None or view.stamp != stamp:
            rows = list(self.index.rows())
            view = self._views[space.key] = VectorView(
                stamp,
                [row.rowid for row in rows],
                [row.kind == "card" for row in rows],
                [self.key(row, space.recipe) for row in rows],
                self.store.positions(space.key),
            )
        return view

    def retain(self, live: Iterable[ChunkRow]) -> None:
        """Forget input keys of rows that are gone, and drop vectors and refusals no ``live`` row uses."""
        rows = list(live)
        rowids = {row.rowid for row in rows}
        for keys in self._input_keys.values():
            for rowid in [rowid for rowid in keys if rowid not in rowids]:
                del keys[rowid]
        used = {space: {self.key(row, recipe) for row in rows} for space, recipe in self._spaces.items()}
        self.store.retain((space, key) for space, keys in used.items() for key in keys)
        for space, failed in self._failed.items():
            self._failed[space] = {key: reason for key, reason in failed.items() if key in used.get(space, ())}

    def store_vectors(self, request: w.IndexStoreVectors) -> int:
        """Store finished vectors (float32[n, dimension] bytes) and refused inputs; returns how many vectors were
        new.

        Raises:
            MemoriesError: as :meth:`VectorStore.add` (``invalid_vector``, ``vault_too_large``).
        """
        matrix = np.frombuffer(request.vectors, dtype=np.float32).reshape(len(request.keys), request.dimension)
        if request.failed:
            self._failed.setdefault(request.space_key, {}).update(request.failed)
        return self.store.add(request.space_key, request.keys, matrix)

    def input_keys(self, space: w.VectorSpace) -> list[tuple[ChunkRow, str]]:
        """Every chunk row with the key of its model input in ``space`` (the space is remembered: :meth:`retain`
        keeps its vectors)."""
        self._spaces[space.key] = space.recipe
        return [(row, self.key(row, space.recipe)) for row in self.index.rows()]

    def space(self, space_key: str) -> w.VectorSpace | None:
        """The space ``space_key`` with its input recipe, once a request named it (else ``None``)."""
        recipe = self._spaces.get(space_key)
        return None if recipe is None else w.VectorSpace(key=space_key, recipe=recipe)

    def refused(self, space_key: str) -> dict[str, str]:
        """Input key → the service's reason, for each input refused in ``space_key``."""
        return self._failed.get(space_key, {})

    def has_vector(self, row: ChunkRow, space: w.VectorSpace) -> bool:
        """Whether the row's model input in ``space`` has a vector."""
        return (space.key, self.key(row, space.recipe)) in self.store

    def missing(self, space: w.VectorSpace, limit: int) -> w.MissingInputs:
        """Up to ``limit`` model inputs without a vector (and not refused by the service), shortest first by
        :func:`estimated_tokens` (the tokenizer lives in the embedding worker), so consecutive batches have similar
        token lengths and little padding; plus how many are missing, embedded and refused in all."""
        self._spaces[space.key] = space.recipe
        failed = self._failed.get(space.key, {})
        view = self.view(space)
        if not failed and not view.missing:  # every search asks (on-demand embedding): no pass over the rows
            return w.MissingInputs(keys=[], inputs=[], total_missing=0, embedded=view.inputs, failures=[])
        wanted: dict[str, ChunkRow] = {}
        for row in self.index.rows():
            wanted.setdefault(self.key(row, space.recipe), row)
        missing = [key for key in self.store.missing(space.key, wanted) if key not in failed]
        inputs = {key: model_input(wanted[key], space.recipe) for key in missing}
        chosen = sorted(missing, key=lambda key: (estimated_tokens(inputs[key].text), wanted[key].rowid))[:limit]
        failures = [
            EmbedFailure(row.record_id, row.revision, row.chunk.chunk_hash, failed[key])
            for key, row in wanted.items()
            if key in failed
        ]
        return w.MissingInputs(
            keys=chosen,
            inputs=[inputs[key] for key in chosen],
            total_missing=len(missing),
            embedded=len(wanted) - len(missing) - len(failures),
            failures=failures,
        )

    def key(self, row: ChunkRow, recipe: w.InputRecipe) -> str:
        """The vector key of the row's model input under ``recipe`` (:func:`input_key`), worked out once per row."""
        keys = self._input_keys.setdefault(recipe, {})
        key = keys.get(row.rowid)
        if key is None:
            key = keys[row.rowid] = input_key(model_input(row, recipe))
        return key


def model_input(row: ChunkRow, recipe: w.InputRecipe) -> w.ModelInput:
    """The exact model input of a chunk under ``recipe`` (:class:`~memories.worker_protocol.InputRecipe`): the
    recipe's prefix with ``{title}`` filled in, then the chunk's text; or the text with the title beside it.

    A title that is only the file name (a note without a heading: ``rag ingest`` then titles it by its file
    name) is no title for the model, which gets ``none`` as the model card says for untitled documents: a name
    such as ``2024-05-01.md`` or ``zh-118.md`` would otherwise weigh on every vector of the note, most of all on
    short ones. BM25 still matches the file name (title and metadata columns).
    """
    title: str | None = row.title or None
    if row.source is not None and title == posixpath.basename(row.source):
        title = None
    if recipe.title_field:
        return w.ModelInput(recipe.prefix + row.chunk.text, title)
    return w.ModelInput(recipe.prefix.replace("{title}", title or "none") + row.chunk.text)


def input_key(item: w.ModelInput) -> str:
    """The vector key of a model input: :func:`memories.rag.vectors.input_hash` of the text, or of the JSON pair
    ``[title, text]`` when the title travels beside it (so the two can never be confused)."""
    if item.title is None:
        return input_hash(item.text)
    return input_hash(json.dumps([item.title, item.text], ensure_ascii=False))

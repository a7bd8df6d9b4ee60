"""The in-process embedder interface (:class:`Embedder`), its task prefixes and the vector space key (R-25, R-32).

Light to import (numpy only): the index worker uses :func:`document_input` to name the exact model input of each
chunk, and hashes it to key vectors, without loading a tokenizer or ONNX Runtime. Implementation: the local ONNX
model (:mod:`memories.models.local_onnx`, in the embedding worker). Not to be confused with the daemon's
:data:`memories.daemon.index.backends.EmbeddingBackend`, which is where a vault's vectors come from: this local model
through the embedding worker, or a remote service through the remote worker.
"""

from __future__ import annotations

import abc
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatMatrix = NDArray[np.float32]

DIMENSION = 768
"""EmbeddingGemma's output width (R-25; its model card, "Inputs and outputs"): every vector of the local ONNX
backend, and the default width of :class:`memories.rag.vectors.VectorStore`. Other backends report theirs as
:attr:`Embedder.dimension` (a remote service's, its reply's width)."""

QUERY_PREFIX = "task: search result | query: "
"""EmbeddingGemma model card, "Prompt instructions": the retrieval query prompt."""
DOCUMENT_PREFIX = "title: {title} | text: "
"""EmbeddingGemma model card, "Prompt instructions": the document prompt; a missing title is ``none``."""


def query_input(query: str) -> str:
    """The exact model input for a search query: ``"task: search result | query: " + query``."""
    return QUERY_PREFIX + query


def document_input(title: str | None, text: str) -> str:
    """The exact model input for a chunk: ``"title: {title or 'none'} | text: " + text``."""
    return DOCUMENT_PREFIX.format(title=title or "none") + text


_HAN_OR_DIGIT = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\d]")


def estimated_tokens(model_input: str) -> float:
    """About how many tokens EmbeddingGemma's tokenizer makes of ``model_input``, without loading it.

    Han characters and digits count one token each (the tokenizer splits digits and has about one token per
    common Han character), any other code point a quarter (English runs near four characters a token). The index
    worker orders inputs by it so that a batch holds texts of similar token length: measured on 4,000 chunks of
    the sample corpus with the real tokenizer, batches of 8 in this order pad to 1.18 times their real tokens,
    in code point order to 1.44 times (exact token order: 1.00).

    >>> estimated_tokens("数据库 2024 migrations")
    10.0
    """
    special = len(_HAN_OR_DIGIT.findall(model_input))
    return special + (len(model_input) - special) / 4


def vector_space_key(description: dict[str, Any]) -> str:
    """``"<backend>:<sha256 hex>"`` over the canonical JSON of ``description`` (which must hold ``backend``).

    Every backend builds its key with this function from everything that changes its vectors (model, revision
    or URL, dimension, prefixes, file digests), so two keys are equal only when the vectors are comparable.
    """
    canonical = json.dumps(description, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return f"{description['backend']}:{hashlib.sha256(canonical.encode('utf-8')).hexdigest()}"


class Embedder(abc.ABC):
    """A model that turns text into vectors in this process (the local ONNX model).

    Callers hash :meth:`query_input` / :meth:`document_input` to key vectors (``memories.rag.vectors``), and
    call :meth:`embed` only for the inputs still missing. Every result is float32 ``[n, dimension]``, finite and
    L2-normalized, so cosine similarity is a dot product.
    """

    @property
    @abc.abstractmethod
    def space_key(self) -> str:
        """The vector space key (see :func:`vector_space_key`); vectors of different keys are never compared."""

    @property
    @abc.abstractmethod
    def dimension(self) -> int:
        """Width of every vector this backend returns."""

    @abc.abstractmethod
    def query_input(self, query: str) -> str:
        """The exact model input for a search query (prefix included)."""

    @abc.abstractmethod
    def document_input(self, title: str | None, text: str) -> str:
        """The exact model input for a document chunk (prefix and title included)."""

    @abc.abstractmethod
    def embed(self, inputs: Sequence[str]) -> FloatMatrix:
        """Vectors float32 ``[len(inputs), dimension]`` for model inputs made by the two methods above.

        Raises:
            MemoriesError: ``invalid_vector`` when the model returns a NaN, infinite or zero vector.
        """

    def embed_queries(self, queries: Sequence[str]) -> FloatMatrix:
        """Vectors float32 ``[len(queries), dimension]`` of search queries."""
        return self.embed([self.query_input(query) for query in queries])

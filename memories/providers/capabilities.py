"""One protocol per capability of a model service: embed, generate, rerank (R-28, R-30, R-36).

A provider is built from its ``config.toml`` table and holds it (``config``); :mod:`memories.providers.choice`
builds the one the table's ``protocol`` names. A provider says what goes on the wire and checks what comes back;
sending, retries, deadlines and cancellation are :func:`memories.http.api.post_json`'s, called by
``workers.remote`` (and :func:`memories.providers.embedding.embed_remote`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from memories.config import EmbeddingConfig, GenerationConfig, RerankConfig
from memories.http.api import Endpoint
from memories.worker_protocol import InputRecipe, StructuredOutput

Task = Literal["query", "document"]
"""What an embedding is for: a search query, or a chunk of a document."""

Refusal = Literal["schema", "json"]
"""What a generation server's refusal refuses: the schema (the next request asks for one level less) or JSON
output at all (the next request asks for none)."""


@dataclass(frozen=True)
class EmbedText:
    """One model input: ``text`` with any prefix applied; ``title`` travels beside it (Gemini documents only)."""

    text: str
    title: str | None = None


class EmbeddingProvider(Protocol):
    """A remote embedding service (``[rag.embedding]``)."""

    config: EmbeddingConfig

    def endpoint(self) -> Endpoint:
        """Where requests go and how the key travels."""
        ...

    def request_size(self) -> int:
        """Inputs per request at most (before any limit the server states)."""
        ...

    def request(self, inputs: Sequence[EmbedText], task: Task) -> dict[str, Any]:
        """The JSON body of one request for ``inputs`` (at most :meth:`request_size`)."""
        ...

    def vectors(self, reply: Any, count: int) -> list[Any]:
        """The raw vectors of a reply to ``count`` inputs, in input order (raises ``invalid_vector``)."""
        ...

    def recipe(self) -> InputRecipe:
        """How the index worker turns a chunk into this service's document input."""
        ...

    def query_text(self, query: str) -> str:
        """A search query as this service's query input."""
        ...

    def space_parts(self) -> dict[str, Any]:
        """What of the input recipe goes into the vector space key beside the URL, model and dimensions
        (``query_prefix``, ``document_prefix``, ``task_types``), so vectors of two recipes never mix."""
        ...


class GenerationProvider(Protocol):
    """The chat model of ``rag ask`` (``[rag.generation]``)."""

    config: GenerationConfig

    def endpoint(self) -> Endpoint:
        """Where requests go and how the key travels."""
        ...

    def request(self, user: str, labels: Sequence[str], structured: StructuredOutput) -> dict[str, Any]:
        """The request body: the system prompt, ``user``, the output cap and the structured output asked for."""
        ...

    def refusal(self, message: str, body: Any) -> Refusal | None:
        """What a failure's message (or its error body) says the server refused, if it names structured output."""
        ...

    def text(self, reply: Any) -> str:
        """The answer text of a complete reply (raises ``invalid_model_output``)."""
        ...


class RerankProvider(Protocol):
    """The learned reranker (``[rag.rerank]``)."""

    config: RerankConfig

    def endpoint(self) -> Endpoint:
        """Where requests go and how the key travels."""
        ...

    def request(self, query: str, documents: Sequence[str], top_n: int) -> dict[str, Any]:
        """The request body."""
        ...

    def order(self, reply: Any, count: int, top_n: int) -> list[tuple[int, float | None]]:
        """Every candidate index ``0..count-1`` once, in the new order, with its score (``None``: not scored)."""
        ...

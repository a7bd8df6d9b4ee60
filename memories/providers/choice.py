"""The one place a model table's ``protocol`` picks its provider (``[rag.embedding]``, ``[rag.generation]``,
``[rag.rerank]``): a new wire format is a module beside :mod:`~memories.providers.gemini` and
:mod:`~memories.providers.compatible` and a line in each table here."""

from __future__ import annotations

from collections.abc import Callable

from memories.config import EmbeddingConfig, GenerationConfig, RerankConfig
from memories.providers.capabilities import EmbeddingProvider, GenerationProvider, RerankProvider
from memories.providers.compatible import CompatibleEmbedding, CompatibleGeneration, CompatibleRerank
from memories.providers.gemini import GeminiEmbedding, GeminiGeneration

_EMBEDDING: dict[str, Callable[[EmbeddingConfig], EmbeddingProvider]] = {
    "gemini": GeminiEmbedding,
    "compatible": CompatibleEmbedding,
}
_GENERATION: dict[str, Callable[[GenerationConfig], GenerationProvider]] = {
    "gemini": GeminiGeneration,
    "compatible": CompatibleGeneration,
}
_RERANK: dict[str, Callable[[RerankConfig], RerankProvider]] = {"compatible": CompatibleRerank}
"""Gemini has no rerank method; ``[rag.rerank] protocol`` takes ``compatible`` only (:mod:`memories.config`)."""


def embedding(config: EmbeddingConfig) -> EmbeddingProvider:
    """The embedding provider of ``[rag.embedding]``."""
    return _EMBEDDING[config.protocol](config)


def generation(config: GenerationConfig) -> GenerationProvider:
    """The generation provider of ``[rag.generation]``."""
    return _GENERATION[config.protocol](config)


def rerank(config: RerankConfig) -> RerankProvider:
    """The learned reranker of ``[rag.rerank]``."""
    return _RERANK[config.protocol](config)

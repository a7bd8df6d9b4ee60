"""The one place a model table's protocol picks its provider (memories/providers/choice.py)."""

from __future__ import annotations

from memories.config import EmbeddingConfig, GenerationConfig, RerankConfig
from memories.providers import choice
from memories.providers.compatible import CompatibleEmbedding, CompatibleGeneration, CompatibleRerank
from memories.providers.gemini import GeminiEmbedding, GeminiGeneration


def test_each_protocol_picks_its_own_provider_holding_its_table() -> None:
    gemini = EmbeddingConfig(protocol="gemini", url="https://g.example/v1beta/models/e:embedContent", model="e")
    compatible = EmbeddingConfig(protocol="compatible", url="http://127.0.0.1/v1/embeddings", model="e")
    chat = GenerationConfig(protocol="gemini", url="https://g.example/v1beta/models/m:generateContent", model="m")
    completions = GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m")
    rerank = RerankConfig(protocol="compatible", url="http://127.0.0.1/v1/rerank", model="r")

    picked = [
        choice.embedding(gemini),
        choice.embedding(compatible),
        choice.generation(chat),
        choice.generation(completions),
        choice.rerank(rerank),
    ]

    kinds = [GeminiEmbedding, CompatibleEmbedding, GeminiGeneration, CompatibleGeneration, CompatibleRerank]
    assert [type(provider) for provider in picked] == kinds
    assert [provider.config for provider in picked] == [gemini, compatible, chat, completions, rerank]
    assert [provider.endpoint().auth for provider in picked] == ["x-goog-api-key", "bearer"] * 2 + ["bearer"]

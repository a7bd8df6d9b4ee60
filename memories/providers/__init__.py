"""Model services on the wire (R-28 … R-39): one protocol per capability, one implementation per wire format.

::

    capabilities.py   EmbeddingProvider, GenerationProvider, RerankProvider: what each capability does
    gemini.py         the Gemini API: embedContent / batchEmbedContents, generateContent (no reranker)
    compatible.py     OpenAI-compatible servers: /v1/embeddings, /v1/chat/completions, the common /v1/rerank
    choice.py         the one place a table's ``protocol`` picks its implementation
    embedding.py      the remote embedding call of any wire format: batching, limits, reply checks
    generation.py     what any wire format of ``rag ask`` shares: the answer schema, the structured output ladder
    operations.py     the URL rule ``config.toml`` checks at daemon start (Gemini URLs name their operation)

Each provider is built from its ``config.toml`` table (:mod:`memories.config`) and holds it. The package is below
the daemon and the workers: it imports neither, nor the vault or sync (``tests/unit/test_layers.py``). This
``__init__`` imports nothing, so :mod:`memories.config` can read :mod:`memories.providers.operations` without
loading httpx or numpy.
"""

"""The index worker's caches and the vectors: the index feed, kept (sealed) vectors, the embedding backends and
model, ``rag index`` and its background rounds, the warm-up after unlock, and ``rag status``. It imports only
:mod:`memories.daemon.core`."""

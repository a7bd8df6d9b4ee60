"""Searches and what is built on them: retrieval, a search's embedding step, ``rag ask`` and ``rag bench``. It
imports :mod:`memories.daemon.core` and :mod:`memories.daemon.index`, never ``ingest`` or ``grants``."""

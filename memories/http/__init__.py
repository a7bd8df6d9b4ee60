"""Everything Memories sends over HTTP: the URL policy, the client factory, retries, and JSON API calls.

Model downloads, remote embeddings, generation and the learned reranker all use it, from ``workers.remote``::

    urls.py      where a request may go (standard library only: the supervisor checks config with it)
    client.py    one httpx client per [rag.http]: proxies, TLS, timeouts, redirect policy
    retry.py     which failures are retried, backoff, Retry-After and Gemini's RetryInfo, the 30 s cap

This ``__init__`` imports nothing, so ``memories.http.urls`` stays light (no httpx) for the supervisor.
"""

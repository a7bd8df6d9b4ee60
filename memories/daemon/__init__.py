"""The daemon: the supervisor process that holds the keys, owns the record store and the jobs, and routes work to
the worker processes (``docs/architecture.md``).

Its wings, each a package, from the ground up (``tests/unit/test_layers.py`` holds the arrows to this plan):

- :mod:`~memories.daemon.core` — what every request stands on: the request context, jobs and their epochs, the
  worker handles, the store gate, the device-only egress rule, the view and filter mappings. It imports no other
  wing.
- :mod:`~memories.daemon.index` — the index worker's caches and the vectors: the index feed, kept (sealed)
  vectors, the embedding backends and model, ``rag index`` and its background rounds, the warm-up after unlock,
  ``rag status``. It imports only ``core``.
- :mod:`~memories.daemon.search` — searches and what is built on them: retrieval, a search's embedding step,
  ``rag ask`` and ``rag bench``. It imports ``core`` and ``index``.
- :mod:`~memories.daemon.ingest` — notes coming in: which files are notes, the ingest job, and the watched
  folders (their watchers, scans and jobs). It imports ``core`` and ``index``.
- :mod:`~memories.daemon.grants` — AI clients: grants, the owner's grant requests and the MCP tool calls, which
  answer through ``search``.

``search`` and ``ingest`` never import each other or ``grants``, and no wing imports a module of the top level:

- :mod:`~memories.daemon.main` — ``memories daemon run``;
- :mod:`~memories.daemon.supervisor` — builds the parts and routes each request to its handler;
- :mod:`~memories.daemon.server` — the client socket;
- :mod:`~memories.daemon.records` — vault and record requests;
- :mod:`~memories.daemon.sync` — sync between devices;
- :mod:`~memories.daemon.restart_watch` — the config and model files whose change needs a restart.
"""

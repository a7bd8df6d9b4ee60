"""The encrypted record store: vaults, records and their revisions, sealed at rest (R-03, R-20).

Blocking code run in the daemon's store thread, below both :mod:`memories.daemon` and :mod:`memories.sync`; it
imports neither the client protocol nor the worker protocol, and hands out its own view types
(:mod:`memories.vault.views`). One module per reason to change::

    store.py         SQLite schema and statements; knows no keys
    keys.py          KDF, master key, vault data keys (Keyring)
    sealing.py       the sealed revision format, record headers, integrity errors
    heads.py         the revision graph and each vault's sealed head set
    merge.py         the pure merge of revision graphs (sync)
    catalog.py       decrypted headers while unlocked, eligibility (R-01, R-02), damaged records
    rules.py         names, titles, metadata, bodies, ids, a revision's place: for writes and imports alike
    records.py       create, read, update, delete, move: one transaction each
    cards.py         ingested files' cards
    vaults.py        vault rows: create, adopt, rename, policy, delete
    exchange.py      what sync exports and imports
    upgrade.py       store format 1 -> 3
    vectors.py       each record's embedding vectors, sealed (one row per record)
    record_store.py  RecordStore: the parts built over one file; unlock and lock
    views.py         the view types it returns

Import rules (``tests/unit/test_layers.py``): ``memories.vault`` imports neither ``memories.daemon``,
``memories.sync``, ``memories.protocol`` nor ``memories.worker_protocol``.
"""

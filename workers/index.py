"""``workers.index``: per-vault retrieval caches in memory — chunks, BM25 (FTS5), vectors — and the search
pipeline over them (:mod:`memories.rag.pipeline`).

At most two vaults are cached (R-21); touching a third evicts the least recently used. Nothing is written to
disk (R-20): the FTS5 database is ``:memory:`` and the supervisor restarts this process on lock. Every query
names the epoch it expects; a cache at another epoch answers :class:`~memories.protocol.IndexStale`.
"""

from __future__ import annotations

from collections import OrderedDict

from memories import protocol as p
from memories.rag.pipeline import VaultCache
from workers.loop import Context, run_worker

MAX_CACHED_VAULTS = 2
"""R-21."""

_caches: OrderedDict[str, VaultCache] = OrderedDict()


def _touch(vault_id: str, *, create: bool) -> VaultCache | None:
    cache = _caches.get(vault_id)
    if cache is None and create:
        cache = _caches[vault_id] = VaultCache(vault_id)
        while len(_caches) > MAX_CACHED_VAULTS:
            _caches.popitem(last=False)
    if cache is not None:
        _caches.move_to_end(vault_id)
    return cache


def _stale(cache: VaultCache | None, epoch: int) -> p.IndexStale | None:
    if cache is not None and cache.epoch == epoch:
        return None
    return p.IndexStale(have=cache.index.have() if cache is not None else None)


def sync(request: p.IndexSync, ctx: Context) -> p.IndexSynced | p.IndexStale:
    if request.fresh:
        _caches.pop(request.vault, None)
    cache = _touch(request.vault, create=request.fresh)
    if cache is None:  # evicted since the supervisor computed this delta: it must start over
        return p.IndexStale(have=None)
    cache.apply(request.upserts, request.deletes, request.epoch if request.final else None)
    stats = cache.index.stats()
    return p.IndexSynced(records=stats.records, chunks=stats.chunks)


def query(request: p.IndexQuery, ctx: Context) -> p.IndexHits | p.IndexStale:
    cache = _touch(request.vault, create=False)
    stale = _stale(cache, request.epoch)
    if stale is not None:
        return stale
    assert cache is not None
    return p.IndexHits(hits=cache.search(request))


def missing(request: p.IndexMissing, ctx: Context) -> p.MissingInputs | p.IndexStale:
    cache = _touch(request.vault, create=False)
    stale = _stale(cache, request.epoch)
    if stale is not None:
        return stale
    assert cache is not None
    return cache.missing(request.space_key, request.limit)


def store_vectors(request: p.IndexStoreVectors, ctx: Context) -> p.VectorsStored:
    """Vectors are content-addressed: stored whatever the epoch, dropped only if the vault left the cache."""
    cache = _touch(request.vault, create=False)
    if cache is None:
        return p.VectorsStored(stored=0)
    return p.VectorsStored(
        stored=cache.store_vectors(request.space_key, request.keys, request.vectors, request.dimension)
    )


def status(request: p.IndexStatus, ctx: Context) -> p.IndexState | p.IndexStale:
    cache = _caches.get(request.vault)
    if request.epoch is not None and (stale := _stale(cache, request.epoch)) is not None:
        return stale
    if cache is None:
        return p.IndexState(
            cached=False, records=0, chunks=0, text_bytes=0, last_build=None, embedded=0, missing=0, vector_bytes=0
        )
    return cache.state(request.space_key)


if __name__ == "__main__":
    run_worker(
        "index",
        {
            p.IndexSync: sync,
            p.IndexQuery: query,
            p.IndexMissing: missing,
            p.IndexStoreVectors: store_vectors,
            p.IndexStatus: status,
        },
    )

"""``workers.index``: per-vault retrieval caches in memory — chunks, BM25 (FTS5), vectors — and the search
pipeline over them (:mod:`memories.rag.pipeline`); and the ingest job's note parsing (titles, front matter), which
must not run in the supervisor (:mod:`memories.rag.notes`).

At most two vaults are cached (R-21); touching a third evicts the least recently used. Nothing is written to
disk (R-20): the FTS5 database is ``:memory:`` and the supervisor restarts this process on lock. Vectors are kept
sealed in the home by the supervisor, which hands each record's set out and back (:mod:`memories.rag.kept`), and so
is each cache's lexical state, as a snapshot (:mod:`memories.rag.snapshots`, issue 28). Every query
names the epoch it expects; a cache at another epoch answers :class:`~memories.worker_protocol.IndexStale`.
"""

from __future__ import annotations

from collections import OrderedDict

import msgspec

from memories import worker_protocol as w
from memories.errors import MemoriesError
from memories.limits import MAX_CACHED_VAULTS, IndexLimits
from memories.rag import kept, snapshots, vault_index
from memories.rag.analysis import analyze_query, analyze_text
from memories.rag.notes import parse_notes
from memories.rag.pipeline import VaultCache
from workers.loop import Context, Handler, run_worker

_caches: OrderedDict[str, VaultCache] = OrderedDict()


def _touch(
    vault_id: str, *, create: bool, made: VaultCache | None = None, limits: IndexLimits | None = None
) -> VaultCache | None:
    cache = _caches.get(vault_id)
    if cache is None and create:
        cache = _caches[vault_id] = made or VaultCache(vault_id, limits)
        while len(_caches) > MAX_CACHED_VAULTS:
            _caches.popitem(last=False)
    if cache is not None:
        _caches.move_to_end(vault_id)
    return cache


def _stale(cache: VaultCache | None, epoch: int) -> w.IndexStale | None:
    if cache is not None and cache.epoch == epoch:
        return None
    return w.IndexStale(have=cache.index.have() if cache is not None else None)


def sync(request: w.IndexSync, ctx: Context) -> w.IndexSynced | w.IndexStale:
    """Apply one sync batch. A ``fresh`` batch starts a cache, unless one appeared meanwhile (another job built
    it): then, as for a delta whose cache was evicted, the answer is :class:`IndexStale` and the supervisor computes
    the delta again. The ``final`` batch drops records not ``expected`` and stamps the epoch only if the cache
    then holds exactly the expected revisions. A batch over the limits (``request.limits``, kept by a fresh cache)
    fails with ``vault_too_large`` and drops the cache."""
    cache = _caches.get(request.vault)
    if (cache is None) != request.fresh:
        return w.IndexStale(have=cache.index.have() if cache is not None else None)
    cache = _touch(request.vault, create=True, limits=request.limits)
    assert cache is not None
    try:
        cache.apply(request.upserts, request.deletes)
    except MemoriesError:
        # Over its limits the vault cannot be searched: do not let it hold a cache slot another vault could use.
        _caches.pop(request.vault, None)
        raise
    if request.final:
        have = cache.index.have()
        extra = [record_id for record_id in have if record_id not in request.expected]
        if extra:
            cache.apply([], extra)
        if cache.index.have() != request.expected:
            return w.IndexStale(have=cache.index.have())
        cache.stamp(request.epoch)
    return w.IndexSynced()


def check_query(request: w.IndexCheckQuery, ctx: Context) -> w.QueryChecked:
    """Raises ``query_too_long`` or ``too_many_terms``; otherwise the number of distinct terms."""
    return w.QueryChecked(terms=len(analyze_query(request.query).terms))


def measure(request: w.IndexMeasure, ctx: Context) -> w.IndexMeasured:
    """Chunks and text bytes of the records sent (chunked, not analysed; no cache is touched)."""
    return w.IndexMeasured(figures=vault_index.measure(request.upserts))


def parse(request: w.ParseNotes, ctx: Context) -> w.NotesParsed:
    """Titles and tags of the ingest job's notes (no cache is touched)."""
    return w.NotesParsed(notes=parse_notes(request.texts))


def _current(vault: str, epoch: int) -> VaultCache | w.IndexStale:
    """The vault's cache if it is at ``epoch`` (and now the most recently used), else the stale answer."""
    cache = _touch(vault, create=False)
    stale = _stale(cache, epoch)
    if stale is not None:
        return stale
    assert cache is not None
    return cache


def query(request: w.IndexQuery, ctx: Context) -> w.IndexHits | w.IndexStale | w.VectorsWanted:
    cache = _current(request.vault, request.epoch)
    if isinstance(cache, w.IndexStale):
        return cache
    want = kept.wanted(cache.vectors, request.space.key) if request.space is not None else None
    return want or cache.query(request)


def resolve(request: w.IndexResolve, ctx: Context) -> w.RecordsNamed | w.IndexStale:
    cache = _current(request.vault, request.epoch)
    return cache if isinstance(cache, w.IndexStale) else w.RecordsNamed(records=cache.index.named(request.names))


def missing(request: w.IndexMissing, ctx: Context) -> w.MissingInputs | w.IndexStale | w.VectorsWanted:
    cache = _current(request.vault, request.epoch)
    if isinstance(cache, w.IndexStale):
        return cache
    return kept.wanted(cache.vectors, request.space.key) or cache.vectors.missing(request.space, request.limit)


def store_vectors(request: w.IndexStoreVectors, ctx: Context) -> w.VectorsStored | w.IndexStale:
    """Vectors are content-addressed: stored whatever the epoch. If the vault left the cache (R-21 allows two),
    its vectors went with it: :class:`IndexStale` tells the supervisor to rebuild before going on. The reply names
    the records whose vector sets changed (the supervisor seals them)."""
    cache = _touch(request.vault, create=False)
    if cache is None:
        return w.IndexStale(have=None)
    stored = cache.vectors.store_vectors(request)
    space = cache.vectors.space(request.space_key)
    touched = [*request.keys, *request.failed]
    return w.VectorsStored(stored=stored, records=kept.records_using(cache.vectors, space, touched) if space else [])


def load_vectors(request: w.IndexLoadVectors, ctx: Context) -> w.VectorsLoaded | w.IndexStale:
    """The vectors kept in the home for one space, unsealed by the supervisor (no epoch: content-addressed)."""
    cache = _touch(request.vault, create=False)
    if cache is None:
        return w.IndexStale(have=None)
    return w.VectorsLoaded(loaded=kept.load(cache.vectors, request))


def record_vectors(request: w.IndexRecordVectors, ctx: Context) -> w.RecordVectors | w.IndexStale | w.VectorsWanted:
    """The current vector sets of records, for the supervisor to seal (no epoch: each names its revision)."""
    cache = _touch(request.vault, create=False)
    if cache is None:
        return w.IndexStale(have=None)
    return kept.wanted(cache.vectors, request.space.key) or kept.record_sets(
        cache.vectors, request.space, request.records
    )


def at_epoch(request: w.IndexAtEpoch, ctx: Context) -> w.IndexSynced | w.IndexStale:
    """Whether the vault's cache is at the asked epoch (without touching its place in the LRU order)."""
    return _stale(_caches.get(request.vault), request.epoch) or w.IndexSynced()


def status(request: w.IndexStatus, ctx: Context) -> w.IndexState:
    cache = _caches.get(request.vault)
    if cache is None:
        return w.IndexState(
            cached=False, records=0, chunks=0, text_bytes=0, last_build=None, embedded=0, missing=0, vector_bytes=0
        )
    loaded = request.space is None or request.space.key in cache.vectors.loaded
    return msgspec.structs.replace(cache.state(request.space), loaded=loaded)


def take_snapshot(request: w.IndexTakeSnapshot, ctx: Context) -> w.IndexSnapshot | w.IndexStale:
    """The vault's cache as bytes for the supervisor to seal, if it is at the asked epoch (the LRU order is left
    as it is: a background write is not a use)."""
    cache = _caches.get(request.vault)
    stale = _stale(cache, request.epoch)
    if stale is not None:
        return stale
    assert cache is not None
    data = snapshots.take(cache)
    if len(data) > w.SNAPSHOT_MAX_BYTES:
        return w.IndexSnapshot(data=b"", have={}, problem=f"{len(data):,} bytes, over {w.SNAPSHOT_MAX_BYTES:,}")
    return w.IndexSnapshot(data=data, have=cache.index.have())


def restore(request: w.IndexRestore, ctx: Context) -> w.IndexRestored | w.IndexStale:
    """Start the vault's cache from a snapshot (nothing is analyzed), unless it has one already; a snapshot over
    ``request.limits`` fails with ``vault_too_large``, as a sync would."""
    cache = _caches.get(request.vault)
    if cache is not None:
        return w.IndexStale(have=cache.index.have())
    restored = snapshots.restore(request.vault, request.data, request.limits)
    if isinstance(restored, str):
        return w.IndexRestored(have=None, problem=restored)
    _touch(request.vault, create=True, made=restored)
    return w.IndexRestored(have=restored.index.have())


def warm_analyser() -> None:
    """Load Jieba's dictionary and OpenCC's tables now, at the worker's start, rather than in the first query or
    build (rjieba loads its dictionary at its first cut; OpenCC its tables at the first conversion)."""
    analyze_text("預熱 warm 分析器")


def drop(request: w.IndexDrop, ctx: Context) -> w.IndexSynced:
    """Forget a deleted vault's cache and its plaintext."""
    _caches.pop(request.vault, None)
    return w.IndexSynced()


HANDLERS: dict[type, Handler] = {
    w.IndexSync: sync,
    w.IndexCheckQuery: check_query,
    w.IndexQuery: query,
    w.ParseNotes: parse,
    w.IndexResolve: resolve,
    w.IndexMissing: missing,
    w.IndexStoreVectors: store_vectors,
    w.IndexLoadVectors: load_vectors,
    w.IndexRecordVectors: record_vectors,
    w.IndexStatus: status,
    w.IndexAtEpoch: at_epoch,
    w.IndexDrop: drop,
    w.IndexTakeSnapshot: take_snapshot,
    w.IndexRestore: restore,
    w.IndexMeasure: measure,
}
"""Each request type the worker answers and its handler."""


if __name__ == "__main__":
    warm_analyser()
    run_worker("index", HANDLERS)

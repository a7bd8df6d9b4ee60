"""Vectors kept in the home, as the index worker sees them: each record's set handed out for sealing, and the sets
handed back once unsealed (issue 19; the sealing is :mod:`memories.vault.vectors`, in the supervisor).

The worker never holds a key or a sealed byte. After a batch is stored, the records whose inputs it held
(:func:`records_using`) have new sets; the supervisor asks for them (:func:`record_sets`) and seals each as that
record's row. When a cache is built (after unlock, a daemon start or an eviction) it has no vectors: a request that
needs a space answers :class:`~memories.worker_protocol.VectorsWanted` until the supervisor has loaded the kept ones
(:func:`load`; only those of inputs the cache's chunks use).
"""

from __future__ import annotations

from collections.abc import Iterable

from memories import worker_protocol as w
from memories.rag.chunk_vectors import ChunkVectors


def wanted(vectors: ChunkVectors, space_key: str) -> w.VectorsWanted | None:
    """:class:`VectorsWanted` when the cache has not been given the kept vectors of ``space_key``, else ``None``."""
    return None if space_key in vectors.loaded else w.VectorsWanted(space_key=space_key)


def load(vectors: ChunkVectors, request: w.IndexLoadVectors) -> int:
    """Add the unsealed vectors (and refusals) of inputs the cache's chunks use; the space counts as loaded from now
    on. Returns how many vectors were new. A set of another width than the cache holds for the space (a remote
    service that changed its width under the same configuration) is left out: its inputs are embedded again."""
    space = request.space
    vectors.loaded.add(space.key)
    if not (request.keys or request.failed) or vectors.store.dimension(space.key) not in (None, request.dimension):
        return 0
    used = {key for _, key in vectors.input_keys(space)}
    width = request.dimension * 4
    keep = [index for index, key in enumerate(request.keys) if key in used]
    kept = request.vectors  # the usual case: every input of the vault's rows is still used
    if len(keep) != len(request.keys):
        kept = b"".join(request.vectors[index * width : (index + 1) * width] for index in keep)
    store = w.IndexStoreVectors(
        vault=request.vault,
        space_key=space.key,
        keys=[request.keys[index] for index in keep],
        vectors=kept,
        dimension=request.dimension,
        failed={key: reason for key, reason in request.failed.items() if key in used},
    )
    return vectors.store_vectors(store)


def records_using(vectors: ChunkVectors, space: w.VectorSpace, keys: Iterable[str]) -> list[str]:
    """The cached records with a chunk whose model input in ``space`` is one of ``keys``, in chunk order."""
    stored = set(keys)
    return list(dict.fromkeys(row.record_id for row, key in vectors.input_keys(space) if key in stored))


def record_sets(vectors: ChunkVectors, space: w.VectorSpace, record_ids: Iterable[str]) -> w.RecordVectors:
    """The current set of each of ``record_ids`` the cache holds: its inputs' keys that have a vector in ``space``,
    those vectors, its refused inputs, and whether that is all of its inputs."""
    asked = set(record_ids)
    inputs: dict[str, dict[str, None]] = {}
    revisions: dict[str, int] = {}
    for row, key in vectors.input_keys(space):
        if row.record_id in asked:
            inputs.setdefault(row.record_id, {})[key] = None
            revisions[row.record_id] = row.revision
    refused = vectors.refused(space.key)
    sets = []
    for record_id, keys in inputs.items():
        have = [key for key in keys if (space.key, key) in vectors.store]
        failed = {key: refused[key] for key in keys if key in refused}
        sets.append(
            w.RecordVectorSet(
                record_id=record_id,
                revision=revisions[record_id],
                keys=have,
                vectors=vectors.store.rows(space.key, have).tobytes() if have else b"",
                failed=failed,
                complete=len(have) + len(failed) == len(keys),
            )
        )
    return w.RecordVectors(dimension=vectors.store.dimension(space.key), records=sets)

"""A vault's lexical cache as bytes and back, for the sealed index snapshots of issue 28 (the index worker's side).

::

    VaultCache ── take ──▶ msgpack [analysis version, last build, records, chunk rows, FTS5 database, vocabulary]
                 ◀── restore ──  (no Jieba, no OpenCC, no chunking: nothing is analyzed again)

The bytes are plaintext derived from notes: they leave this process only to the supervisor, which seals them
(:mod:`memories.vault.snapshots`) and never writes them unsealed (R-20). The worker holds no key. Vectors are not in
a snapshot: they are kept sealed per record already (:mod:`memories.vault.vectors`) and come back through
:class:`~memories.worker_protocol.VectorsWanted` as for a cache built from the records.

A snapshot of another :func:`analysis_version` (another layout, release of Memories, rjieba or OpenCC) is refused:
its terms could differ from what analysing the records now gives, and a snapshot must never change a ranking.
"""

from __future__ import annotations

import sqlite3
from importlib import metadata

import msgspec

from memories import __version__
from memories.limits import IndexLimits
from memories.rag.pipeline import VaultCache
from memories.rag.vault_index import IndexSnapshotState

SNAPSHOT_LAYOUT = 2
"""The layout of :class:`_Snapshot` and of :class:`~memories.rag.vault_index.IndexSnapshotState`; bump it when
either changes."""


def _version_of(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "?"


def analysis_version() -> str:
    """What a snapshot's analysis depends on: the layout, this release, and the analyser's packages (their
    dictionaries and conversion tables), e.g. ``"1 memories 0.1.0 rjieba 0.2.2 opencc 1.4.2"``."""
    return f"{SNAPSHOT_LAYOUT} memories {__version__} rjieba {_version_of('rjieba')} opencc {_version_of('opencc')}"


class _Snapshot(msgspec.Struct, array_like=True):
    analysis: str
    last_build: float | None
    index: IndexSnapshotState


def take(cache: VaultCache) -> bytes:
    """The cache's lexical state as bytes (MessagePack; about 5 times the size of the vault's text: chunk
    text, phrase keys, term lists and the FTS5 pages)."""
    return msgspec.msgpack.encode(_Snapshot(analysis_version(), cache.last_build, cache.index.snapshot_state()))


def restore(vault_id: str, data: bytes, limits: IndexLimits | None = None) -> VaultCache | str:
    """A new cache of ``vault_id`` within ``limits`` from :func:`take`'s bytes, not at any epoch yet (the supervisor
    compares its records with the store and stamps it through the final :class:`~memories.worker_protocol.IndexSync`);
    or why it cannot be used (one line: another analysis version, undecodable bytes).

    Raises:
        MemoriesError: ``vault_too_large`` when the snapshot is over ``limits`` (lowered since it was taken), with
            the figures it holds, as a build from the records would (:meth:`VaultIndex.apply`).
    """
    try:
        header = msgspec.msgpack.decode(data, type=tuple[str, float | None, msgspec.Raw])  # the rest unread
    except (msgspec.DecodeError, msgspec.ValidationError):
        return "the snapshot does not decode"
    if header[0] != analysis_version():
        return f"the snapshot is of another analysis version ({header[0]!r}, now {analysis_version()!r})"
    try:
        snapshot = msgspec.msgpack.decode(data, type=_Snapshot)
        cache = VaultCache(vault_id, limits)
        cache.index.restore_state(snapshot.index)
    except (msgspec.DecodeError, msgspec.ValidationError, sqlite3.DatabaseError):
        return "the snapshot does not decode"
    cache.last_build = snapshot.last_build
    return cache

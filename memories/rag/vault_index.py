"""One vault's retrieval cache: records, chunks and the lexical index, updated record by record (R-19, R-21).

``workers.index`` holds at most two of these (R-21). It learns what a cache holds from :meth:`VaultIndex.have`,
sends only what changed through :meth:`VaultIndex.apply`, and searches with :meth:`VaultIndex.search`;
everything lives in memory and goes away with the object (R-20)::

    index = VaultIndex("v1")
    index.apply([IndexRecord(id="r1", revision=1, kind="card", title="Ownership", body="所有權規則……")], [])
    hits = index.search(analyze_query("所有权"), match_mode="any", limit=10)
    [(hit.row.record_id, hit.row.chunk.byte_start, hit.row.chunk.byte_end) for hit in hits]   # [('r1', 0, 21)]

A later vector stage reads the same rows: :meth:`VaultIndex.rows`, :meth:`VaultIndex.row` and, for the strict
match modes, :meth:`VaultIndex.filter_rowids`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Iterator, Sequence
from typing import Literal

import msgspec

from memories.errors import MemoriesError
from memories.limits import IndexLimits, VaultFigures
from memories.protocol import MatchMode
from memories.rag.analysis import AnalyzedQuery, AnalyzedText, analyze_text
from memories.rag.chunking import Chunk
from memories.rag.filters import RecordFacts, admits
from memories.rag.lexical import KeptChunk, LexicalEntry, LexicalIndex, LexicalState
from memories.rag.notes import note_chunks
from memories.worker_protocol import IndexRecord, SearchFilter

_TITLE_ONLY_CHUNK = Chunk(text="", start=0, end=0, byte_start=0, byte_end=0, chunk_hash=hashlib.sha256().hexdigest())


class ChunkRow(msgspec.Struct, frozen=True):
    """One indexed chunk with what results and later stages need.

    Attributes:
        rowid: unique within this index and never reused; a chunk that an edit leaves unchanged keeps its row id,
            every other chunk of the edited record gets a new one.
        record_id, revision, kind, title, source: the record the chunk belongs to.
        chunk: the span of the body; a record with an empty or whitespace-only body has one title-only chunk
            with empty text and spans ``(0, 0)``, found through its title and metadata.

    Its analysis (terms, phrase key) is in the lexical index only: :meth:`VaultIndex.analysis`.
    """

    rowid: int
    record_id: str
    revision: int
    kind: Literal["memory", "card"]
    title: str
    source: str | None
    chunk: Chunk


class Hit(msgspec.Struct, frozen=True):
    """A search result: the chunk row and its BM25 score (``-bm25()``, higher is better)."""

    row: ChunkRow
    score: float


class IndexStats(msgspec.Struct, frozen=True):
    """Size of a cache: ``records``, ``chunks``, and ``text_bytes`` as counted against ``[rag] max_text_bytes``."""

    records: int
    chunks: int
    text_bytes: int


class _Record(msgspec.Struct, frozen=True):
    revision: int
    kind: Literal["memory", "card"]
    title: str
    source: str | None
    tags: list[str]
    rowids: tuple[int, ...]
    text_bytes: int
    date: float | None = None
    meta: dict[str, str] = {}


class IndexSnapshotState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A :class:`VaultIndex` as bytes can carry it (:mod:`memories.rag.snapshots`): its records, chunk rows (with
    their analysis: phrase keys and terms) and lexical index, so that a restore analyzes nothing."""

    records: dict[str, _Record]
    rows: list[ChunkRow]
    text_bytes: int
    next_rowid: int
    lexical: LexicalState


class VaultIndex:
    """The retrieval cache of one vault: its eligible records, their chunks and a BM25 index over them.

    Args:
        vault_id: named in errors.
        max_chunks: chunk limit (``[rag] max_chunks``; R-21: 10,000).
        max_text_bytes: limit on UTF-8 bytes of body + title + source + tags over all records (``[rag]
            max_text_bytes``; R-21: 16 MiB).

    One caller at a time: the index worker serializes work on a vault.
    """

    def __init__(
        self,
        vault_id: str,
        *,
        max_chunks: int = IndexLimits().chunks,
        max_text_bytes: int = IndexLimits().text_bytes,
    ) -> None:
        self.vault_id = vault_id
        self._max_chunks = max_chunks
        self._max_text_bytes = max_text_bytes
        self._records: dict[str, _Record] = {}
        self._rows: dict[int, ChunkRow] = {}
        self._text_bytes = 0
        self._next_rowid = 1
        self._lexical = LexicalIndex()
        self.changes = 0
        """Counts the changes of the rows (each :meth:`apply` and :meth:`restore_state`), so that what is derived
        from them (:class:`memories.rag.vector_view.VectorView`) knows when it is out of date."""

    def snapshot_state(self) -> IndexSnapshotState:
        """Everything this index holds, for a sealed snapshot (:mod:`memories.rag.snapshots`)."""
        return IndexSnapshotState(
            dict(self._records), list(self._rows.values()), self._text_bytes, self._next_rowid, self._lexical.state()
        )

    def restore_state(self, state: IndexSnapshotState) -> None:
        """Replace what this (new) index holds by ``state``, analyzing nothing.

        Raises:
            MemoriesError: ``vault_too_large`` when ``state`` is over this index's limits (lowered since it was
                taken), as :meth:`apply`; the index is then unchanged.
            sqlite3.DatabaseError: ``state.lexical`` holds no database of this schema.
        """
        self._check_limits(VaultFigures(len(state.rows), state.text_bytes))
        lexical = LexicalIndex.restored(state.lexical)
        self._records = dict(state.records)
        self._rows = {row.rowid: row for row in state.rows}
        self._text_bytes = state.text_bytes
        self._next_rowid = state.next_rowid
        self._lexical = lexical
        self.changes += 1

    def have(self) -> dict[str, int]:
        """Record id → revision of every record in the cache."""
        return {record_id: record.revision for record_id, record in self._records.items()}

    def apply(self, upserts: Iterable[IndexRecord], deletes: Iterable[str]) -> None:
        """Remove ``deletes``, then add or replace ``upserts`` (the last one wins for a repeated id).

        Only the named records are touched. A replaced record's chunks are compared by hash: unchanged ones
        (same text, title and metadata) keep their rows and analysis, the rest are analyzed and indexed anew.
        Deleting an id the cache does not hold is not an error.

        Raises:
            MemoriesError: ``vault_too_large`` when the result would exceed ``max_chunks`` or ``max_text_bytes``,
                with ``details`` ``{"vault", "limit": "chunks" | "text_bytes", "max", "value", "chunks",
                "text_bytes"}`` (the last two: what the cache would hold); the cache is then exactly as it was
                before the call.
        """
        incoming = {record.id: record for record in upserts}
        leaving = [record_id for record_id in dict.fromkeys([*deletes, *incoming]) if record_id in self._records]
        text_bytes = (
            self._text_bytes
            - sum(self._records[record_id].text_bytes for record_id in leaving)
            + sum(map(_text_bytes, incoming.values()))
        )
        chunks = {record_id: record_chunks(record) for record_id, record in incoming.items()}
        chunk_count = (
            len(self._rows)
            - sum(len(self._records[record_id].rowids) for record_id in leaving)
            + sum(map(len, chunks.values()))
        )
        self._check_limits(VaultFigures(chunk_count, text_bytes))

        rows: list[ChunkRow] = []  # every row of the incoming records
        entries: list[LexicalEntry] = []  # the new rows, for FTS5
        kept: list[ChunkRow] = []  # rows whose chunk survived an edit unchanged
        records: dict[str, _Record] = {}
        next_rowid = self._next_rowid
        for record_id, record in incoming.items():
            title = analyze_text(record.title)
            meta_terms = [term for text in (record.source or "", *record.tags) for term in analyze_text(text).terms]
            unchanged = self._unchanged_chunks(record)
            record_rows: list[ChunkRow] = []
            for chunk in chunks[record_id]:
                same_text = unchanged.get(chunk.chunk_hash)
                if same_text:  # same text, title and metadata: the same terms; keep the row, move its offsets
                    row = msgspec.structs.replace(
                        same_text.pop(), revision=record.revision, kind=record.kind, chunk=chunk
                    )
                    kept.append(row)
                else:
                    row, entry = _new_row(next_rowid, record, chunk, title, meta_terms)
                    entries.append(entry)
                    next_rowid += 1
                record_rows.append(row)
            rows.extend(record_rows)
            records[record_id] = _Record(
                revision=record.revision,
                kind=record.kind,
                title=record.title,
                source=record.source,
                tags=list(record.tags),
                rowids=tuple(row.rowid for row in record_rows),
                text_bytes=_text_bytes(record),
                date=record.date,
                meta=dict(record.meta),
            )
        kept_rowids = {row.rowid for row in kept}
        old_rowids = [
            rowid for record_id in leaving for rowid in self._records[record_id].rowids if rowid not in kept_rowids
        ]
        self._lexical.replace(
            old_rowids,
            entries,
            [KeptChunk(rowid=row.rowid, kind=row.kind, byte_start=row.chunk.byte_start) for row in kept],
        )

        for record_id in leaving:
            del self._records[record_id]
        for rowid in old_rowids:
            del self._rows[rowid]
        self._records.update(records)
        self._rows.update((row.rowid, row) for row in rows)
        self._text_bytes = text_bytes
        self._next_rowid = next_rowid
        self.changes += 1

    def admitted(self, search: SearchFilter | None) -> set[int] | None:
        """The row ids of every chunk of the records ``search`` admits (:func:`memories.rag.filters.admits`);
        ``None`` without a filter (every row)."""
        if search is None:
            return None
        return {
            rowid
            for record in self._records.values()
            if admits(search, RecordFacts(record.kind, record.date, record.tags, record.source, record.meta))
            for rowid in record.rowids
        }

    def search(
        self,
        query: AnalyzedQuery,
        *,
        match_mode: MatchMode = "any",
        limit: int = 10,
        cards_only: bool = False,
        admitted: Collection[int] | None = None,
    ) -> list[Hit]:
        """The best ``limit`` chunks for ``query`` under ``match_mode``, best first (see ``rag.lexical``).

        Equal scores rank by record id, then byte offset. An empty query (no terms) finds nothing.

        Raises:
            MemoriesError: ``invalid_argument`` below 1. (The R-17 cap of 100 results is checked where a request
                enters the daemon; grouped memory search asks for more chunks than it returns records.)
        """
        if limit < 1:
            raise MemoriesError("invalid_argument", f"the result limit must be at least 1, not {limit}")
        ranked = self._lexical.search(
            query, match_mode=match_mode, limit=limit, cards_only=cards_only, admitted=admitted
        )
        return [Hit(row=self._rows[rowid], score=score) for rowid, score in ranked]

    def filter_rowids(
        self,
        query: AnalyzedQuery,
        *,
        match_mode: Literal["all", "phrase"],
        cards_only: bool = False,
        admitted: Collection[int] | None = None,
    ) -> set[int]:
        """Row ids of every chunk a strict match mode (and ``admitted``) admits, for filtering vector candidates
        (R-14)."""
        return self._lexical.filter_rowids(query, match_mode=match_mode, cards_only=cards_only, admitted=admitted)

    def term_weights(self, query: AnalyzedQuery) -> dict[str, float]:
        """The idf of each query term over this vault's chunks (see ``LexicalIndex.term_weights``)."""
        return self._lexical.term_weights(query.terms)

    def term_chunks(self, query: AnalyzedQuery) -> dict[str, int]:
        """How many chunks hold each query term (``rag explain``)."""
        return self._lexical.term_chunks(query.terms)

    def widened(self, query: AnalyzedQuery) -> dict[str, list[str]]:
        """The words each single Han character of the query stood for in :meth:`search`, when no chunk holds any
        query term (see ``rag.lexical``); ``{}`` otherwise."""
        return self._lexical.widened(query)

    def record_rows(self, record_id: str) -> list[ChunkRow]:
        """The chunk rows of a record in body order (``[]`` for a record the cache does not hold)."""
        record = self._records.get(record_id)
        return [] if record is None else [self._rows[rowid] for rowid in record.rowids]

    def named(self, names: Sequence[str]) -> list[list[str]]:
        """For each of ``names``, the ids of the records it names, in that order: the record with that id; else
        the records whose ``source`` is that path (as ``rag ingest`` stored it, relative to the folder ingested);
        else the records with that title, compared exactly. ``[]`` when it names none; several only by title or
        by a source two records share."""
        by_source: dict[str, list[str]] = {}
        by_title: dict[str, list[str]] = {}
        for record_id, record in self._records.items():
            if record.source is not None:
                by_source.setdefault(record.source, []).append(record_id)
            by_title.setdefault(record.title, []).append(record_id)
        return [
            [name] if name in self._records else sorted(by_source.get(name) or by_title.get(name) or [])
            for name in names
        ]

    def rows(self) -> Iterator[ChunkRow]:
        """Every chunk row, in row id order."""
        return iter(self._rows.values())

    def row(self, rowid: int) -> ChunkRow:
        """The chunk row with this row id; ``KeyError`` if it is not (or no longer) in the index."""
        return self._rows[rowid]

    def analysis(self, rowid: int) -> tuple[frozenset[str], str]:
        """The chunk's distinct analyzed terms (title, text, metadata) and its text's phrase key, from the lexical
        index (:meth:`~memories.rag.lexical.LexicalIndex.analysis`); ``KeyError`` if it is not in the index."""
        return self._lexical.analysis(rowid)

    def stats(self) -> IndexStats:
        """How much the cache holds."""
        return IndexStats(records=len(self._records), chunks=len(self._rows), text_bytes=self._text_bytes)

    def _unchanged_chunks(self, record: IndexRecord) -> dict[str, list[ChunkRow]]:
        """Chunk hash → current rows of the cached version of ``record``, if its title and metadata are unchanged.

        An edit usually leaves most chunks of a record as they were; those keep their rows and their analysis.
        """
        cached = self._records.get(record.id)
        if cached is None or (cached.title, cached.source, cached.tags) != (record.title, record.source, record.tags):
            return {}
        unchanged: dict[str, list[ChunkRow]] = {}
        for rowid in cached.rowids:
            row = self._rows[rowid]
            unchanged.setdefault(row.chunk.chunk_hash, []).append(row)
        return unchanged

    def _check_limits(self, figures: VaultFigures) -> None:
        limits = IndexLimits(chunks=self._max_chunks, text_bytes=self._max_text_bytes)
        limit = limits.over(figures)
        if limit is None:
            return
        chunks = limit == "chunks"
        value, maximum = (figures.chunks, limits.chunks) if chunks else (figures.text_bytes, limits.text_bytes)
        what = "chunks" if limit == "chunks" else "bytes of text and metadata"
        raise MemoriesError(
            "vault_too_large",
            f"vault {self.vault_id} would hold {value:,} {what}; a cached vault holds at most {maximum:,}",
            {
                "vault": self.vault_id,
                "limit": limit,
                "max": maximum,
                "value": value,
                "chunks": figures.chunks,
                "text_bytes": figures.text_bytes,
            },
        )


def record_chunks(record: IndexRecord) -> list[Chunk]:
    """The chunks a record is indexed as: its body's (:func:`memories.rag.notes.note_chunks`), or one title-only
    chunk for an empty body."""
    return note_chunks(record.body) or [_TITLE_ONLY_CHUNK]


def measure(records: Iterable[IndexRecord]) -> VaultFigures:
    """What ``records`` add up to against the limits (chunks, text bytes), analysing nothing (chunking only)."""
    chunks = text_bytes = 0
    for record in records:
        chunks += len(record_chunks(record))
        text_bytes += _text_bytes(record)
    return VaultFigures(chunks, text_bytes)


def _text_bytes(record: IndexRecord) -> int:
    """UTF-8 bytes a record counts against ``[rag] max_text_bytes``: body, title, source path and tags."""
    texts = (record.body, record.title, record.source or "", *record.tags)
    return sum(len(text.encode()) for text in texts)


def _new_row(
    rowid: int, record: IndexRecord, chunk: Chunk, title: AnalyzedText, meta_terms: list[str]
) -> tuple[ChunkRow, LexicalEntry]:
    """Analyze a new chunk: its row for results and its entry for the lexical index."""
    body = analyze_text(chunk.text)
    row = ChunkRow(
        rowid=rowid,
        record_id=record.id,
        revision=record.revision,
        kind=record.kind,
        title=record.title,
        source=record.source,
        chunk=chunk,
    )
    entry = LexicalEntry(
        rowid=rowid,
        record_id=record.id,
        kind=record.kind,
        byte_start=chunk.byte_start,
        title_terms=title.terms,
        body_terms=body.terms,
        meta_terms=meta_terms,
        phrase_key=body.phrase_key,
        title_key=title.phrase_key,
    )
    return row, entry

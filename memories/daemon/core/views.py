"""The record store's view types turned into the client and worker protocols' structs, in one place."""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.filters import record_date
from memories.vault.catalog import split_tags
from memories.vault.store import VaultRow
from memories.vault.views import IndexText, ListedRecord, OpenedRevision


def vault_info(row: VaultRow) -> p.VaultInfo:
    """A vault as ``vault create|list|policy|rename`` show it."""
    return p.VaultInfo(id=row.id, name=row.name, device_only=row.device_only)


def record_view(revision: OpenedRevision) -> p.RecordView:
    """``memory read``'s reply."""
    conflict = revision.conflict
    return p.RecordView(
        id=revision.id,
        revision=revision.revision,
        revision_id=revision.revision_id,
        kind=revision.kind,
        sensitivity=revision.sensitivity,
        title=revision.title,
        body=revision.body,
        meta=revision.meta,
        created=revision.created,
        updated=revision.updated,
        conflict=p.Conflict(conflict.revisions, conflict.deleted) if conflict is not None else None,
    )


def record_summary(record: ListedRecord) -> p.RecordSummary:
    """One row of ``memory list``."""
    return p.RecordSummary(
        record.id,
        record.revision,
        record.kind,
        record.sensitivity,
        record.title,
        record.damaged,
        record.conflict,
        record.missing,
        None if record.created is None else record_date(record.meta or {}, record.created),
    )


def index_record(text: IndexText) -> w.IndexRecord:
    """An eligible record as the index worker gets it: ``source`` and ``tags`` are the safe metadata indexed with
    BM25 weight 2 (R-13); ``date`` and ``meta`` are for search filters only."""
    return w.IndexRecord(
        id=text.id,
        revision=text.revision,
        kind=text.kind,
        title=text.title,
        body=text.body,
        source=text.meta.get("source"),
        tags=split_tags(text.meta.get("tags")),
        date=None if text.created is None else record_date(text.meta, text.created),
        meta=text.meta,
    )

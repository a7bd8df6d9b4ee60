"""The search filters of a request, checked and made the index worker's :class:`~memories.worker_protocol.SearchFilter`,
and the same filters over a listing (``memory list``) in the supervisor.

A malformed filter is ``invalid_argument`` naming it, before any work. Values are data (:mod:`memories.rag.filters`):
a date is read by ``datetime``, tags and metadata are compared as strings, and the source glob is matched segment
by segment; a glob that names a parent folder (``..``) or an absolute path is refused, since ``source`` is relative
to the folder imported and could never match it.
"""

from __future__ import annotations

import time

from memories import protocol as p
from memories import worker_protocol as w
from memories.dates import time_bound, timestamp
from memories.errors import MemoriesError
from memories.rag.filters import RecordFacts, admits, tag_key
from memories.vault.catalog import split_tags
from memories.vault.rules import check_meta
from memories.vault.views import ListedRecord

Filtered = (
    p.MemoryList | p.MemorySearch | p.RagSearch | p.RagExplain | p.RagAsk | p.ToolSearch | p.ToolRetrieve | p.ToolAsk
)
"""The requests that take search filters."""


def search_filter(request: Filtered, now: float | None = None) -> w.SearchFilter | None:
    """``request``'s filters as the index worker applies them (``cards_only`` is ``kind`` card), or ``None`` when
    it has none. ``now`` (Unix seconds, default the clock) is what a duration counts back from.

    Raises:
        MemoriesError: ``invalid_argument`` naming the filter (a date or duration it cannot read, ``since`` after
            ``until``, an empty tag, a glob with ``..`` or starting with ``/``, a metadata key that no record can
            have, ``--cards-only`` with ``--kind memory``).
    """
    moment = time.time() if now is None else now
    since = _bound("since", request.since, moment, end=False)
    until = _bound("until", request.until, moment, end=True)
    if since is not None and until is not None and since > until:
        raise MemoriesError("invalid_argument", f"since ({request.since}) is after until ({request.until})")
    kind = request.kind
    if getattr(request, "cards_only", False):
        if kind == "memory":
            raise MemoriesError("invalid_argument", "--cards-only is --kind card; it cannot go with --kind memory")
        kind = "card"
    if kind not in (None, "memory", "card"):  # memory list's other kinds: filtered by the listing itself
        kind = None
    tags = [tag_key(tag) for tag in request.tags]
    if any(not tag for tag in tags):
        raise MemoriesError("invalid_argument", "tag: a tag is empty")
    source = _glob(request.source) if request.source is not None else None
    try:
        meta = check_meta(dict(request.meta))
    except MemoriesError as exc:
        raise MemoriesError("invalid_argument", f"meta: {exc.message}") from None
    if since is None and until is None and kind is None and not tags and source is None and not meta:
        return None
    return w.SearchFilter(since=since, until=until, tags=tags, kind=kind, source=source, meta=meta)


def record_date(meta: dict[str, str], created: float) -> float:
    """A record's date for filters (Unix seconds): its metadata ``date`` when that is an ISO 8601 day or time
    (local time without an offset), else ``created``, its first revision's time."""
    found = timestamp(meta["date"]) if "date" in meta else None
    return created if found is None else found


def listed(records: list[ListedRecord], search: w.SearchFilter | None) -> list[ListedRecord]:
    """The rows of a listing ``search`` admits, and every damaged record whose header cannot be read: no filter can
    decide about it, and the listing is where damage shows (:meth:`memories.vault.catalog.Catalog.summaries` lists
    damaged records whatever the kind asked)."""
    if search is None:
        return records
    return [
        record
        for record in records
        if record.kind is None
        or admits(
            search,
            RecordFacts(
                record.kind,
                None if record.created is None else record_date(record.meta or {}, record.created),
                split_tags((record.meta or {}).get("tags")),
                (record.meta or {}).get("source"),
                record.meta or {},
            ),
        )
    ]


def _bound(name: str, value: str | None, now: float, *, end: bool) -> float | None:
    if value is None:
        return None
    try:
        return time_bound(value, now, end=end)
    except ValueError as exc:
        raise MemoriesError("invalid_argument", f"{name}: {exc}") from None


def _glob(pattern: str) -> str:
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in pattern):
        raise MemoriesError("invalid_argument", "source: the glob holds a control character")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise MemoriesError(
            "invalid_argument",
            f"source: {pattern!r} leaves the folder; a source is a path relative to the folder imported "
            "(daily/**, **/*.md)",
        )
    return pattern

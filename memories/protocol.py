"""Every message that crosses a process boundary, as msgspec structs (placeholder: extended by the daemon work)."""

from __future__ import annotations

from typing import Literal

import msgspec

PROTOCOL_VERSION = 1

RecordKind = Literal["memory", "card", "credential", "file"]
Sensitivity = Literal["general", "private"]
MatchMode = Literal["any", "all", "phrase"]


class IndexRecord(msgspec.Struct, frozen=True):
    """One retrieval-eligible record as the supervisor hands it to ``workers.index`` (R-01, R-02).

    Only records of kind ``memory`` or ``card`` with sensitivity ``general`` are ever built into this struct.
    ``source`` is the ingest source path (``None`` for records added by hand); ``tags`` are front-matter tags.
    ``source`` and ``tags`` are the safe metadata indexed with BM25 weight 2 (R-13).
    """

    id: str
    revision: int
    kind: Literal["memory", "card"]
    title: str
    body: str
    source: str | None = None
    tags: list[str] = []

"""The client protocol: every message between a client (CLI, MCP) and the daemon, as msgspec structs.

::

    client ──Envelope(Request)──▶ daemon
    client ◀─(Progress | Heartbeat)* then Reply | Failure── daemon

Frames are length-prefixed MessagePack (:mod:`memories.framing`). The daemon decodes client frames with one
``Decoder(Envelope)``, so code past the boundary only sees typed values. A reply's ``result`` struct encodes to
exactly the ``--json`` document the CLI prints (the ``$type`` tag is removed), so the shapes documented in the
README are these structs. ``PROTOCOL_VERSION`` versions this public conversation only; the daemon's conversation
with its workers is internal and versioned on its own (:mod:`memories.worker_protocol`).
"""

from __future__ import annotations

import functools
import operator
from typing import Annotated, Any, ForwardRef, Generic, Literal, TypeVar, get_args

import msgspec
from msgspec import Meta

from memories.limits import MAX_QUERY_BYTES, MAX_RESULTS

PROTOCOL_VERSION = 8
"""2: the daemon sends :class:`Heartbeat` frames while a request runs. 3: ``rag ask`` and ``memory_ask`` replies
say ``answer_truncated`` (a client of 3 cannot read the replies of a daemon of 2: ``restart it`` says so).
4: :class:`ToolStatus`, which a daemon of 3 cannot read. 5: the requests ``rag bench`` and ``rag explain``, which a
daemon of 4 cannot decode. 6: ``rag status`` says where vectors are kept and how the vault's background index job is
going, ``jobs`` a job's rate and time left (a daemon of 5 would leave them at their defaults, which would mislead).
7: watched folders (``rag watch|unwatch``, their state in ``daemon status`` and ``rag status``; ``memory list``
says a card's file is missing). 8: search filters on the requests that search, list or answer, which a daemon of 7
cannot decode; ``memory list`` gives each record's date."""

HEARTBEAT_SECONDS = 1.0
"""While a request runs the daemon sends a frame (progress or :class:`Heartbeat`) at least this often."""

SILENCE_SECONDS = 10.0
"""A client that receives no frame for this long gives up with ``daemon_unresponsive``: a live daemon sends one
every :data:`HEARTBEAT_SECONDS`, however long its job runs, so only a stopped or stuck daemon stays silent."""

MAX_JSON_INTEGER = 2**53
"""Largest integer argument accepted: JSON's exact integer range (IEEE 754 doubles, RFC 8259 section 6)."""

T = TypeVar("T")
R = TypeVar("R")

RecordKind = Literal["memory", "card", "credential", "file"]
Sensitivity = Literal["general", "private"]
MatchMode = Literal["any", "all", "phrase"]
SearchMode = Literal["bm25", "vector", "hybrid"]
JobState = Literal["queued", "running", "cancelling", "done", "failed", "cancelled"]
"""``cancelling``: cut (cancel, lock, a revoke...) while its last step is still ending; then ``cancelled`` or
``failed``."""
IngestStatus = Literal["added", "updated", "moved", "unchanged", "refused", "skipped", "deleted"]
"""``deleted``: a watched folder's file is gone and its card was deleted (watches only)."""
OnDelete = Literal["delete", "keep"]
"""What a watched folder does with the card of a file that is gone."""
GrantScope = Literal["search", "read", "retrieve", "ask"]
"""What a grant lets an AI client do: one MCP tool each (``memory_search``, ``memory_read``, ``memory_retrieve``,
``memory_ask``)."""
GrantState = Literal["active", "suspended", "expired", "revoked"]
"""``suspended``: the grant would be active, but the home is locked (lock suspends every grant)."""

TAG_FIELD = "$type"


class _Message(msgspec.Struct, tag_field=TAG_FIELD, kw_only=True, forbid_unknown_fields=True):
    """Base of every tagged message; the class name is the tag."""


class ClientRequest(_Message, Generic[R]):
    """A request whose reply's result is an ``R``: a result struct, or a union of them (``RagIndex`` is a
    ``ClientRequest["IndexReport | JobStarted"]``; results are defined further down, hence the quotes). The client
    decodes each reply into its request's :meth:`reply_type` and the daemon checks that it answers with one (the
    same trick as :class:`memories.worker_protocol.WorkerRequest`)."""

    @classmethod
    def declared_reply(cls) -> Any:
        """The ``R`` this request class declares: a result struct class or a union of them."""
        return _reply_type(cls)

    def reply_type(self) -> Any:
        """The type of this request's result, for decoding and ``isinstance`` (:meth:`declared_reply`, but a
        :class:`Granted` call's is its tool call's)."""
        return self.declared_reply()


_REPLY_TYPES: dict[type, Any] = {}


def _reply_type(kind: type) -> Any:
    """The ``R`` of ``kind``'s ``ClientRequest[R]`` base, evaluated in this module once it is needed (so a client
    resolves only the request it sends)."""
    found = _REPLY_TYPES.get(kind)
    if found is None:
        (base,) = [b for b in getattr(kind, "__orig_bases__", ()) if getattr(b, "__origin__", None) is ClientRequest]
        (argument,) = get_args(base)
        if isinstance(argument, ForwardRef):
            names = argument.__forward_arg__.split("|")
            argument = functools.reduce(operator.or_, (globals()[name.strip()] for name in names))
        found = _REPLY_TYPES[kind] = argument
    return found


class _Result(_Message, forbid_unknown_fields=False):
    """Base of every result struct. A client ignores the fields it does not know, so a daemon may add an optional
    field without a protocol bump (docs/architecture.md, "Client protocol compatibility")."""


# ---------------------------------------------------------------------------------------------------------------
# Client -> daemon requests


class Status(ClientRequest["DaemonStatus"]):
    """``daemon status``."""


class Stop(ClientRequest["Done"]):
    """``daemon stop``: the daemon finishes this reply, cancels every job and exits."""


class Init(ClientRequest["Done"]):
    """``init``: create the key hierarchy from a passphrase (UTF-8, never from a command-line argument); one shorter
    than :data:`~memories.limits.MIN_PASSPHRASE_CHARS` only with ``allow_short``."""

    passphrase: str
    allow_short: bool = False


class Unlock(ClientRequest["Done"]):
    """``unlock``: open the key hierarchy with the passphrase (UTF-8); a wrong one is refused even when
    already unlocked."""

    passphrase: str


class Lock(ClientRequest["Done"]):
    """``lock``: drop every key and decrypted header, cancel vault jobs, restart the workers that held plaintext."""


class VaultCreate(ClientRequest["VaultInfo"]):
    """``vault create``: ``device_only`` marks data that must never go to a non-loopback model endpoint."""

    name: str
    device_only: bool = False


class VaultList(ClientRequest["VaultListing"]):
    """``vault list``: every vault of the home."""


class VaultShow(ClientRequest["VaultDetail"]):
    """``vault show``: ``vault`` is an id or a unique name, as in every request that names a vault."""

    vault: str


class VaultPolicy(ClientRequest["VaultInfo"]):
    """``vault policy``: set the vault's ``device_only`` flag (see :class:`VaultCreate`)."""

    vault: str
    device_only: bool


class VaultRename(ClientRequest["VaultInfo"]):
    """``vault rename``: give the vault ``name`` (its id, keys and records stay)."""

    vault: str
    name: str


class VaultDelete(ClientRequest["VaultDeleted"]):
    """``vault delete``: revoke the vault's grants, remove the vault, its key and every record (the CLI asks to
    confirm first)."""

    vault: str


class MemoryAdd(ClientRequest["RecordRef"]):
    """``memory add``; ``body`` is raw bytes so the daemon is the one place that checks UTF-8 and size."""

    vault: str
    kind: RecordKind
    sensitivity: Sensitivity
    title: str
    body: bytes
    meta: dict[str, str] = {}


class MemoryRead(ClientRequest["RecordView"]):
    """``memory read``: one revision of a record; ``revision`` ``None`` reads the latest, an int the one of that
    depth, a string the one whose revision id starts with it (8 to 64 hex digits)."""

    vault: str
    id: str
    revision: int | str | None = None


# Search filters (issue 20): the same optional fields on every request that searches, lists or answers, the MCP
# tools' too (their descriptions are the tools' input schemas). Checked and turned into the worker's SearchFilter by
# memories/daemon/core/filters.py (invalid_argument naming the filter); applied before the top-k in both rankings.

MAX_FILTER_VALUES = 32
"""Most tags, and most metadata pairs, in one filter."""

MAX_FILTER_BYTES = 1024
"""Longest filter value (UTF-8 bytes): a date, a tag, a glob or a metadata value."""

Since = (
    Annotated[
        str,
        Meta(
            max_length=64,
            description="Only notes dated at or after this: an ISO 8601 date or time (local time without an "
            "offset), or a duration back from now such as 30m, 12h, 7d, 2w.",
        ),
    ]
    | None
)
Until = (
    Annotated[
        str,
        Meta(
            max_length=64,
            description="Only notes dated at or before this (a date includes that whole day), as for since.",
        ),
    ]
    | None
)
Tags = Annotated[
    list[Annotated[str, Meta(min_length=1, max_length=MAX_FILTER_BYTES)]],
    Meta(
        max_length=MAX_FILTER_VALUES,
        description="Only notes with every one of these tags (front matter tags; # and case do not matter; a nested "
        "tag such as project/alpha counts for project).",
    ),
]
FilterKind = Annotated[
    Literal["memory", "card"] | None, Meta(description="Only memories, or only knowledge cards (imported files).")
]
SourceGlob = (
    Annotated[
        str,
        Meta(
            min_length=1,
            max_length=MAX_FILTER_BYTES,
            description="Only notes whose source path (relative to the folder imported) matches this glob: * and ? "
            "within a folder, ** across folders (daily/**, **/*.md); a name alone matches at any depth.",
        ),
    ]
    | None
)
MetaPairs = Annotated[
    dict[str, Annotated[str, Meta(max_length=MAX_FILTER_BYTES)]],
    Meta(max_length=MAX_FILTER_VALUES, description="Only notes whose metadata has each key with exactly this value."),
]
FILTER_FIELDS = ("since", "until", "tags", "kind", "source", "meta")


class _Filtered(_Message):
    """A request that takes the search filters (see :data:`FILTER_FIELDS`); a note's date is its metadata ``date``
    (front matter ``date`` or ``created``, else the file's time, as ingest stores it), else its first revision's
    time."""

    since: Since = None
    until: Until = None
    tags: Tags = []
    kind: FilterKind = None
    source: SourceGlob = None
    meta: MetaPairs = {}


class MemoryList(ClientRequest["RecordListing"], _Filtered, kw_only=True):
    """``memory list``: summaries (never bodies) of the vault's records, of ``kind`` only when given, filtered as
    searches are (:class:`_Filtered`; ``kind`` is any record kind here)."""

    vault: str
    kind: RecordKind | None = None  # type: ignore[assignment]


class MemoryUpdate(ClientRequest["RecordRef"]):
    """``memory update``: fields left ``None`` keep their value from the latest revision (or from ``revision``, by
    depth or id, for a record in conflict); the new revision's parents are every head."""

    vault: str
    id: str
    title: str | None = None
    body: bytes | None = None
    sensitivity: Sensitivity | None = None
    meta: dict[str, str] | None = None
    revision: int | str | None = None


class MemoryDelete(ClientRequest["Done"]):
    """``memory delete``: remove the record and every revision of it."""

    vault: str
    id: str


class MemoryMove(ClientRequest["RecordRef"]):
    """``memory move``: move record ``id`` with every revision from ``vault`` to vault ``to``."""

    vault: str
    id: str
    to: str


class MemorySearch(ClientRequest["MemorySearchReport"], _Filtered, kw_only=True):
    """``memory search``: BM25 grouped by record; ``limit`` counts **records** (at most 100), each with
    up to 3 chunks."""

    vault: str
    query: str
    limit: int = 10


class RagIngest(ClientRequest["IngestReport"]):
    """``rag ingest``: ``paths`` are absolute (the client resolves them against its working folder)."""

    vault: str
    paths: list[str]
    title: str | None = None
    recursive: bool = False
    exclude: list[str] = []


class RagWatch(ClientRequest["WatchReport"]):
    """``rag watch``: register ``folder`` (absolute) and import it at once as :class:`RagIngest` would; the daemon
    then keeps the vault current while the home is unlocked. For a registered folder, ``resume`` resumes a paused
    watch (what is still absent is deleted, within the deletion rules) and ``accept_deletions`` resumes it and
    deletes what is absent, however much; either may change ``exclude``, ``recursive`` and ``on_delete`` when
    given (``None``: as registered)."""

    vault: str
    folder: str
    recursive: bool | None = None
    exclude: list[str] | None = None
    on_delete: OnDelete | None = None
    resume: bool = False
    accept_deletions: bool = False


class RagWatchList(ClientRequest["WatchListing"]):
    """``rag watch list``: the watched folders (of ``vault`` when given); while locked only their number."""

    vault: str | None = None


class RagUnwatch(ClientRequest["Done"]):
    """``rag unwatch``: stop watching ``folder`` (absolute); its cards stay."""

    vault: str
    folder: str


class _ChunkSearch(_Filtered, kw_only=True):
    """The options of a search of chunks, shared by ``rag search`` and ``rag explain`` (the daemon makes them one
    ``memories.daemon.search.spec.SearchSpec``)."""

    vault: str
    query: str
    mode: SearchMode | None = None
    match_mode: MatchMode = "any"
    limit: int = 10
    cards_only: bool = False
    no_rerank: bool = False


class RagSearch(ClientRequest["SearchReport"], _ChunkSearch, kw_only=True):
    """``rag search``: ``limit`` counts **chunks** (at most 100); ``mode`` ``None`` is hybrid when the model
    is installed and the vault (nearly) embedded, else bm25; ``highlight`` computes ``highlights`` for each hit."""

    highlight: bool = False
    """Compute ``highlights`` for each hit (the CLI asks for them for human output only; they cost ~0.2 ms a hit)."""


class RagExplain(ClientRequest["ExplainReport"], _ChunkSearch, kw_only=True):
    """``rag explain``: why each result of a search ranks where it does, stage by stage, and the same for one
    ``chunk`` that may not have made the list (``RECORD`` or ``RECORD:N`` for its N-th chunk, ``RECORD`` a record
    id, source path or title; or a chunk-hash prefix of at least 8 hex digits), from the code path that ranks
    ``rag search``. It embeds no chunk (the query
    only, in vector and hybrid modes) and calls the learned ``[rag.rerank]`` service only with ``rerank``.
    The other fields are :class:`_ChunkSearch`'s."""

    chunk: str | None = None
    rerank: bool = False


class RagStatus(ClientRequest["RagStatusReport"]):
    """``rag status``: what the vault's index cache and the model hold; answered while locked too."""

    vault: str


class RagAsk(ClientRequest["AskReport"], _Filtered, kw_only=True):
    """``rag ask``: an answer from the vault's evidence chunks by the configured generation service, with checked
    citations (R-43). Retrieval as :class:`RagSearch` (``limit`` chunks at most, 8 by default); the endpoint is
    the daemon's ``[rag.generation]``, never chosen by a request."""

    vault: str
    question: str
    mode: SearchMode | None = None
    limit: int = 8
    cards_only: bool = False
    no_rerank: bool = False


class RagIndex(ClientRequest["IndexReport | JobStarted"]):
    """``rag index``: embed the vault's missing chunks; ``background`` answers :class:`JobStarted` at once
    and keeps going in budgeted rounds."""

    vault: str
    background: bool = False


class BenchQuestion(msgspec.Struct, forbid_unknown_fields=True):
    """One question of a ``rag bench`` fixture: its ``line`` in the file (1-based, named in errors), the query, and
    its relevant records as the fixture names them (each a record id, a title or a ``source`` path)."""

    line: int
    query: str
    relevant: list[str]


class RagBench(ClientRequest["BenchReport"]):
    """``rag bench``: each question searched on its own (its own job and budget) in each mode, scored over the
    distinct records of the ranking (:class:`BenchReport`). ``modes`` empty: bm25, vector and hybrid when an
    embedding backend is usable, else bm25. ``rerank``: also the learned ``[rag.rerank]`` stage (it costs money),
    which is skipped otherwise."""

    vault: str
    questions: list[BenchQuestion]
    modes: list[SearchMode] = []
    rerank: bool = False


class RagModelInstall(ClientRequest["InstallReport"]):
    """``rag model-install``: download the pinned model files, or copy them from ``from_dir``
    (absolute) instead."""

    from_dir: str | None = None


class Jobs(ClientRequest["JobListing"]):
    """``jobs``: recently finished jobs, then the queued and running ones."""


class JobCancel(ClientRequest["JobListing"]):
    """``jobs cancel``: cancel the job ``job_id``; the reply lists that job."""

    job_id: int


class GrantCreate(ClientRequest["GrantCreated"]):
    """``grant create``: a grant on one vault for one AI client; ``expires`` is ``30m``, ``12h``, ``7d``, an
    ISO-8601 time or ``never``, read against the daemon's clock. The reply holds the only copy of the token."""

    vault: str
    client: str
    scope: list[GrantScope]
    expires: str = "30d"


class GrantList(ClientRequest["GrantListing"]):
    """``grant list``: every grant (of ``vault`` when given), never a token."""

    vault: str | None = None


class GrantRevoke(ClientRequest["GrantListing"]):
    """``grant revoke``: by ``id``, or by ``token`` (``inject --force`` replacing an entry whose grant id it does
    not know); exactly one of them."""

    id: str | None = None
    token: str | None = None


# The arguments of the MCP tools (memories/mcp/tools.py): each struct is the tool's input schema (its fields'
# ``Meta``: bounds and descriptions, inlined by :mod:`memories.mcp.schemas`), the strict decoding of a client's
# arguments, and the daemon request. A new optional argument is one field with a default.

Query = Annotated[
    str,
    Meta(
        description="What to look for, in the notes' language (at most 1,024 UTF-8 bytes).",
        extra={"max_utf8_bytes": MAX_QUERY_BYTES},
    ),
]
"""A query or question: :data:`~memories.limits.MAX_QUERY_BYTES` UTF-8 bytes at most (R-17, ``query_too_long``:
JSON Schema counts code points, so the bound is in ``extra`` and checked by the MCP server's decoding)."""

Mode = Annotated[SearchMode | None, Meta(description="bm25, vector or hybrid (default: hybrid when ready).")]

CardsOnly = Annotated[bool, Meta(description="Only imported documents (knowledge cards).")]


class ToolSearch(ClientRequest["ToolSearchReport"], _Filtered, kw_only=True):
    """``memory_search`` through a grant: BM25 grouped by record, as :class:`MemorySearch`."""

    query: Query
    limit: Annotated[int, Meta(ge=1, le=MAX_RESULTS, description="How many notes (1 to 100).")] = 10


class ToolRead(ClientRequest["ReadPage"]):
    """``memory_read`` through a grant: one page of a record's body from the UTF-8 byte ``offset``."""

    id: Annotated[
        str,
        Meta(
            min_length=1,
            max_length=64,
            pattern="^[^\\x00-\\x1f\\x7f-\\x9f]+$",
            description="The note's id (from a search or retrieve result).",
        ),
    ]
    revision: (
        Annotated[int, Meta(ge=1, le=MAX_JSON_INTEGER, description="A revision number (default: the latest).")] | None
    ) = None
    offset: Annotated[int, Meta(ge=0, le=MAX_JSON_INTEGER, description="UTF-8 byte offset to start the page at.")] = 0


class ToolRetrieve(ClientRequest["ToolRetrieveReport"], _Filtered, kw_only=True):
    """``memory_retrieve`` through a grant: chunks with labels and byte spans, as :class:`RagSearch`."""

    query: Query
    mode: Mode = None
    match_mode: Annotated[
        MatchMode, Meta(description="any (default): any term; all: every term; phrase: the exact phrase.")
    ] = "any"
    limit: Annotated[int, Meta(ge=1, le=MAX_RESULTS, description="How many chunks (1 to 100).")] = 10
    cards_only: CardsOnly = False
    no_rerank: Annotated[bool, Meta(description="Skip the reranker.")] = False


class ToolAsk(ClientRequest["ToolAskReport"], _Filtered, kw_only=True):
    """``memory_ask`` through a grant: as :class:`RagAsk`; ``insufficient_evidence`` is a result, not an error."""

    question: Annotated[
        str,
        Meta(description="The question (at most 1,024 UTF-8 bytes).", extra={"max_utf8_bytes": MAX_QUERY_BYTES}),
    ]
    mode: Mode = None
    limit: Annotated[int, Meta(ge=1, le=MAX_RESULTS, description="How many chunks of evidence at most (1 to 100).")] = 8
    cards_only: CardsOnly = False


class ToolStatus(ClientRequest["ToolStatusReport"]):
    """What an MCP server tells its client about its grant (the server's instructions, ``memory_ask``'s
    ``openWorldHint``): any valid grant may ask, whatever its scope, and the answer never builds a cache or embeds
    (:class:`ToolStatusReport`)."""


ToolCall = ToolSearch | ToolRead | ToolRetrieve | ToolAsk | ToolStatus


class Granted(ClientRequest["ToolResult"]):
    """An MCP tool call: checked against the grant of ``token`` in the daemon (token, expiry, revocation, scope,
    then the vault's state) and answered from that grant's vault only."""

    token: str
    call: ToolCall

    def reply_type(self) -> Any:
        """The reply type of its ``call``."""
        return self.call.reply_type()


class SyncInit(ClientRequest["SyncReport"]):
    """``sync init``: make ``folder`` the vault's sync folder, its key wrapped under the sync ``passphrase``."""

    vault: str
    folder: str
    passphrase: str


class SyncJoin(ClientRequest["SyncJoined"]):
    """``sync join``: add the vault of sync folder ``folder`` (its id and key), as ``name`` when given."""

    folder: str
    passphrase: str
    name: str | None = None


class SyncPush(ClientRequest["SyncReport"]):
    """``sync push``: write the vault's revisions the folder lacks."""

    vault: str


class SyncPull(ClientRequest["SyncReport"]):
    """``sync pull``: import what the folder holds and the vault has not seen."""

    vault: str


class SyncStatus(ClientRequest["SyncReport"]):
    """``sync status``: the vault's last push and pull and what they found."""

    vault: str


Request = (
    Status
    | Stop
    | Init
    | Unlock
    | Lock
    | VaultCreate
    | VaultList
    | VaultShow
    | VaultPolicy
    | VaultRename
    | VaultDelete
    | MemoryAdd
    | MemoryRead
    | MemoryList
    | MemoryUpdate
    | MemoryDelete
    | MemoryMove
    | MemorySearch
    | RagIngest
    | RagWatch
    | RagWatchList
    | RagUnwatch
    | RagSearch
    | RagStatus
    | RagAsk
    | RagIndex
    | RagBench
    | RagExplain
    | RagModelInstall
    | Jobs
    | JobCancel
    | GrantCreate
    | GrantList
    | GrantRevoke
    | Granted
    | SyncInit
    | SyncJoin
    | SyncPush
    | SyncPull
    | SyncStatus
)


class Envelope(msgspec.Struct, forbid_unknown_fields=True):
    """One client request with the client's view of home and config file (absolute paths, R-09)."""

    protocol: int
    home: str
    config: str
    request: Request


# ---------------------------------------------------------------------------------------------------------------
# Daemon -> client results (each encodes to the command's --json document)


class Done(_Result, omit_defaults=True):
    """A command with nothing to report beyond success: ``{"ok": true}``, with ``locked`` after ``init``, ``unlock``
    and ``lock``."""

    ok: bool
    locked: bool | None = None


class WorkerInfo(msgspec.Struct):
    """One worker process: ``completed`` counts the requests it answered, by request type, since the daemon
    started (across restarts); ``dumpable`` is what the current process reported in its hello (``false``: it can
    leave no core dump; ``null`` until it said hello, or where it cannot be told)."""

    name: str
    pid: int | None
    state: str
    restarts: int
    completed: dict[str, int] = {}
    dumpable: bool | None = None


class WatchInfo(msgspec.Struct):
    """One watched folder. ``state``: ``watching`` (file system events), ``scanning`` (a periodic scan: the
    watcher could not start, ``error`` says why), ``paused`` (``paused`` says why; nothing is imported or deleted
    until ``rag watch VAULT DIR --resume``) or ``stopped`` (the home is locked). ``cards``: files imported as cards;
    ``missing``: of those, files seen absent (kept, or waiting to be deleted); ``refused``: files refused (each
    reported once, in ``error``). Times are Unix seconds."""

    vault: str
    vault_name: str
    folder: str
    recursive: bool
    exclude: list[str]
    on_delete: OnDelete
    state: Literal["watching", "scanning", "paused", "stopped"]
    cards: int
    missing: int
    refused: int
    last_change: float | None
    last_scan: float | None
    paused: str | None = None
    error: str | None = None


class WatchReport(_Result):
    """``rag watch``: the folder's watch and what its import (at registration or resume) did."""

    watch: WatchInfo
    results: list[IngestResult]
    over_limit: ErrorInfo | None = None


class WatchListing(_Result):
    """``rag watch list``; ``count`` is known while locked, ``watches`` only while unlocked."""

    locked: bool
    count: int
    watches: list[WatchInfo]


class DaemonStatus(_Result):
    """``daemon status``; ``uptime`` in seconds, ``config_digest`` SHA-256 hex of config.toml (or "absent");
    ``dumpable`` whether the supervisor may dump core (``false`` once :mod:`memories.hardening` ran, ``null``
    where it cannot be told)."""

    pid: int
    uptime: float
    home: str
    config: str
    config_digest: str
    restart_needed: bool
    initialized: bool
    locked: bool
    workers: list[WorkerInfo]
    queued_jobs: int
    running_jobs: int
    dropped_replies: int
    """Worker replies that arrived for a step nobody waited for any more (cancelled, cut, locked away)."""
    dropped_results: int
    """Job results computed but withheld at acceptance: the job was cancelled, the home locked, or the vault changed
    under an epoch-checked job (which then ran again)."""
    test_hooks: bool
    dumpable: bool | None = None
    embedding_batches: int = 0
    """Embedding batches stored since the daemon started (a pull that changed nothing adds none)."""
    model_loaded: bool | None = None
    """The local embedding model is loaded in the embedding worker now (as ``rag status`` ``model.loaded``); null
    with a remote embedding service."""
    watch_count: int = 0
    """Watched folders registered in the home (known while locked too)."""
    watches: list[WatchInfo] = []
    """Each watched folder (empty while locked)."""


class VaultInfo(_Result):
    """``vault create``, ``vault policy`` and one row of ``vault list``; ``id`` is 16 lowercase hex digits."""

    id: str
    name: str
    device_only: bool


class VaultDetail(_Result):
    """``vault show``: ``created`` is a Unix time in seconds; ``records`` counts live records of every kind."""

    id: str
    name: str
    device_only: bool
    created: float
    records: int


class VaultDeleted(_Result):
    """``vault delete``: the vault that is gone, how many records went with it and how many grants were revoked."""

    id: str
    name: str
    records: int
    revoked_grants: int


class VaultListing(_Result):
    """``vault list``."""

    vaults: list[VaultInfo]


class RecordRef(_Result):
    """``memory add`` and ``memory update``: the record's id and the revision just written."""

    id: str
    revision: int


class Conflict(msgspec.Struct):
    """A record with several heads (made on different devices): their revision ids, and whether one of them is a
    deletion (an edit made against a delete). ``memory update`` resolves it."""

    revisions: list[str]
    deleted: bool


class RecordView(_Result):
    """``memory read``: ``created``/``updated`` are Unix times in seconds; ``revision_id`` is the revision's id
    (SHA-256 hex of the sealed revision)."""

    id: str
    revision: int
    revision_id: str
    kind: RecordKind
    sensitivity: Sensitivity
    title: str
    body: str
    meta: dict[str, str]
    created: float
    updated: float
    conflict: Conflict | None = None


class RecordSummary(msgspec.Struct):
    """One row of ``memory list``: the latest revision of a record, without body or metadata. ``damaged``: its
    ciphertext failed authentication (searches leave it out; reading it is ``integrity_error``); ``kind``,
    ``sensitivity`` and ``title`` are ``None`` when its header is the damaged part."""

    id: str
    revision: int
    kind: RecordKind | None
    sensitivity: Sensitivity | None
    title: str | None
    damaged: bool = False
    conflict: bool = False
    missing: bool = False
    """A card whose file a watched folder no longer has (kept: ``--on-delete keep``, a paused watch, or not yet
    confirmed gone)."""
    date: float | None = None
    """The record's date (Unix seconds): its metadata ``date`` (a note's front matter ``date`` or ``created``, else
    its file's time when it was imported), else its first revision's time; what ``since``/``until`` compare."""


class RecordListing(_Result):
    """``memory list``."""

    records: list[RecordSummary]


class ErrorInfo(msgspec.Struct, omit_defaults=True):
    """A stable error code (listed in :mod:`memories.errors`) and a message for people; ``details`` only where a
    script needs the facts (``vault_too_large``: ``limit``, ``max``, ``value``, ``over``, ``chunks``, ``text_bytes``,
    ``setting``)."""

    code: str
    message: str
    details: dict[str, Any] | None = None


class JobInfo(msgspec.Struct):
    """One job as ``memories jobs`` shows it; ``done``/``total`` count ``unit`` (files, chunks, bytes); ``vault`` is
    the vault's id and ``vault_name`` its name when the job started (both null for a model install)."""

    id: int
    kind: str
    vault: str | None
    state: JobState
    done: int
    total: int | None
    error: ErrorInfo | None
    unit: str | None = None
    vault_name: str | None = None
    background: bool = False
    """Started by the daemon itself (after a pull, ``rag index --background``, the sync timer): no client waits."""
    rate: float | None = None
    """``unit`` per second over the job's last minute of work (null until measured)."""
    seconds_left: float | None = None
    """At that rate, seconds until ``done`` reaches ``total`` (null when either is unknown)."""


class JobListing(_Result):
    """``jobs`` and ``jobs cancel``."""

    jobs: list[JobInfo]


class JobStarted(_Result):
    """A job left running in the background (``rag index --background``); ``memories jobs`` follows it."""

    job_id: int


class IngestResult(msgspec.Struct):
    """One path of an ingest run: ``path`` as found on disk, ``source`` the key within the vault."""

    path: str
    source: str | None
    status: IngestStatus
    id: str | None = None
    revision: int | None = None
    error: ErrorInfo | None = None


class IngestReport(_Result, omit_defaults=True):
    """``rag ingest``: one result per path found (files stored, refused or skipped). ``over_limit``: the cards are
    stored, but the vault is now over a per-vault index limit (``vault_too_large``), so its searches fail; the CLI
    exits 3."""

    results: list[IngestResult]
    over_limit: ErrorInfo | None = None


class SearchHit(msgspec.Struct, omit_defaults=True):
    """One chunk of ``rag search`` (R-10). Offsets are UTF-8 bytes into the record's body, half-open.

    ``highlights`` (only when the request asked for them, else omitted) are code point spans within ``text``
    where query terms occur, for human output.
    """

    label: str
    asset_id: str
    revision: int
    chunk_hash: str
    byte_start: int
    byte_end: int
    score: float
    title: str
    kind: str
    source: str | None
    text: str
    highlights: list[tuple[int, int]] = []


class SearchReport(_Result):
    """``rag search``: the mode actually used and the chunks in rank order, labelled S1..Sn. ``weak_matches``:
    there are results and none of them is evidence by ``rag ask``'s rule (none holds half of the query's content
    words' weight, none reaches the backend's evidence cosine): the vault may hold nothing about the query, and
    the results are only the nearest chunks (:func:`memories.rag.answers.weak_matches`)."""

    mode: SearchMode
    match_mode: MatchMode
    results: list[SearchHit]
    weak_matches: bool = False


class ChunkHit(msgspec.Struct):
    """One chunk of a ``memory search`` record: citation label, and ``byte_start``/``byte_end`` in UTF-8
    bytes of the record's body, half-open."""

    label: str
    byte_start: int
    byte_end: int
    text: str


class RecordHit(msgspec.Struct):
    """One record of ``memory search``: its best chunk's score and up to 3 of its chunks, best first."""

    id: str
    revision: int
    title: str
    score: float
    chunks: list[ChunkHit]


class MemorySearchReport(_Result):
    """``memory search``: records in rank order; chunk labels S1..Sn run across the records."""

    results: list[RecordHit]


class RemoteBackendState(msgspec.Struct):
    """A remote embedding backend in ``rag status``: ``[rag.embedding]``'s protocol, URL, model and dimension
    (null: fixed by the first reply, not yet seen), whether its key variable is set in the daemon's environment."""

    protocol: str
    url: str
    model: str
    dimension: int | None
    api_key_env: str | None
    key_set: bool


class ModelState(msgspec.Struct, omit_defaults=True):
    """The embedding backend in ``rag status``: for the local model, files present, hashes match the manifest,
    the vector space key once loaded (else null), and its folder; for a remote backend (``remote``), installed
    and verified are true, ``path`` is empty and ``space_key`` is known from the start."""

    installed: bool
    verified: bool
    space_key: str | None
    path: str
    backend: Literal["local", "gemini", "compatible"] = "local"
    remote: RemoteBackendState | None = None
    loaded: bool | None = None
    """The local model is loaded in the embedding worker now (it loads in the background after an unlock, a model
    install and a restart of the worker; issue 28); null for a remote backend (nothing to load)."""


class IndexingState(msgspec.Struct):
    """A vault's running index job in ``rag status``: its id, whether the daemon started it by itself, chunks
    embedded of the total, chunks per second (null until measured) and seconds left at that rate (null when not
    known)."""

    job_id: int
    background: bool
    done: int
    total: int | None
    rate: float | None = None
    seconds_left: float | None = None


class BackgroundFailure(msgspec.Struct):
    """The vault's last background index job that a worker crash ended (issue 29, item 4), in ``rag status`` until a
    background job of the vault ends well: the job, its error, the retries in a row so far (``attempt`` of
    ``attempts``), and the job that retries it after a backoff (null: not retried any more after ``attempts``
    retries; the next change, or ``rag index --background``, tries again)."""

    job_id: int
    error: ErrorInfo
    attempt: int
    retry_job: int | None
    attempts: int


class RagStatusReport(_Result):
    """``rag status``; ``last_build`` is a Unix time in seconds of the last index change, or null."""

    vault: str
    locked: bool
    records: int | None
    chunks: int
    cache: Literal["cold", "warm"]
    text_bytes: int
    limits: dict[str, int]
    last_build: float | None
    model: ModelState
    embedded: int | None
    """Distinct model inputs with a vector in the cache; null while the vault's vectors are kept sealed in the home
    and not loaded yet (the first vector or hybrid search, or the warm-up after an unlock, loads them)."""
    missing: int | None
    """Chunks still without a vector; null while the cache is cold (not known until the vault is indexed)."""
    vector_bytes: int
    failed: int = 0
    """Chunks the embedding service refused (too long); they are not sent again in this vector space."""
    vectors: Literal["sealed in the home", "memory only"] = "sealed in the home"
    """Where vectors are kept: sealed in the home across lock and restart (``[rag] keep_vectors``, the default), or
    in memory only (R-19 as written)."""
    indexing: IndexingState | None = None
    """The vault's running index job, if one runs."""
    background_failure: BackgroundFailure | None = None
    """The vault's last background index job that a worker crash ended, and its retry (null when none, or once a
    background job ended well since)."""
    watch_count: int = 0
    """Folders watched into this vault (known while locked too)."""
    watches: list[WatchInfo] = []
    """Each of them (empty while locked)."""
    over_limit: ErrorInfo | None = None
    """The vault's ``vault_too_large`` when it was last found over its limits: what its records add up to
    (``details``: ``chunks``, ``text_bytes``), the limit and the ``setting`` to raise (``rag.max_chunks`` …)."""


class EmbedFailure(msgspec.Struct):
    """A chunk the embedding service refused for good (too long): ``error`` quotes the server."""

    asset_id: str
    revision: int
    chunk_hash: str
    error: str


class IndexReport(_Result):
    """``rag index``: chunks embedded by this job, found already embedded, still missing, and refused by the
    embedding service (not resent; the CLI exits 3 when there are any)."""

    embedded_now: int
    reused: int
    missing: int
    failed: list[EmbedFailure] = []


class Citation(msgspec.Struct):
    """One source of an answer: the label it had in the request, the chunk's place in its record (UTF-8 byte
    span of revision ``revision``'s body, half-open, checkable with ``memory read ID --revision N``) and the exact
    ``text`` that was sent."""

    label: str
    asset_id: str
    revision: int
    chunk_hash: str
    byte_start: int
    byte_end: int
    title: str
    text: str


class AskReport(_Result, omit_defaults=True):
    """``rag ask``: ``status`` ``answered`` with the answer and its citations, or ``insufficient_evidence`` with
    ``answer`` null, no citations and ``reason`` (``retrieval``: no chunk was evidence, the service was not
    called; ``model``: the answer cited nothing). ``answer_truncated``: the answer was longer than the answer cap
    (:func:`memories.caps.cut_answer`) and was cut, ending with an ellipsis."""

    status: Literal["answered", "insufficient_evidence"]
    answer: str | None
    answer_truncated: bool
    citations: list[Citation]
    mode: SearchMode
    reason: Literal["retrieval", "model"] | None = None


class ExplainedTerm(msgspec.Struct):
    """One query term: as matched (NFKC, case and script folded), how the query writes it when that differs
    (Han words before Traditional/Simplified folding), its idf ``weight`` over the vault's chunks, and how many
    chunks hold it."""

    term: str
    written: list[str]
    weight: float
    chunks: int


class QueryExplanation(msgspec.Struct):
    """The query as ranking sees it: its terms, its normalized ``phrase``, its ``language`` (``han``, ``latin``,
    ``mixed`` or null), the parts of it that give no term (``dropped``: punctuation and symbols), and, when no
    chunk holds any of its words, the words each of its single Han characters stood for (``widened``)."""

    terms: list[ExplainedTerm]
    phrase: str
    language: str | None
    dropped: list[str]
    widened: dict[str, list[str]]


class LexicalStage(msgspec.Struct):
    """A chunk in the BM25 ranking: its ``rank`` (1-based) and ``score``, the share of the query's idf weight it
    holds (``coverage``), the weight its rank carries in hybrid fusion (``vote``), or a ``note`` on why it has no
    rank or vote."""

    rank: int | None = None
    score: float | None = None
    coverage: float | None = None
    vote: float | None = None
    note: str | None = None


class VectorStage(msgspec.Struct):
    """A chunk in the vector ranking: its ``rank`` (1-based) and ``cosine``, or a ``note`` on why it has none."""

    rank: int | None = None
    cosine: float | None = None
    note: str | None = None


class FusionStage(msgspec.Struct):
    """A chunk after hybrid fusion: its ``score``, its ``rank`` and each rule that moved it, with its numbers."""

    score: float
    rank: int
    rules: list[str]


class RerankStage(msgspec.Struct):
    """A chunk after the lightweight reranker: its ``score``, the ``boost`` it was multiplied by (null: kept its
    place, another language) and the boost's parts: the ``coverage`` it counted (script factor applied; 0 under the
    floor), ``phrase``, ``script``."""

    score: float
    boost: float | None
    coverage: float | None
    phrase: bool
    script: float | None
    note: str | None = None


class ExplainedChunk(msgspec.Struct):
    """One chunk of ``rag explain``: where it is (record, revision, its ``position`` among the record's
    ``chunks``, byte span, hash), each stage it went through (null: that stage did not run or did not see it),
    the learned reranker's score when it ran, and its final ``rank`` and ``label`` (null: not in the list)."""

    asset_id: str
    revision: int
    chunk_hash: str
    position: int
    chunks: int
    title: str
    source: str | None
    byte_start: int
    byte_end: int
    language: str | None
    bm25: LexicalStage | None
    vector: VectorStage | None
    fusion: FusionStage | None
    rerank: RerankStage | None
    learned: float | None = None
    rank: int | None = None
    label: str | None = None


class ExplainReport(_Result):
    """``rag explain``: the mode used, the query's analysis, the results in rank order, the named ``chunk`` (null
    when none was asked for), how many chunks have no vector (absent from the vector ranking: explain never
    embeds them), ``notes`` on the stages that did not run, and ``weak_matches`` as :class:`SearchReport`'s."""

    mode: SearchMode
    match_mode: MatchMode
    query: QueryExplanation
    results: list[ExplainedChunk]
    chunk: ExplainedChunk | None
    missing_vectors: int
    notes: list[str]
    weak_matches: bool = False


class BenchFigures(msgspec.Struct):
    """One mode of ``rag bench``: the means over the questions of nDCG@10, Recall@10 and MRR@10
    (:mod:`memories.rag.metrics`), and the questions with no relevant record in the top 10, in fixture order."""

    ndcg: float = msgspec.field(name="ndcg@10")
    recall: float = msgspec.field(name="recall@10")
    mrr: float = msgspec.field(name="mrr@10")
    missed: list[str] = msgspec.field(default_factory=list)


class BenchReport(_Result):
    """``rag bench``: figures per mode searched, in the order asked, and how many questions there were."""

    modes: dict[str, BenchFigures]
    questions: int
    learned_rerank: bool


class InstalledFile(msgspec.Struct):
    """One model file after ``rag model-install``: ``bytes`` is its size, ``transferred`` what this run fetched or
    copied (less than ``bytes`` when a download resumed, 0 when ``reused``)."""

    path: str
    status: Literal["reused", "downloaded", "copied"]
    bytes: int
    transferred: int


class InstallReport(_Result):
    """``rag model-install``: the model folder and each of its files."""

    path: str
    files: list[InstalledFile]


class GrantCreated(_Result):
    """``grant create``: ``token`` is shown this once (the daemon keeps only its SHA-256); ``expires`` is a Unix
    time in seconds, or null for ``never``."""

    id: str
    token: str
    vault: str
    client: str
    scope: list[GrantScope]
    expires: float | None


class GrantInfo(msgspec.Struct):
    """One grant of ``grant list``: ``vault`` is the vault's name, times are Unix seconds (``expires`` null:
    never)."""

    id: str
    vault: str
    client: str
    scope: list[GrantScope]
    created: float
    expires: float | None
    state: GrantState


class GrantListing(_Result):
    """``grant list`` and ``grant revoke``."""

    grants: list[GrantInfo]


class ReadPage(_Result):
    """``memory_read``: one page of the body, ``text`` = bytes ``offset`` to ``next_offset`` of its UTF-8 form.

    ``next_offset`` is null on the last page; ``total_bytes`` is the body's size. ``source`` and ``tags`` are the
    record's safe metadata (R-13).
    """

    id: str
    revision: int
    kind: RecordKind
    title: str
    source: str | None
    tags: list[str]
    created: float
    updated: float
    offset: int
    next_offset: int | None
    total_bytes: int
    truncated: bool
    text: str


class ToolSearchReport(_Result):
    """``memory_search``: as :class:`MemorySearchReport`, cut to the result cap; ``omitted`` records left out."""

    results: list[RecordHit]
    truncated: bool
    omitted: int


class ToolRetrieveReport(_Result):
    """``memory_retrieve``: as :class:`SearchReport`, cut to the result cap; ``omitted`` chunks left out;
    ``weak_matches``: none of the results is evidence (:class:`SearchReport`), so none should be cited as an
    answer."""

    mode: SearchMode
    match_mode: MatchMode
    results: list[SearchHit]
    truncated: bool
    omitted: int
    weak_matches: bool = False


class ToolAskReport(_Result):
    """``memory_ask``: as :class:`AskReport`, cut to the result cap; when cut, each citation's ``text`` is a
    shorter snippet (its byte span still names the whole chunk) and ``omitted`` counts the citations shortened.
    ``truncated`` says that anything was cut, the answer (``answer_truncated``) or a citation's text."""

    status: Literal["answered", "insufficient_evidence"]
    answer: str | None
    answer_truncated: bool
    citations: list[Citation]
    mode: SearchMode
    reason: Literal["retrieval", "model"] | None
    truncated: bool
    omitted: int


class ToolStatusReport(_Result):
    """:class:`ToolStatus`: nothing secret and no titles. ``generation``: ``none`` (no ``[rag.generation]``,
    ``memory_ask`` fails), ``device`` (a loopback service) or ``remote`` (its URL leaves the machine). While the
    home is ``locked`` nothing else is known. Else the grant's vault (its name) and ``scope``, the vault's
    retrieval-eligible ``records``, whether an embedding backend is ``model`` available (the local model installed,
    or a remote service), and ``embedded``: the share of the vault's chunks that have a vector (0 to 1) when its
    cache is warm and the vector space is loaded, else null (unknown until a search builds the cache)."""

    locked: bool
    generation: Literal["none", "device", "remote"]
    vault: str | None = None
    scope: list[GrantScope] = []
    records: int | None = None
    model: bool | None = None
    embedded: float | None = None


class SyncBadFile(msgspec.Struct):
    """A payload file a pull could not import: ``reason`` ``truncated``, ``tampered`` (an ``integrity_error``),
    ``other_key``, ``not_a_payload``, ``other_revision`` (named after another revision than it holds) or
    ``invalid`` (authentic, but it breaks a rule of the vault: ids, depth, time, title, metadata or body);
    ``pending`` while it may still be arriving (retried when it changes)."""

    file: str
    reason: str
    pending: bool


class SyncSkipped(msgspec.Struct):
    """A file in the sync folder that is not read, and why."""

    file: str
    why: str


class SyncTimerError(msgspec.Struct):
    """The last failure of the timed sync: a stable code, a message and when (Unix seconds)."""

    code: str
    message: str
    at: float


class SyncReport(_Result):
    """``sync init|push|pull|status``: times are Unix seconds (``None``: never); ``imported``: revisions the last
    pull imported; ``pushed``: payloads the last push wrote (rewritten damaged ones included); ``conflicts``:
    record ids in conflict after the last pull; ``not_local``: revisions another device pushed that have not
    reached the folder here yet; ``waiting``: revisions whose parents have not arrived; ``timer_error``: the last
    failure of the timed sync, until a pull or push succeeds."""

    vault: str
    folder: str
    device: str
    last_push: float | None
    last_pull: float | None
    imported: int
    pushed: int
    conflicts: list[str]
    bad: list[SyncBadFile]
    skipped: list[SyncSkipped]
    not_local: int
    waiting: int
    timer_error: SyncTimerError | None = None


class SyncJoined(_Result):
    """``sync join``: the vault added."""

    id: str
    name: str


Result = (
    Done
    | DaemonStatus
    | VaultInfo
    | VaultDetail
    | VaultDeleted
    | VaultListing
    | RecordRef
    | RecordView
    | RecordListing
    | JobListing
    | JobStarted
    | IngestReport
    | WatchReport
    | WatchListing
    | SearchReport
    | MemorySearchReport
    | RagStatusReport
    | AskReport
    | IndexReport
    | BenchReport
    | ExplainReport
    | InstallReport
    | GrantCreated
    | GrantListing
    | ReadPage
    | ToolSearchReport
    | ToolRetrieveReport
    | ToolAskReport
    | ToolStatusReport
    | SyncReport
    | SyncJoined
)

ToolResult = ToolSearchReport | ReadPage | ToolRetrieveReport | ToolAskReport | ToolStatusReport
"""The result of a :class:`Granted` call: the reply of its ``call`` (:meth:`Granted.reply_type`)."""


class Progress(_Message):
    """A progress event, streamed before the final reply; ``unit`` is ``files``, ``chunks`` or ``bytes``;
    ``note`` says what is happening besides (``"retrying 2/3 after 503, waiting 1 s"``), else null."""

    job_id: int
    done: int
    total: int | None
    unit: str
    note: str | None = None


class Heartbeat(_Message):
    """Sent every :data:`HEARTBEAT_SECONDS` while a request runs: the daemon is alive, the answer is coming."""


class Reply(_Message):
    """The final frame of a request that succeeded: the command's result and any warnings."""

    result: Result
    warnings: list[str] = []


class Failure(_Message):
    """The final frame of a request that failed: a stable ``code`` (:mod:`memories.errors`), a message and
    machine-readable ``details``."""

    code: str
    message: str
    details: dict[str, object] = {}
    warnings: list[str] = []


ServerFrame = Progress | Heartbeat | Reply | Failure


class ClientReply(msgspec.Struct, tag_field=TAG_FIELD, tag="Reply", kw_only=True):
    """A :class:`Reply` as the client reads it: the result stays MessagePack (``msgspec.Raw``) until it is decoded
    into the type its request declares (:meth:`ClientRequest.reply_type`), so a client builds the decoder of that
    one result, not of all of them (which took about 5 ms on each start)."""

    result: msgspec.Raw
    warnings: list[str] = []


ClientFrame = Progress | Heartbeat | ClientReply | Failure
"""What a client decodes: the server's frames with the result left raw."""


def document(result: msgspec.Struct) -> dict[str, Any]:
    """The ``--json`` document of a result struct (and the ``structuredContent`` of an MCP tool's result): its
    fields as JSON-ready data, without the ``$type`` tags.

    >>> document(RecordRef(id="0123456789abcdef", revision=2))
    {'id': '0123456789abcdef', 'revision': 2}
    """
    plain: dict[str, Any] = _untag(msgspec.to_builtins(result))
    return plain


def _untag(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _untag(v) for k, v in value.items() if k != TAG_FIELD}
    if isinstance(value, list):
        return [_untag(v) for v in value]
    return value

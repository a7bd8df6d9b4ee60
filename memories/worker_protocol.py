"""The supervisor's conversation with its worker processes: internal, versioned with the install.

::

    daemon ──WorkerCall(WorkerRequest)──▶ worker
    daemon ◀─WorkerHello, then WorkerProgress* and WorkerResult | WorkerFailure per call── worker

Frames are length-prefixed MessagePack (:mod:`memories.framing`) on two pipes per worker. Unlike the client
protocol (:mod:`memories.protocol`, public and stable), nothing outside one install ever speaks this one: a
worker's first frame, :class:`WorkerHello`, names :data:`WORKER_PROTOCOL_VERSION` and the package version, and the
daemon refuses a worker from another install (after ``pip install --upgrade`` under a running daemon) instead of
misreading its frames.

Every request is a :class:`WorkerRequest` parameterized by its reply type (``IndexQuery`` is a
``WorkerRequest[IndexHits | IndexStale]``); :attr:`WorkerRequest.reply_types` holds the same types at run time, so
the daemon checks every reply against the request that asked for it. Messages carry structs, never JSON or
MessagePack bytes inside MessagePack.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Literal, TypeVar, get_args

import msgspec

from memories import __version__
from memories.config import EmbeddingConfig, GenerationConfig, HttpConfig, RerankConfig
from memories.limits import IndexLimits, VaultFigures
from memories.models.manifest import Manifest
from memories.protocol import (
    TAG_FIELD,
    EmbedFailure,
    ExplainedChunk,
    InstalledFile,
    MatchMode,
    QueryExplanation,
    SearchMode,
)

WORKER_PROTOCOL_VERSION = 10
"""Bumped with every change of a message below. A worker reporting another version (or another package
version, :data:`INSTALL`) is refused."""

INSTALL = __version__
"""The package version the running code comes from."""

R = TypeVar("R", covariant=True)
"""A request's reply type: covariant, since a request only ever produces it (a request that may answer fewer types
fits where more are handled)."""


class _Message(msgspec.Struct, tag_field=TAG_FIELD, kw_only=True, forbid_unknown_fields=True):
    """Base of every tagged message; the class name is the tag."""


# ---------------------------------------------------------------------------------------------------------------
# Data handed to workers


class IndexRecord(msgspec.Struct, frozen=True):
    """One retrieval-eligible record as the supervisor hands it to ``workers.index`` (R-01, R-02).

    Only records of kind ``memory`` or ``card`` with sensitivity ``general`` are ever built into this struct.
    ``source`` is the ingest source path (``None`` for records added by hand); ``tags`` are front-matter tags.
    ``source`` and ``tags`` are the safe metadata indexed with BM25 weight 2 (R-13). ``date`` (Unix seconds: the
    metadata ``date``, else the first revision's time) and ``meta`` (all its metadata) are for search filters only:
    they never become BM25 text and change no ranking (:mod:`memories.rag.filters`).
    """

    id: str
    revision: int
    kind: Literal["memory", "card"]
    title: str
    body: str
    source: str | None = None
    tags: list[str] = []
    date: float | None = None
    meta: dict[str, str] = {}


class InputRecipe(msgspec.Struct, frozen=True):
    """How an embedding backend turns a chunk into its model input (the backend owns it, not the index worker).

    ``prefix`` goes before the chunk text, with ``{title}`` replaced by the record's title (``none`` when empty):
    EmbeddingGemma's ``"title: {title} | text: "``, a compatible model's ``document_prefix``, or nothing.
    ``title_field``: the title travels beside the text instead (Gemini's ``title`` for ``RETRIEVAL_DOCUMENT``).
    """

    prefix: str = ""
    title_field: bool = False


class VectorSpace(msgspec.Struct, frozen=True):
    """A vector space: its key (:func:`memories.models.embedding.vector_space_key`) and its input recipe."""

    key: str
    recipe: InputRecipe


class ModelInput(msgspec.Struct, frozen=True, array_like=True):
    """One exact model input: ``text`` with the recipe's prefix applied; ``title`` only with ``title_field``."""

    text: str
    title: str | None = None


class Evidence(msgspec.Struct, frozen=True):
    """Keep only evidence hits (:func:`memories.rag.answers.is_evidence`); ``min_similarity`` is the backend's
    cosine threshold in vector and hybrid modes (None: lexical coverage only)."""

    min_similarity: float | None = None


class ParsedNote(msgspec.Struct, frozen=True):
    """What a note's text says about itself (:func:`memories.rag.notes.parse_note`).

    Attributes:
        title: the front matter's ``title`` or the first heading, at most 4,096 UTF-8 bytes; ``None`` when the note
            has neither (the ingest job then uses the file name).
        tags: the front matter's ``tags``.
        failure: the exception type when parsing this note failed unexpectedly (the ingest refuses that file).
        date: the front matter's ``date``, else its ``created``, as ISO 8601 (:func:`memories.dates.note_date`);
            ``None`` when it has neither or neither is a date (the ingest then uses the file's modification time).
    """

    title: str | None
    tags: list[str]
    failure: str | None = None
    date: str | None = None


class Explain(msgspec.Struct, frozen=True):
    """Explain the ranking (``rag explain``), and ``chunk`` too when given (as :class:`memories.protocol.RagExplain`
    names it)."""

    chunk: str | None = None


class WorkerHit(msgspec.Struct, omit_defaults=True):
    """One chunk found by the index worker. Offsets are UTF-8 bytes into the record's body, half-open.

    Not yet a citation: the supervisor checks it against the catalog and labels it
    (:class:`memories.protocol.SearchHit`). ``highlights`` are code point spans within ``text`` where query terms
    occur (only when the query asked for them).
    """

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


# ---------------------------------------------------------------------------------------------------------------
# Replies (defined first: each request names its reply types)


class IndexStale(_Message):
    """The cache is not at the requested epoch; ``have`` maps record id to revision, ``None`` when cold."""

    have: dict[str, int] | None


class IndexSynced(_Message):
    """:class:`IndexSync` applied (with ``final``, the cache is at the request's epoch), the cache is at the
    epoch :class:`IndexAtEpoch` asked about, or :class:`IndexDrop` forgot it."""


class QueryChecked(_Message):
    """The query is within the limits; ``terms`` distinct analyzed terms (0: it finds nothing)."""

    terms: int


class Explanation(msgspec.Struct):
    """What :class:`IndexQuery` with ``explain`` adds: the query's analysis, one :class:`ExplainedChunk` per hit (in
    the hits' order), the named chunk, and how many model inputs have no vector in the request's space."""

    query: QueryExplanation
    results: list[ExplainedChunk]
    chunk: ExplainedChunk | None
    missing_vectors: int


class IndexHits(_Message):
    """:class:`IndexQuery` results: at most ``limit`` chunks in rank order, and their :class:`Explanation` when
    the query asked for one. ``weak_matches``: there are hits and none of them is evidence by ``rag ask``'s rule
    (:func:`memories.rag.answers.weak_matches`, at the request's ``min_similarity``): nothing found answers the
    query as far as the index can tell."""

    hits: list[WorkerHit]
    explanation: Explanation | None = None
    weak_matches: bool = False


class NotesParsed(_Message):
    """:class:`ParseNotes` done: one :class:`ParsedNote` per text, in order."""

    notes: list[ParsedNote]


class RecordsNamed(_Message):
    """:class:`IndexResolve` answered: for each name asked, in order, the ids of the cached records it names."""

    records: list[list[str]]


class MissingInputs(_Message):
    """``keys[i]`` is the hash of ``inputs[i]``; ``total_missing`` counts every missing chunk, ``embedded`` those
    with a vector, ``failures`` those the service refused (neither missing nor embedded)."""

    keys: list[str]
    inputs: list[ModelInput]
    total_missing: int
    embedded: int
    failures: list[EmbedFailure] = []


class VectorsStored(_Message):
    """:class:`IndexStoreVectors` done; ``stored`` counts the vectors that were new, ``records`` the cached records
    whose inputs are among the stored (their sets, :class:`RecordVectors`, changed: the supervisor seals them)."""

    stored: int
    records: list[str] = []


class VectorsWanted(_Message):
    """The cache has not been given the vectors kept in the home for ``space_key`` since it was built (after unlock,
    a restart or an eviction): the supervisor sends :class:`IndexLoadVectors`, then asks again."""

    space_key: str


class VectorsLoaded(_Message):
    """:class:`IndexLoadVectors` done: ``loaded`` vectors were new to the cache (those of inputs no chunk uses are
    left out)."""

    loaded: int


class RecordVectorSet(msgspec.Struct, frozen=True):
    """One cached record's vectors in one space, for the supervisor to seal (:mod:`memories.vault.vectors`):
    ``keys`` (input hashes, hex) with float32 ``[len(keys), dimension]`` bytes, ``failed`` the inputs the service
    refused (key -> reason), ``complete`` when every input of the record has one or the other."""

    record_id: str
    revision: int
    keys: list[str]
    vectors: bytes
    failed: dict[str, str] = {}
    complete: bool = False


class RecordVectors(_Message):
    """:class:`IndexRecordVectors` done: the sets of the asked records the cache holds, of width ``dimension``
    (``None``: no vector of the space yet)."""

    dimension: int | None
    records: list[RecordVectorSet]


class IndexState(_Message):
    """:class:`IndexStatus` of one vault's cache (zeros when not ``cached``); ``last_build`` in Unix
    seconds, ``vector_bytes`` held in memory."""

    cached: bool
    records: int
    chunks: int
    text_bytes: int
    last_build: float | None
    embedded: int
    missing: int
    vector_bytes: int
    failed: int = 0
    loaded: bool = True
    """Whether the vectors kept in the home for the asked space were given to this cache (until then ``embedded``
    and ``missing`` count only what it embedded itself)."""


class ModelLoaded(_Message):
    """:class:`EmbedLoad` done: the vector space key, the vector dimension and load warnings."""

    space_key: str
    dimension: int
    warnings: list[str] = []


class Vectors(_Message):
    """float32[n, dimension] as raw little-endian bytes."""

    vectors: bytes
    dimension: int


class TokenCounts(_Message):
    """:class:`EmbedCount` done: how many tokens the graph would be fed for each input, in input order (BOS and EOS
    included, at most ``max_tokens``)."""

    counts: list[int]


class ModelInstalled(_Message):
    """:class:`DownloadModel` done: every model file and what this run transferred."""

    files: list[InstalledFile]


class RemoteVectors(_Message):
    """:class:`RemoteEmbed` done: float32[len(ok), dimension] bytes for the inputs at indexes ``ok``; ``failed``
    maps the index of each input the service refused as too long to its reason."""

    vectors: bytes
    dimension: int
    ok: list[int]
    failed: dict[int, str] = {}


StructuredOutput = Literal["json_schema", "json_object", "none"]
"""How much a generation request asks the server to constrain its reply: the answer schema, any JSON object, or
nothing (the system prompt alone asks for the object); :mod:`memories.providers.gemini` and
:mod:`memories.providers.compatible` say what each sends."""


class GeneratedText(_Message):
    """:class:`Generate` done: the reply text (no thought parts, no reasoning fields) and the structured output the
    request that got it asked for (after any step down)."""

    text: str
    structured_output: StructuredOutput


class RerankOrder(_Message):
    """:class:`Rerank` done: every candidate index once, in the new order, with the service's score (None: the
    service did not rank it)."""

    order: list[tuple[int, float | None]]


class IndexSnapshot(_Message):
    """:class:`IndexTakeSnapshot` done: the cache's lexical state as bytes (plaintext, :mod:`memories.rag.snapshots`:
    the supervisor seals it at once) and the record revisions it holds (``data`` is empty and ``problem`` says why
    when it cannot be carried: over :data:`SNAPSHOT_MAX_BYTES`)."""

    data: bytes
    have: dict[str, int]
    problem: str | None = None


class IndexRestored(_Message):
    """:class:`IndexRestore` done: the restored cache's record revisions (it is at no epoch yet), or ``have`` is
    ``None`` and ``problem`` says in one line why the snapshot cannot be used (another analysis version, it does not
    decode)."""

    have: dict[str, int] | None
    problem: str | None = None


class IndexMeasured(_Message):
    """:class:`IndexMeasure` done: what the records sent add up to (chunks, text bytes)."""

    figures: VaultFigures


WorkerReplyBody = (
    IndexStale
    | IndexMeasured
    | IndexSnapshot
    | IndexRestored
    | IndexSynced
    | QueryChecked
    | IndexHits
    | NotesParsed
    | RecordsNamed
    | MissingInputs
    | VectorsStored
    | VectorsWanted
    | VectorsLoaded
    | RecordVectors
    | IndexState
    | ModelLoaded
    | Vectors
    | TokenCounts
    | ModelInstalled
    | RemoteVectors
    | GeneratedText
    | RerankOrder
)


# ---------------------------------------------------------------------------------------------------------------
# Requests


class WorkerRequest(_Message, Generic[R]):
    """A request whose reply is an ``R``; :attr:`reply_types` is ``R`` as a tuple of classes, for the check at run
    time."""

    reply_types: ClassVar[tuple[type, ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for base in getattr(cls, "__orig_bases__", ()):
            if getattr(base, "__origin__", None) is WorkerRequest:
                (reply,) = get_args(base)
                cls.reply_types = get_args(reply) or (reply,)


class IndexSync(WorkerRequest[IndexSynced | IndexStale]):
    """Apply a delta to one vault's cache; ``epoch`` is stamped on the cache with the ``final`` batch.

    ``fresh`` (first batch of a full sync) starts an empty cache; any other batch applies to the cache the delta
    was computed from, and if that cache was evicted meanwhile the worker answers :class:`IndexStale` instead.
    """

    vault: str
    epoch: int
    upserts: list[IndexRecord]
    deletes: list[str]
    final: bool
    fresh: bool = False
    expected: dict[str, int] = {}
    """With ``final``: every eligible record id -> revision. The worker drops any other record, and answers
    :class:`IndexStale` instead of stamping the epoch if the cache does not hold exactly these revisions."""
    limits: IndexLimits = msgspec.field(default_factory=IndexLimits)
    """The per-vault limits (``[rag] max_chunks`` …) a ``fresh`` cache is made with; a batch that would take the
    cache over them fails with ``vault_too_large`` (``details``: ``limit``, ``max``, ``value``, ``chunks``,
    ``text_bytes``: the figures with that batch) and the cache is dropped."""


class IndexMeasure(WorkerRequest[IndexMeasured]):
    """Count the chunks and text bytes of records without analysing or caching anything: the rest of a vault over
    its limits, so that its refusal gives the figures the vault has (:mod:`memories.daemon.index.over_limit`)."""

    vault: str
    upserts: list[IndexRecord]


class SearchFilter(msgspec.Struct, frozen=True, kw_only=True):
    """What records a search may use, applied in both arms before any ranking (:mod:`memories.rag.filters`): a date
    within ``since``/``until`` (Unix seconds, inclusive), every tag of ``tags``, the ``kind``, a ``source`` matching
    the glob ``source``, and every metadata pair of ``meta``. Checked by the supervisor before it is sent."""

    since: float | None = None
    until: float | None = None
    tags: list[str] = []
    kind: Literal["memory", "card"] | None = None
    source: str | None = None
    meta: dict[str, str] = {}


class IndexQuery(WorkerRequest[IndexHits | IndexStale | VectorsWanted]):
    """Search one vault's cache if it is at ``epoch``; otherwise the worker answers :class:`IndexStale` (and, in
    vector and hybrid modes, :class:`VectorsWanted` until the space's kept vectors are loaded).

    ``space`` and ``query_vector`` (float32[dimension] bytes) are given for vector and hybrid modes; with
    ``evidence`` only the hits that are evidence for ``rag ask`` come back; with ``explain`` the reply carries an
    :class:`Explanation` of the hits (``rag explain``); ``filter`` keeps every chunk of the records it does not admit
    out of both rankings (the limit then counts chunks it admits). ``min_similarity`` is the backend's evidence
    cosine (vector and hybrid modes; ``None``: lexical evidence only), by which the reply's ``weak_matches`` is
    judged.
    """

    vault: str
    epoch: int
    query: str
    mode: SearchMode
    match_mode: MatchMode
    limit: int
    cards_only: bool
    no_rerank: bool
    highlight: bool = False
    space: VectorSpace | None = None
    query_vector: bytes | None = None
    evidence: Evidence | None = None
    explain: Explain | None = None
    filter: SearchFilter | None = None
    min_similarity: float | None = None


class ParseNotes(WorkerRequest[NotesParsed]):
    """Titles and tags of notes' texts (``workers.index``): the ingest job's parse, off the supervisor, whose event
    loop must never wait for a pattern run on a hostile note."""

    texts: list[str]


class IndexMissing(WorkerRequest[MissingInputs | IndexStale | VectorsWanted]):
    """Model inputs of up to ``limit`` chunks of the vault that have no vector in ``space`` yet (and were not
    refused by the service); :class:`VectorsWanted` until the space's kept vectors are loaded."""

    vault: str
    epoch: int
    space: VectorSpace
    limit: int


class IndexStoreVectors(WorkerRequest[VectorsStored | IndexStale]):
    """Store finished vectors (float32[n, dim] bytes, rows in ``keys`` order). Content-addressed, so no epoch;
    :class:`IndexStale` when the vault left the cache meanwhile."""

    vault: str
    space_key: str
    keys: list[str]
    vectors: bytes
    dimension: int
    failed: dict[str, str] = {}
    """Inputs the service refused for good: key → the server's reason (never offered again in this space)."""


class IndexLoadVectors(WorkerRequest[VectorsLoaded | IndexStale]):
    """The vectors kept in the home for one space, unsealed by the supervisor: ``keys`` (input hashes, hex) with
    float32 ``[len(keys), dimension]`` bytes and the refused inputs (key -> reason). The cache keeps those its chunks
    use and counts the space as loaded (also when there are none); :class:`IndexStale` when the vault left the
    cache."""

    vault: str
    space: VectorSpace
    dimension: int
    """The vectors' width (0 when there are none)."""
    keys: list[str]
    vectors: bytes
    failed: dict[str, str] = {}


class IndexRecordVectors(WorkerRequest[RecordVectors | IndexStale | VectorsWanted]):
    """The current vector sets of ``records`` in ``space`` (records the cache does not hold are left out), for the
    supervisor to seal; no epoch: each set names the revision it is for."""

    vault: str
    space: VectorSpace
    records: list[str]


class IndexStatus(WorkerRequest[IndexState]):
    """What one vault's cache holds, whatever its epoch (``rag status``)."""

    vault: str
    space: VectorSpace | None = None


class IndexAtEpoch(WorkerRequest[IndexSynced | IndexStale]):
    """Is the vault's cache at ``epoch``? :class:`IndexStale` when not, so the supervisor can bring it up to date
    without searching (after an ingest)."""

    vault: str
    epoch: int


class IndexResolve(WorkerRequest[RecordsNamed | IndexStale]):
    """Which cached records each of ``names`` names (``rag bench``'s relevant entries), if the cache is at
    ``epoch``: see :meth:`memories.rag.vault_index.VaultIndex.named`."""

    vault: str
    epoch: int
    names: list[str]


SNAPSHOT_MAX_BYTES = 896 * 2**20
"""Largest index snapshot kept (896 MiB): below the 1 GiB worker frame limit of
:data:`memories.framing.MAX_WORKER_FRAME` with room for the envelope, and its sealed row below SQLite's default
``SQLITE_MAX_LENGTH`` of 1,000,000,000 bytes. The sample corpus gives about 4 KB of snapshot per chunk (5.3 times the
text): some 400 MiB at 100,000 chunks."""


class IndexTakeSnapshot(WorkerRequest[IndexSnapshot | IndexStale]):
    """The vault's cache as bytes, if it is at ``epoch`` (:class:`IndexStale` otherwise), for a sealed snapshot."""

    vault: str
    epoch: int


class IndexRestore(WorkerRequest[IndexRestored | IndexStale]):
    """Start the vault's cache from a snapshot the supervisor unsealed (no epoch until the final
    :class:`IndexSync`); :class:`IndexStale` when the vault already has a cache (another job built it)."""

    vault: str
    data: bytes
    limits: IndexLimits = msgspec.field(default_factory=IndexLimits)
    """As :attr:`IndexSync.limits`: a snapshot over them fails with ``vault_too_large`` (its figures in the
    details), as a build does."""


class IndexDrop(WorkerRequest[IndexSynced]):
    """Forget one vault's cache and the plaintext in it (the vault was deleted)."""

    vault: str


class IndexCheckQuery(WorkerRequest[QueryChecked]):
    """Analyze a query without searching (limits, term count), before any costly step of a search."""

    query: str


class EmbedLoad(WorkerRequest[ModelLoaded]):
    """Load (once per worker process) the local model from ``model_dir``; the reply gives its vector space key.

    ``manifest`` is given when the folder was installed and verified from it, so its pinned hashes name the files
    instead of hashing them again.
    """

    model_dir: str
    threads: int | None
    """``[rag] local_threads``, ``None`` when not set (the worker then uses the default, within its cores)."""
    max_tokens: int
    batch_size: int
    manifest: Manifest | None = None


class EmbedBatch(WorkerRequest[Vectors]):
    """Embed exact model inputs (prefixes already applied): float32[n, dim] comes back. ``model`` names the model
    so a worker restarted since the last load loads it again by itself."""

    inputs: list[str]
    model: EmbedLoad


class EmbedCount(WorkerRequest[TokenCounts]):
    """Count the tokens of exact model inputs without running the graph, so the daemon can put inputs of equal
    token length in one batch (:meth:`memories.daemon.index.backends.LocalBackend.order`)."""

    inputs: list[str]
    model: EmbedLoad


class EmbedQuery(WorkerRequest[Vectors]):
    """Embed one search query (the worker applies the query prefix): float32[1, dim] comes back."""

    query: str
    model: EmbedLoad


class DownloadModel(WorkerRequest[ModelInstalled]):
    """Install the model files of ``manifest`` into ``dest_dir`` (``workers.remote``) under the ``http`` policy."""

    manifest: Manifest
    dest_dir: str
    base_url: str | None
    from_dir: str | None
    http: HttpConfig


class RemoteEmbed(WorkerRequest[RemoteVectors]):
    """Embed ``inputs`` with the ``[rag.embedding]`` service (``workers.remote``); ``dimension`` is the width
    already fixed (None: the configured one, else the first reply's); ``budget_seconds`` bounds every attempt and
    wait."""

    service: EmbeddingConfig
    http: HttpConfig
    inputs: list[ModelInput]
    task: Literal["query", "document"]
    dimension: int | None
    budget_seconds: float


class Generate(WorkerRequest[GeneratedText]):
    """One ``rag ask`` call of the ``[rag.generation]`` service with the prepared user message and the labels of
    its sources, asking first for ``structured_output``; ``probing``: the service has not answered this daemon yet
    (:class:`memories.providers.generation.StructuredOutputLadder`).

    A failure after a step down carries the level reached in ``details["structured_output"]``."""

    service: GenerationConfig
    http: HttpConfig
    user: str
    labels: list[str]
    budget_seconds: float
    structured_output: StructuredOutput = "json_schema"
    probing: bool = True


class Rerank(WorkerRequest[RerankOrder]):
    """One call of the learned reranker ``[rag.rerank]`` over ``documents`` (the candidates' texts, fused order)."""

    service: RerankConfig
    http: HttpConfig
    query: str
    documents: list[str]
    top_n: int
    budget_seconds: float


WorkerRequestBody = (
    IndexSync
    | IndexCheckQuery
    | IndexQuery
    | ParseNotes
    | IndexMissing
    | IndexStoreVectors
    | IndexLoadVectors
    | IndexRecordVectors
    | IndexStatus
    | IndexAtEpoch
    | IndexResolve
    | IndexDrop
    | IndexTakeSnapshot
    | IndexRestore
    | IndexMeasure
    | EmbedLoad
    | EmbedBatch
    | EmbedCount
    | EmbedQuery
    | DownloadModel
    | RemoteEmbed
    | Generate
    | Rerank
)


# ---------------------------------------------------------------------------------------------------------------
# Envelopes


class WorkerCall(_Message):
    """One request to a worker; ``id`` (unique per worker process) ties its progress, reply and
    :class:`WorkerCancel` to it."""

    id: int
    body: WorkerRequestBody


class WorkerCancel(_Message):
    """Ask the worker to stop request ``id`` at its next cancellation check."""

    id: int


WorkerInbound = WorkerCall | WorkerCancel


class WorkerHello(_Message):
    """First frame of a worker: it is up and reading, and speaks ``protocol`` of the package version
    ``install``. The daemon reads this frame leniently (any later field may change), so the refusal of another
    install is a clear log line, not a decode error."""

    name: str
    protocol: int
    install: str
    dumpable: bool | None = None
    """Whether the worker may dump core (``prctl(PR_GET_DUMPABLE)`` after :mod:`memories.hardening`; ``None``:
    cannot be told); ``daemon status`` shows it."""


class WorkerProgress(_Message):
    """Progress of request ``id``: ``done`` of ``total`` (``None``: unknown) ``unit``, and a ``note`` on what is
    happening besides (``"retrying 2/3 after 503, waiting 1 s"``), relayed to the client as
    :class:`~memories.protocol.Progress`."""

    id: int
    done: int
    total: int | None
    unit: str
    note: str | None = None


class WorkerResult(_Message):
    """The reply to request ``id``."""

    id: int
    body: WorkerReplyBody


class WorkerFailure(_Message):
    """Request ``id`` failed: a stable error code, a message and details, as in :class:`~memories.protocol.Failure`."""

    id: int
    code: str
    message: str
    details: dict[str, object] = {}


WorkerOutbound = WorkerProgress | WorkerResult | WorkerFailure
"""What a worker sends after its :class:`WorkerHello`."""

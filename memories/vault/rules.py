"""The rules every stored value keeps: vault names, titles, metadata, bodies, ids, and the place of a revision in
its record's graph (record and parent ids, depth, time).

One set of rules for what this device writes and for what a sync brings: a revision from the sync folder was
sealed by someone who knows the sync passphrase, not necessarily by Memories, so the exchange applies the same
checks to it before it is stored (:meth:`memories.vault.exchange.Exchange.merge`). Each check returns the value to
store or raises ``MemoriesError`` with a stable code and a one-line message that names the rule, never the value.
"""

from __future__ import annotations

import math
import re
import secrets
import unicodedata
from collections.abc import Collection

from memories import crypto
from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES, MAX_META_ENTRIES, MAX_META_VALUE_BYTES, MAX_TITLE_BYTES, body_too_large
from memories.vault.sealing import Origin, RecordHeader

_META_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")
RECORD_ID = re.compile(r"[0-9a-f]{16}")
"""A record id: :func:`new_id`'s 16 lowercase hex digits."""
REVISION_ID = re.compile(r"[0-9a-f]{64}")
"""A revision id: SHA-256 in 64 lowercase hex digits (:func:`memories.crypto.revision_id`)."""

MAX_DEPTH = 2**31
"""The deepest revision: a record edited every second for 68 years. The chosen head of a record in conflict is the
deepest, so a depth beyond any real one (a peer's 2**62) would win every conflict."""

LATEST_TIME = 253_402_214_400.0
"""The latest ``created`` time (Unix seconds): 9999-12-31T00:00:00Z, a day before the end of what
:meth:`datetime.datetime.fromtimestamp` shows in any time zone. The earliest is 0 (1970)."""

MAX_PATH_BYTES = 4096
"""The longest origin path of an ingested card, in UTF-8 bytes (Linux's ``PATH_MAX``)."""


def new_id() -> str:
    """A random 64-bit id as 16 lowercase hex digits."""
    return secrets.token_hex(8)


def decode_body(body: bytes) -> str:
    """Check size and UTF-8; returns the text.

    Raises:
        MemoriesError: ``body_too_large`` over :data:`~memories.limits.MAX_BODY_BYTES`; ``invalid_utf8``.
    """
    if len(body) > MAX_BODY_BYTES:
        raise body_too_large("the body", len(body))
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MemoriesError("invalid_utf8", f"the body is not valid UTF-8 (byte {exc.start})") from None


def new_body(body: bytes) -> str:
    """:func:`decode_body` for a body written now (``memory add`` and ``update``), which must also be text: no NUL
    byte, as ``rag ingest`` refuses a file holding one. A revision from a sync folder is checked with
    :func:`decode_body` alone: a body an earlier release accepted stays readable.

    Raises:
        MemoriesError: what :func:`decode_body` raises; ``invalid_argument`` for a NUL byte.
    """
    text = decode_body(body)
    if "\x00" in text:
        raise MemoriesError(
            "invalid_argument",
            f"the body holds a NUL byte (byte {body.index(0)}): text never does (nothing was stored)",
        )
    return text


def check_name(name: str) -> str:
    """A vault name in NFC; raises ``invalid_vault_name``."""
    name = unicodedata.normalize("NFC", name)
    if not name or len(name) > 64 or name != name.strip() or any(unicodedata.category(c)[0] == "C" for c in name):
        raise MemoriesError("invalid_vault_name", f"{name!r} is not a usable vault name")
    return name


def check_title(title: str) -> str:
    """A record title: not blank, at most :data:`~memories.limits.MAX_TITLE_BYTES` UTF-8 bytes; raises
    ``invalid_argument``."""
    if not title.strip():
        raise MemoriesError("invalid_argument", "the title is empty")
    if len(title.encode("utf-8")) > MAX_TITLE_BYTES:
        raise MemoriesError("invalid_argument", f"the title is longer than {MAX_TITLE_BYTES} bytes")
    return title


def check_meta(meta: dict[str, str]) -> dict[str, str]:
    """Metadata: at most :data:`~memories.limits.MAX_META_ENTRIES` entries, keys ``[A-Za-z0-9_.-]{1,64}``, values
    of at most :data:`~memories.limits.MAX_META_VALUE_BYTES` UTF-8 bytes; returns a copy. Raises
    ``invalid_argument``."""
    if len(meta) > MAX_META_ENTRIES:
        raise MemoriesError("invalid_argument", f"more than {MAX_META_ENTRIES} metadata entries")
    for key, value in meta.items():
        if not _META_KEY.fullmatch(key):
            raise MemoriesError("invalid_argument", f"metadata key {key!r} must be 1-64 of [A-Za-z0-9_.-]")
        if len(value.encode("utf-8")) > MAX_META_VALUE_BYTES:
            raise MemoriesError("invalid_argument", f"metadata value of {key!r} exceeds {MAX_META_VALUE_BYTES} bytes")
    return dict(meta)


def check_header(header: RecordHeader) -> RecordHeader:
    """A record's header: its title (:func:`check_title`), metadata (:func:`check_meta`) and origin
    (:func:`check_origin`). Raises ``invalid_argument``."""
    check_title(header.title)
    check_meta(header.meta)
    if header.origin is not None:
        check_origin(header.origin)
    return header


def check_origin(origin: Origin) -> Origin:
    """An ingested card's origin: an absolute path of at most :data:`MAX_PATH_BYTES` without NUL, and a SHA-256 in
    64 lowercase hex digits. Raises ``invalid_argument``."""
    path = origin.path
    if not path.startswith("/") or "\0" in path or len(path.encode("utf-8", "surrogatepass")) > MAX_PATH_BYTES:
        raise MemoriesError("invalid_argument", "the origin of the card is not an absolute path")
    if not REVISION_ID.fullmatch(origin.sha256):
        raise MemoriesError("invalid_argument", "the origin of the card has no SHA-256 of 64 hex digits")
    return origin


def check_erased(erased: list[str]) -> list[str]:
    """A deletion's list of the revision ids it erased (each 64 lowercase hex digits). Raises
    ``invalid_argument``."""
    if not all(REVISION_ID.fullmatch(revision_id) for revision_id in erased):
        raise MemoriesError("invalid_argument", "a deletion lists an erased revision id that is not 64 hex digits")
    return erased


def check_place(place: crypto.RevisionPlace) -> crypto.RevisionPlace:
    """The clear place of a revision: a record id of :data:`RECORD_ID`'s form; parents of :data:`REVISION_ID`'s
    form, sorted, each once, none for depth 1 and at least one above it; a depth from 1 to :data:`MAX_DEPTH`; a
    ``created`` time that is finite and from 0 to :data:`LATEST_TIME` (NaN would break the store's ``NOT NULL``
    and infinity every display of it). Raises ``invalid_argument``."""
    if not RECORD_ID.fullmatch(place.record_id):
        raise MemoriesError("invalid_argument", "the record id is not 16 hex digits")
    parents = place.parents
    if not all(REVISION_ID.fullmatch(parent) for parent in parents) or list(parents) != sorted(set(parents)):
        raise MemoriesError("invalid_argument", "the parents are not distinct revision ids of 64 hex digits, sorted")
    if not 1 <= place.revision <= MAX_DEPTH:
        raise MemoriesError("invalid_argument", f"the depth is not from 1 to {MAX_DEPTH}")
    if (place.revision == 1) != (not parents):
        raise MemoriesError("invalid_argument", "a revision has parents exactly when its depth is above 1")
    if not (math.isfinite(place.created) and 0 <= place.created <= LATEST_TIME):
        raise MemoriesError("invalid_argument", "the time of the revision is not a time from 1970 to 9999")
    return place


def check_depth(depth: int, parent_depths: Collection[int], *, every_parent: bool = True) -> int:
    """A revision's depth against its parents' depths: 1 + the deepest when ``parent_depths`` has every parent's,
    and deeper than each when it has only some (a parent a deletion erased is not there to ask). Raises
    ``invalid_argument``."""
    deepest = max(parent_depths, default=0)
    if (depth != deepest + 1) if every_parent else (depth <= deepest):
        raise MemoriesError("invalid_argument", "the depth is not 1 + the deepest parent's")
    return depth

"""The rules every stored value keeps: vault names, titles, metadata, bodies and ids.

Each check returns the value to store or raises ``MemoriesError`` with a stable code and a one-line message.
"""

from __future__ import annotations

import re
import secrets
import unicodedata

from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES, MAX_META_ENTRIES, MAX_META_VALUE_BYTES, MAX_TITLE_BYTES, body_too_large

_META_KEY = re.compile(r"[A-Za-z0-9_.-]{1,64}")


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

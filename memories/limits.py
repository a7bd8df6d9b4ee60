"""Size limits shared by the CLI (to fail early, before sending) and the daemon (which enforces them).

The body limit keeps a record far below the per-vault index budget (R-21: 16 MiB of text; ``[rag] max_text_bytes``)
while allowing the largest notes people keep as text (the biggest note of the sample corpus is 118 KB).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from memories.errors import MemoriesError

MAX_BODY_BYTES = 2 * 1024 * 1024
"""Largest record body in UTF-8 bytes (2 MiB). An empty body is allowed (the record is found by its title)."""

MAX_TITLE_BYTES = 4096
"""Largest title in UTF-8 bytes."""

MAX_META_ENTRIES = 64
"""Most metadata entries per record; keys are 1-64 characters of ``[A-Za-z0-9_.-]``, values <= 4096 bytes."""

MAX_META_VALUE_BYTES = 4096

MAX_QUERY_BYTES = 1024
"""R-17: longest query in UTF-8 bytes as received."""

MAX_RESULTS = 100
"""R-17: most results one search may request."""

MAX_PASSPHRASE_BYTES = 1024

MIN_PASSPHRASE_CHARS = 8
"""Shortest passphrase ``init`` accepts, in code points, unless ``--allow-short-passphrase`` is given: everything
else rests on it (Argon2id slows guessing; it cannot make a short passphrase strong)."""

MAX_CACHED_VAULTS = 2
"""R-21: vaults whose index the index worker keeps at once (least recently used evicted)."""

R21_MAX_CHUNKS = 10_000
"""R-21 as written: most chunks in one cached vault (``[rag] max_chunks = 10000`` restores it exactly)."""

R21_MAX_TEXT_BYTES = 16 * 1024 * 1024
"""R-21 as written: most UTF-8 bytes of body, title and metadata (source path, tags) in one cached vault."""

R21_MAX_VECTOR_BYTES = 32 * 1024 * 1024
"""R-21 as written: most bytes of vectors (float32) in one cached vault."""

DEFAULT_MAX_CHUNKS = 100_000
"""``[rag] max_chunks`` when it is not set (issue 28: a deliberate departure from R-21's 10,000)."""

MIN_MAX_CHUNKS = 1_000
"""The smallest ``[rag] max_chunks`` accepted."""

MAX_MAX_CHUNKS = 10_000_000
"""The largest ``[rag] max_chunks`` accepted (exact vector search and a whole-vault cache stop making sense well
before: docs/guide/large-vaults.md)."""


def text_bytes_for(max_chunks: int) -> int:
    """The ``[rag] max_text_bytes`` that goes with ``max_chunks`` when it is not set: R-21's ratio, 16 MiB per
    10,000 chunks (1,677.7 bytes a chunk; 160 MiB at the default 100,000)."""
    return R21_MAX_TEXT_BYTES * max_chunks // R21_MAX_CHUNKS


def vector_bytes_for(max_chunks: int) -> int:
    """The ``[rag] max_vector_bytes`` that goes with ``max_chunks`` when it is not set: R-21's ratio, 32 MiB per
    10,000 chunks (3,355 bytes a chunk: one 768-dimension float32 vector and some room; 320 MiB at 100,000)."""
    return R21_MAX_VECTOR_BYTES * max_chunks // R21_MAX_CHUNKS


LimitName = Literal["chunks", "text_bytes", "vector_bytes"]

SETTINGS: dict[str, str] = {
    "chunks": "rag.max_chunks",
    "text_bytes": "rag.max_text_bytes",
    "vector_bytes": "rag.max_vector_bytes",
}
"""The ``config.toml`` key that raises each per-vault limit."""


class IndexLimits(msgspec.Struct, frozen=True, kw_only=True):
    """The per-vault limits of a cached vault, from ``[rag]`` (:meth:`memories.config.RagConfig.index_limits`):
    ``chunks``, ``text_bytes`` (UTF-8 bytes of body, title, source path and tags) and ``vector_bytes`` (float32
    vectors over every vector space). The defaults are ``[rag]``'s; ``IndexLimits.r21()`` is R-21 as written."""

    chunks: int = DEFAULT_MAX_CHUNKS
    text_bytes: int = text_bytes_for(DEFAULT_MAX_CHUNKS)
    vector_bytes: int = vector_bytes_for(DEFAULT_MAX_CHUNKS)

    @classmethod
    def r21(cls) -> IndexLimits:
        """R-21's limits: 10,000 chunks, 16 MiB of text, 32 MiB of vectors."""
        return cls(chunks=R21_MAX_CHUNKS, text_bytes=R21_MAX_TEXT_BYTES, vector_bytes=R21_MAX_VECTOR_BYTES)

    def over(self, figures: VaultFigures) -> Literal["chunks", "text_bytes"] | None:
        """The limit ``figures`` are over (chunks first), or ``None`` when they are within both."""
        if figures.chunks > self.chunks:
            return "chunks"
        if figures.text_bytes > self.text_bytes:
            return "text_bytes"
        return None


class VaultFigures(msgspec.Struct, frozen=True, array_like=True):
    """What a vault's records add up to for the index: ``chunks`` and ``text_bytes`` (as :class:`IndexLimits`
    counts them)."""

    chunks: int
    text_bytes: int


def body_too_large(what: str, size: int | None = None) -> MemoriesError:
    """The one ``body_too_large`` error: ``what`` (a file name, "the body") is over :data:`MAX_BODY_BYTES`; ``size``
    in bytes when it is known (a file is read only up to the limit)."""
    details = {"max": MAX_BODY_BYTES}
    has = ""
    if size is not None:
        details["bytes"] = size
        has = f" ({size:,} bytes)"
    return MemoriesError(
        "body_too_large",
        f"{what}{has} is larger than {MAX_BODY_BYTES:,} bytes (2 MiB), the largest body accepted",
        details,
    )


def check_result_limit(limit: int) -> None:
    """R-17: a search asks for 1 to :data:`MAX_RESULTS` results.

    Raises:
        MemoriesError: ``limit_too_large`` above the maximum, ``invalid_argument`` below 1.
    """
    if limit > MAX_RESULTS:
        shown = f"{limit:,}" if limit < 10**12 else "that many"
        raise MemoriesError(
            "limit_too_large",
            f"at most {MAX_RESULTS} results can be requested, not {shown}",
            {"max": MAX_RESULTS, "value": min(limit, 2**62)},
        )
    if limit < 1:
        raise MemoriesError("invalid_argument", "--limit must be at least 1")


def check_passphrase_length(passphrase: str, override: str | None = None) -> None:
    """A new passphrase has at least :data:`MIN_PASSPHRASE_CHARS` code points; ``override`` is the option of the
    command at hand that accepts a shorter one, named in the message (``init`` has one, a sync passphrase none).

    Raises:
        MemoriesError: ``invalid_passphrase``, with ``details`` ``{"min_chars"}``.
    """
    if len(passphrase) < MIN_PASSPHRASE_CHARS:
        escape = f" (or {override}, if you must)" if override else ""
        raise MemoriesError(
            "invalid_passphrase",
            f"the passphrase has {len(passphrase)} characters; use at least {MIN_PASSPHRASE_CHARS}{escape}",
            {"min_chars": MIN_PASSPHRASE_CHARS},
        )

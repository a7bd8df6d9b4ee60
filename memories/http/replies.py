"""A model API's reply body, read within bounds: raw size, decompressed size and JSON nesting depth (issue 29,
item 13).

::

    read_body(response, what, limit)   -> the decoded body (bytes), at most ``limit`` bytes before and after
                                          each Content-Encoding is undone
    depth_exceeds(raw, limit)          -> True when the JSON text nests arrays/objects deeper than ``limit``

httpx undoes ``Content-Encoding`` one network read at a time without an output bound: a 64 KB read of a gzip
body can inflate to 64 MB at once, and ``gzip, gzip`` multiplies that again (a 65 KB reply took the remote worker
to 1.84 GB). So the body is read raw (:meth:`httpx.Response.iter_raw`, bounded as before) and each encoding is
undone here with :mod:`zlib`'s ``max_length``: no step ever holds more than ``limit + 1`` decoded bytes.

Only ``gzip`` (``x-gzip``), ``deflate`` and ``identity`` are read, which is what :data:`ACCEPT_ENCODING` asks for;
a reply in another encoding (``br``, ``zstd``, ``compress``) is ``upstream_error``.
"""

from __future__ import annotations

import re
import zlib

import httpx

from memories.errors import MemoriesError
from memories.http.retry import TransientFailure

ACCEPT_ENCODING = "gzip, deflate"
"""The ``Accept-Encoding`` of every model API request: the encodings :func:`read_body` undoes."""

MAX_ENCODINGS = 2
"""Most ``Content-Encoding`` layers undone (``gzip, gzip`` is legal HTTP and no real service sends more)."""

_GZIP = zlib.MAX_WBITS | 16
_ZLIB = zlib.MAX_WBITS
_RAW_DEFLATE = -zlib.MAX_WBITS


def read_body(response: httpx.Response, what: str, limit: int) -> bytes:
    """The body of the open streamed ``response``, every ``Content-Encoding`` undone, each stage at most ``limit``
    bytes.

    Args:
        what: the endpoint, for messages (``rag.embedding``).
        limit: the most bytes kept, raw and after each decoding step.

    Raises:
        MemoriesError: ``upstream_error`` for a body over ``limit`` bytes (raw or decoded), an encoding that is not
            gzip/deflate/identity, more than :data:`MAX_ENCODINGS` layers, or compressed data that does not inflate.
        TransientFailure: the connection closed before the body ended.
    """
    encodings = [
        token.strip().lower() for token in response.headers.get("content-encoding", "").split(",") if token.strip()
    ]
    encodings = [token for token in encodings if token != "identity"]
    unknown = sorted({token for token in encodings if token not in ("gzip", "x-gzip", "deflate")})
    if unknown:
        raise MemoriesError(
            "upstream_error", f"{what} answered in Content-Encoding {', '.join(unknown)}, which is not read"
        )
    if len(encodings) > MAX_ENCODINGS:
        raise MemoriesError(
            "upstream_error", f"{what} answered with {len(encodings)} layers of Content-Encoding; nothing was kept"
        )
    body = _read_raw(response, what, limit)
    for token in reversed(encodings):
        body = _inflate(body, token, what, limit)
    return body


def _read_raw(response: httpx.Response, what: str, limit: int) -> bytes:
    parts: list[bytes] = []
    size = 0
    try:
        for part in response.iter_raw():
            size += len(part)
            if size > limit:
                raise MemoriesError("upstream_error", f"{what} answered more than {limit:,} bytes; nothing was kept")
            parts.append(part)
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise TransientFailure(f"the reply was cut short ({type(exc).__name__})") from None
    return b"".join(parts)


def _inflate(data: bytes, token: str, what: str, limit: int) -> bytes:
    """``data`` inflated by one encoding, never more than ``limit + 1`` bytes held; gzip may have several members
    (RFC 1952 section 2.2), deflate may come zlib-wrapped (RFC 9110) or raw, as servers send both."""
    too_large = MemoriesError(
        "upstream_error", f"{what} answered more than {limit:,} bytes once decompressed ({token}); nothing was kept"
    )
    try:
        if token == "deflate":
            try:
                return _inflate_members(data, _ZLIB, limit, too_large)
            except zlib.error:
                return _inflate_members(data, _RAW_DEFLATE, limit, too_large)
        return _inflate_members(data, _GZIP, limit, too_large)
    except zlib.error as exc:
        raise MemoriesError("upstream_error", f"{what} answered {token} data that does not inflate ({exc})") from None


def _inflate_members(data: bytes, wbits: int, limit: int, too_large: MemoriesError) -> bytes:
    out: list[bytes] = []
    size = 0
    rest = data
    while rest:
        inflater = zlib.decompressobj(wbits)
        part = inflater.decompress(rest, limit - size + 1)
        size += len(part)
        if size > limit:
            raise too_large
        out.append(part)
        if not inflater.eof:
            break  # a stream cut short: what came is kept, and the JSON decoder says whether it is whole
        rest = inflater.unused_data if wbits == _GZIP else b""
    return b"".join(out)


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKET = bytes(byte for byte in range(256) if byte not in b"[]{}")


def depth_exceeds(raw: bytes, limit: int) -> bool:
    """Whether the JSON text ``raw`` nests arrays and objects more than ``limit`` deep, found without a parser (the
    standard decoder recurses once per level and ends in ``RecursionError`` near 1,000).

    Strings are cut out, every byte but ``[]{}`` dropped, then innermost pairs removed ``limit`` times over: what
    still shrinks after that was nested deeper. Brackets that never pair (text that is not JSON) say False; the
    decoder refuses that text itself. Each round is one pass in C over what is left, so a reply of only brackets
    costs ``limit`` passes at most.

    >>> depth_exceeds(b'{"a": [[1], "]]]"]}', 3), depth_exceeds(b"[[[[]]]]", 3)
    (False, True)
    """
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKET)
    for _ in range(limit):
        if not brackets:
            return False
        shorter = brackets.replace(b"[]", b"").replace(b"{}", b"")
        if len(shorter) == len(brackets):
            return False
        brackets = shorter
    return bool(brackets) and len(brackets.replace(b"[]", b"").replace(b"{}", b"")) < len(brackets)

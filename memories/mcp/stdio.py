"""Every line on stdin gets its answer: the messages the SDK's stdio transport could not read, answered here.

The SDK's stdio reader validates each line with a strict JSON parser and, when that fails, passes the exception on
its read stream, where the server drops it without a reply. A JSON string holding a lone surrogate escape
(``"\\ud800"``) is such a line: Python's own ``json`` reads it, the strict parser refuses it as text that is not
valid Unicode. A client that sent a request that way waited for an answer that never came. :class:`AnsweringReader`
sits between the transport and the server: it passes every message on and answers every exception with a JSON-RPC
error, as JSON-RPC 2.0 (section 5.1) asks:

- a request whose id can still be read (the line is JSON but for a lone surrogate): ``-32600`` (invalid request)
  to that id, ``invalid_argument: the request is not valid JSON text: ...`` with the parser's reason and position;
- a line that is not JSON at all: ``-32700`` (parse error); JSON that is not a JSON-RPC message, or whose id cannot
  be read: ``-32600``; both with the id ``null`` and ``protocol_error: ...``;
- a notification (a method and no id) and a response (an id and no method) are never answered, as JSON-RPC says
  for notifications: an error naming a response's id would be taken for the answer to the client's own request
  of that id.

The server goes on with the next line in every case.
"""

from __future__ import annotations

import contextvars
import json
import logging
from types import TracebackType
from typing import Protocol

import anyio
import mcp.types as types
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from memories.errors import MemoriesError

log = logging.getLogger("memories.mcp")

Item = SessionMessage | Exception


class _Receiving(Protocol):
    async def receive(self) -> Item: ...
    async def aclose(self) -> None: ...


class _Sending(Protocol):
    async def send(self, item: SessionMessage, /) -> None: ...


def error_line(exc: MemoriesError) -> str:
    """``exc`` as the one line a client shows: ``code: message``, whitespace runs folded to one space."""
    return " ".join(f"{exc.code}: {exc.message}".split())


def _request_id(message: object) -> types.RequestId | None:
    """The id of a readable request (an object with a method and an integer or text id), else ``None``.

    An id that is itself not valid Unicode cannot be sent back, so it counts as unreadable.
    """
    if not isinstance(message, dict) or "method" not in message:
        return None
    request_id = message.get("id")
    if isinstance(request_id, int) and not isinstance(request_id, bool):
        return request_id
    if isinstance(request_id, str):
        try:
            request_id.encode("utf-8")
        except UnicodeEncodeError:
            return None
        return request_id
    return None


def _answer(request_id: types.RequestId | None, code: int, problem: MemoriesError) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=error_line(problem))
    )


def refusal(exc: Exception) -> types.JSONRPCError | None:
    """The JSON-RPC error that answers a line the SDK's reader could not read (``exc``, what it passed on), or
    ``None`` for a notification or a response, which are never answered.

    >>> line = '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "\\\\ud800"}}'
    >>> try:
    ...     types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    ... except ValidationError as exc:
    ...     error = refusal(exc)
    >>> error.id, error.error.code
    (7, -32600)
    >>> print(error.error.message)  # doctest: +NORMALIZE_WHITESPACE
    invalid_argument: the request is not valid JSON text: a string is not valid Unicode: it holds a lone
    surrogate escape (unexpected end of hex escape at line 1 column 79)
    """
    errors = exc.errors() if isinstance(exc, ValidationError) else []
    if not errors or errors[0]["loc"]:
        # JSON, but not a JSON-RPC message: pydantic names the fields that failed, not the message's id.
        log.debug("an unreadable message: %s", errors[0]["type"] if errors else type(exc).__name__)
        return _answer(None, types.INVALID_REQUEST, MemoriesError("protocol_error", "not a JSON-RPC message"))
    # The whole line failed to parse, and pydantic keeps it as the error's input.
    reason = str((errors[0].get("ctx") or {}).get("error", errors[0]["msg"]))
    try:
        message: object = json.loads(errors[0]["input"])  # lenient: Python's parser keeps lone surrogates
    except (TypeError, ValueError):
        return _answer(None, types.PARSE_ERROR, MemoriesError("protocol_error", f"the message is not JSON: {reason}"))
    try:
        json.dumps(message, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        reason = f"a string is not valid Unicode: it holds a lone surrogate escape ({reason})"
    request_id = _request_id(message)
    if request_id is not None:
        problem = MemoriesError("invalid_argument", f"the request is not valid JSON text: {reason}")
        return _answer(request_id, types.INVALID_REQUEST, problem)
    if isinstance(message, dict) and ("method" in message) != ("id" in message):
        log.debug("an unreadable notification or response was dropped")
        return None
    return _answer(None, types.INVALID_REQUEST, MemoriesError("protocol_error", f"not valid JSON text: {reason}"))


class AnsweringReader:
    """The transport's read stream with every exception answered on ``write_stream`` (:func:`refusal`) instead of
    passed on, so the server sees messages only. It keeps the transport's ``last_context`` (the sender's
    contextvars, which the SDK reads from the stream it serves)."""

    def __init__(self, inner: _Receiving, write_stream: _Sending) -> None:
        self._inner = inner
        self._write_stream = write_stream

    @property
    def last_context(self) -> contextvars.Context | None:
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> Item:
        """The next message; raises ``anyio.EndOfStream`` when stdin ended."""
        while True:
            item: Item = await self._inner.receive()
            if not isinstance(item, Exception):
                return item
            error = refusal(item)
            if error is not None:
                await self._write_stream.send(SessionMessage(error))

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> AnsweringReader:
        return self

    async def __anext__(self) -> Item:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> AnsweringReader:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        await self.aclose()

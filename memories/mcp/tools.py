"""The MCP tools: names, descriptions, input schemas, and the strict decoding of their arguments.

Arguments are checked here, not by the SDK (which drops unknown arguments silently and answers bad ones with
multi-line messages). Every schema says ``additionalProperties: false``, and :func:`decode` enforces it: an
unknown argument, a missing one or a value of the wrong type is ``invalid_argument`` naming the argument, in one
line. Decoding is strict with the allowances clients need: an integer may come as a string of decimal digits
(``"5"``) or as a number with no fraction (``5.0``, an integer in JSON Schema), and a boolean as
``"true"``/``"false"``; ``true`` for an integer, ``5.5`` or ``"abc"`` is refused.
Limits are the CLI's (R-17): ``limit`` 1 to 100 (``limit_too_large`` above), queries up to 1,024 UTF-8 bytes.
No argument names a vault, an endpoint, a model or a credential: the grant and the daemon's config decide those.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from memories import protocol as p
from memories.errors import MemoriesError
from memories.limits import MAX_QUERY_BYTES, MAX_RESULTS, check_result_limit

_MAX_INTEGER = 2**53
"""Largest integer accepted (JSON's exact integer range)."""


@dataclass(frozen=True)
class Argument:
    """One argument: its JSON type (``string``, ``integer``, ``boolean``), allowed values, bounds, default."""

    name: str
    kind: str
    description: str
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: int | None = None

    def schema(self) -> dict[str, Any]:
        prop: dict[str, Any] = {"type": self.kind, "description": self.description}
        if self.choices:
            prop["enum"] = list(self.choices)
        if self.minimum is not None:
            prop["minimum"] = self.minimum
        if self.name == "limit":
            prop["maximum"] = MAX_RESULTS
        if self.default is not None:
            prop["default"] = self.default
        return prop


@dataclass(frozen=True)
class ToolSpec:
    """One tool: the grant scope it needs, its arguments and how decoded arguments become the daemon request."""

    name: str
    scope: p.GrantScope
    description: str
    arguments: tuple[Argument, ...]
    build: Callable[..., p.ToolCall] = field(repr=False)

    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (``additionalProperties: false``)."""
        return {
            "type": "object",
            "properties": {a.name: a.schema() for a in self.arguments},
            "required": [a.name for a in self.arguments if a.required],
            "additionalProperties": False,
        }


_MODES = ("bm25", "vector", "hybrid")
_QUERY = Argument("query", "string", "What to look for, in the notes' language (at most 1,024 UTF-8 bytes).", True)
_LIMIT = Argument("limit", "integer", "How many results (1 to 100).", default=10, minimum=1)

TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "memory_search",
            "search",
            "Lexical (BM25) search of the granted vault, grouped by note: each note's id, revision, title, score "
            "and up to 3 snippets labelled S1, S2, ... Use it to find which notes exist on a topic.",
            (_QUERY, _LIMIT),
            lambda query, limit: p.ToolSearch(query=query, limit=limit),
        ),
        ToolSpec(
            "memory_read",
            "read",
            "Read one note of the granted vault in pages: the text from UTF-8 byte `offset` (0, the previous "
            "page's `next_offset`, or a chunk's `byte_start`), `next_offset` null on the last page.",
            (
                Argument("id", "string", "The note's id (from a search or retrieve result).", True),
                Argument("revision", "integer", "A revision number (default: the latest).", minimum=1),
                Argument("offset", "integer", "UTF-8 byte offset to start the page at.", default=0, minimum=0),
            ),
            lambda id, revision, offset: p.ToolRead(id=id, revision=revision, offset=offset),
        ),
        ToolSpec(
            "memory_retrieve",
            "retrieve",
            "Retrieve the best chunks of the granted vault for a question: labels S1..Sn to cite as [S1], record "
            "id (asset_id) and revision, UTF-8 byte span, chunk hash and text. Hybrid (BM25 + vectors) when the "
            "model is ready, else BM25.",
            (
                _QUERY,
                Argument(
                    "mode",
                    "string",
                    "bm25, vector or hybrid (default: hybrid when ready).",
                    choices=_MODES,
                ),
                Argument(
                    "match_mode",
                    "string",
                    "any (default): any term; all: every term; phrase: the exact phrase.",
                    default="any",
                    choices=("any", "all", "phrase"),
                ),
                _LIMIT,
                Argument("cards_only", "boolean", "Only imported documents (knowledge cards).", default=False),
                Argument("no_rerank", "boolean", "Skip the reranker.", default=False),
            ),
            lambda query, mode, match_mode, limit, cards_only, no_rerank: p.ToolRetrieve(
                query=query,
                mode=mode,
                match_mode=match_mode,
                limit=limit,
                cards_only=cards_only,
                no_rerank=no_rerank,
            ),
        ),
        ToolSpec(
            "memory_ask",
            "ask",
            "Answer a question from the granted vault's notes with the user's configured generation service: "
            "status answered with an answer citing [S1].. and each citation's record id, revision, byte span and "
            "text; or status insufficient_evidence (the notes hold nothing that supports an answer; not an error).",
            (
                Argument("question", "string", "The question (at most 1,024 UTF-8 bytes).", True),
                Argument(
                    "mode", "string", "bm25, vector or hybrid retrieval (default: hybrid when ready).", choices=_MODES
                ),
                Argument("limit", "integer", "How many chunks of evidence at most (1 to 100).", default=8, minimum=1),
                Argument("cards_only", "boolean", "Only imported documents (knowledge cards).", default=False),
            ),
            lambda question, mode, limit, cards_only: p.ToolAsk(
                question=question, mode=mode, limit=limit, cards_only=cards_only
            ),
        ),
    )
}


_MAX_ID_CHARS = 64
"""Record ids are 16 hex digits; anything much longer is refused before it reaches a message or the daemon."""


def _invalid(name: str, problem: str) -> MemoriesError:
    shown = name if len(name) <= _MAX_ID_CHARS and name.isprintable() else repr(name[:_MAX_ID_CHARS]) + "…"
    return MemoriesError("invalid_argument", f"{shown}: {problem}")


def _value(argument: Argument, raw: Any) -> Any:
    name = argument.name
    if argument.kind == "string":
        if not isinstance(raw, str):
            raise _invalid(name, "expected a string")
        if argument.choices and raw not in argument.choices:
            raise _invalid(name, f"expected one of {', '.join(argument.choices)}")
        if name in ("query", "question") and len(raw.encode("utf-8", "surrogatepass")) > MAX_QUERY_BYTES:
            raise MemoriesError("query_too_long", f"{name}: longer than {MAX_QUERY_BYTES:,} UTF-8 bytes")
        if name == "id" and not (0 < len(raw) <= _MAX_ID_CHARS and raw.isprintable()):
            raise _invalid(name, "expected a record id")
        return raw
    if argument.kind == "boolean":
        if isinstance(raw, bool):
            return raw
        if raw in ("true", "false"):
            return raw == "true"
        raise _invalid(name, "expected true or false")
    # integer; JSON Schema's ``integer`` holds 5.0 too (a zero fractional part), which clients with only floats send
    digits = isinstance(raw, str) and raw.isascii() and raw.isdigit()
    if digits or (isinstance(raw, float) and raw.is_integer()):
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise _invalid(name, "expected an integer")
    if argument.minimum is not None and raw < argument.minimum:
        raise _invalid(name, f"must be at least {argument.minimum}")
    if name == "limit":
        check_result_limit(raw)
    if raw > _MAX_INTEGER:
        raise _invalid(name, "too large")
    return raw


def decode(tool: str, arguments: dict[str, Any] | None) -> p.ToolCall:
    """The daemon request for a call of ``tool`` with ``arguments`` (the JSON object the client sent).

    Raises:
        MemoriesError: ``invalid_argument`` (unknown tool or argument, missing or mistyped value, out of range),
            ``limit_too_large``, ``query_too_long``.
    """
    spec = TOOLS.get(tool)
    if spec is None:
        raise MemoriesError("invalid_argument", f"unknown tool {tool[:64]!r}; the tools are {', '.join(TOOLS)}")
    given = dict(arguments or {})
    known = {a.name for a in spec.arguments}
    for name in given:
        if name not in known:
            raise _invalid(name, f"unknown argument ({tool} takes {', '.join(a.name for a in spec.arguments)})")
    values = {}
    for argument in spec.arguments:
        raw = given.get(argument.name)
        if raw is None:
            if argument.required:
                raise _invalid(argument.name, "required")
            values[argument.name] = argument.default
        else:
            values[argument.name] = _value(argument, raw)
    return spec.build(**values)

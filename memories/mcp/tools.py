"""The MCP tools: names, titles, descriptions, hints, schemas, and the strict decoding of their arguments.

Each tool is two structs of :mod:`memories.protocol`: its **arguments** (``ToolSearch``, ...: the daemon request
itself, whose fields and ``Meta`` give the input schema and the checks) and its **result** (``ToolSearchReport``,
...: the output schema its ``structuredContent`` follows). One definition each, so the schemas, the decoding and
the daemon cannot disagree; a new optional argument is one field with a default in :mod:`memories.protocol`.

Arguments are checked here, not by the SDK (which drops unknown arguments silently and answers bad ones with
multi-line messages). msgspec decodes them strictly against the struct; a failure becomes one line,
``invalid_argument: NAME: problem``, chosen from the field's type (:func:`_problem`), so the messages stay the same
whatever msgspec's own wording. Every schema says ``additionalProperties: false`` and decoding enforces it.
Decoding allows what clients send for the JSON types: an integer may come as a string of decimal digits (``"5"``)
or as a number with no fraction (``5.0``, an integer in JSON Schema), a boolean as ``"true"``/``"false"``, a list
of strings (``tags``) as one string for a list of one, and ``null`` means the argument's default; ``true`` for an
integer, ``5.5`` or ``"abc"`` is refused. Limits are the CLI's (R-17): ``limit`` 1 to 100 (``limit_too_large``
above), queries up to 1,024 UTF-8 bytes (``query_too_long``, from the field's ``Meta.extra``). No argument names a
vault, an endpoint, a model or a credential: the grant and the daemon's config decide those.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

import msgspec
from msgspec import inspect

from memories import protocol as p
from memories.errors import MemoriesError
from memories.limits import check_result_limit
from memories.mcp.schemas import input_schema, output_schema

WARNINGS_SCHEMA = {
    "type": "array",
    "items": {"type": "string"},
    "description": "What the user should know about this result (a search in bm25 mode because the vector index "
    "is not ready, an ingest in progress, a record left out because it failed authentication).",
}
"""The ``warnings`` list a result carries beside its struct's fields when the daemon gave any."""


@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name and title, its description for the model, its argument struct (the daemon request
    too), its result struct, and whether calling it again with the same arguments has no further effect
    (``idempotentHint``: a search does not, an ask pays for another generation)."""

    name: str
    title: str
    description: str
    arguments: type[p.ToolCall]
    result: type[msgspec.Struct]
    idempotent: bool

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema of the arguments (``additionalProperties: false``, inlined)."""
        return input_schema(self.arguments)

    @cached_property
    def output_schema(self) -> dict[str, Any]:
        """The JSON Schema of the structured result: the result struct and the optional ``warnings``."""
        return output_schema(self.result, {"warnings": WARNINGS_SCHEMA})

    @cached_property
    def fields(self) -> dict[str, inspect.Field]:
        """The arguments by name, in the struct's order (the ``$type`` tag is not an argument)."""
        info = inspect.type_info(self.arguments)
        assert isinstance(info, inspect.StructType)
        return {field.name: field for field in info.fields}

    @cached_property
    def choices(self) -> dict[str, tuple[Any, ...]]:
        """The values of each argument that is a ``Literal``, in their declared order (msgspec sorts them)."""
        return {field.name: _literal_values(field.type) for field in msgspec.structs.fields(self.arguments)}


TOOLS: dict[str, ToolSpec] = {
    spec.name: spec
    for spec in (
        ToolSpec(
            "memory_search",
            "Search notes",
            "Lexical (BM25) search of the granted vault, grouped by note: each note's id, revision, title, score "
            "and up to 3 snippets labelled S1, S2, ... Use it to find which notes exist on a topic.",
            p.ToolSearch,
            p.ToolSearchReport,
            idempotent=True,
        ),
        ToolSpec(
            "memory_read",
            "Read a note",
            "Read one note of the granted vault in pages: the text from UTF-8 byte `offset` (0, the previous "
            "page's `next_offset`, or a chunk's `byte_start`), `next_offset` null on the last page.",
            p.ToolRead,
            p.ReadPage,
            idempotent=True,
        ),
        ToolSpec(
            "memory_retrieve",
            "Retrieve passages",
            "Retrieve the best chunks of the granted vault for a question: labels S1..Sn to cite as [S1], record "
            "id (asset_id) and revision, UTF-8 byte span, chunk hash and text. Hybrid (BM25 + vectors) when the "
            "model is ready, else BM25. weak_matches true: no chunk holds the question's words or is close to it "
            "in meaning; the notes likely do not answer it, so do not cite them as if they did.",
            p.ToolRetrieve,
            p.ToolRetrieveReport,
            idempotent=True,
        ),
        ToolSpec(
            "memory_ask",
            "Ask the notes",
            "Answer a question from the granted vault's notes with the user's configured generation service: "
            "status answered with an answer citing [S1].. and each citation's record id, revision, byte span and "
            "text; or status insufficient_evidence (the notes hold nothing that supports an answer; not an error).",
            p.ToolAsk,
            p.ToolAskReport,
            idempotent=False,
        ),
    )
}
"""The tools in the order ``tools/list`` gives them."""


_MAX_NAME_CHARS = 64
"""An argument name longer than this (or not printable) is shown cut and quoted in a message."""

_AT_FIELD = re.compile(r"at `\$\.([A-Za-z_][A-Za-z0-9_]*)[`\[]")


def _literal_values(annotation: Any) -> tuple[Any, ...]:
    """The values of the ``Literal`` inside ``annotation`` (through ``Annotated`` and unions), else ``()``."""
    if typing.get_origin(annotation) is Literal:
        return typing.get_args(annotation)
    for inner in typing.get_args(annotation):
        values = _literal_values(inner)
        if values:
            return values
    return ()


def _invalid(name: str, problem: str) -> MemoriesError:
    shown = name if len(name) <= _MAX_NAME_CHARS and name.isprintable() else repr(name[:_MAX_NAME_CHARS]) + "…"
    return MemoriesError("invalid_argument", f"{shown}: {problem}")


def _base(kind: inspect.Type) -> tuple[inspect.Type, inspect.Metadata | None]:
    """The type under its ``Meta`` and ``Optional``, and the ``Meta`` (``None`` when it has none)."""
    meta = None
    while isinstance(kind, inspect.Metadata | inspect.UnionType):
        if isinstance(kind, inspect.Metadata):
            meta, kind = kind, kind.type
        else:
            kind = next(t for t in kind.types if not isinstance(t, inspect.NoneType))
    return kind, meta


def _lax(kind: inspect.Type, raw: Any) -> Any:
    """``raw`` with the allowances of the module docstring applied for an argument of type ``kind``."""
    base, _ = _base(kind)
    if isinstance(base, inspect.IntType):
        if isinstance(raw, str) and raw.isascii() and raw.isdigit():
            return int(raw)
        if isinstance(raw, float) and raw.is_integer():
            return int(raw)
    if isinstance(base, inspect.BoolType) and raw in ("true", "false"):
        return raw == "true"
    if isinstance(base, inspect.ListType) and isinstance(raw, str):
        return [raw]
    return raw


def _problem(spec: ToolSpec, name: str, value: Any) -> MemoriesError:
    """The one-line error for argument ``name`` of ``spec`` whose ``value`` msgspec refused."""
    kind = spec.fields[name].type
    base, _ = _base(kind)
    if isinstance(base, inspect.IntType):
        if not isinstance(value, int) or isinstance(value, bool):
            return _invalid(name, "expected an integer")
        if base.ge is not None and value < base.ge:
            return _invalid(name, f"must be at least {base.ge}")
        if name == "limit":
            check_result_limit(value)  # limit_too_large, the CLI's error
        return _invalid(name, "too large")
    if isinstance(base, inspect.BoolType):
        return _invalid(name, "expected true or false")
    if isinstance(base, inspect.LiteralType):
        return _invalid(name, f"expected one of {', '.join(map(str, spec.choices[name]))}")
    if isinstance(value, str) and name == "id":
        return _invalid(name, "expected a record id")
    if isinstance(base, inspect.ListType):
        return _invalid(name, f"expected a list of at most {base.max_length} non-empty strings")
    if isinstance(base, inspect.DictType):
        return _invalid(name, f"expected an object of at most {base.max_length} string values")
    return _invalid(name, "expected a string")


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
    fields = spec.fields
    for name in given:
        if name not in fields:
            raise _invalid(name, f"unknown argument ({tool} takes {', '.join(fields)})")
    values: dict[str, Any] = {}
    for name, field in fields.items():
        raw = given.get(name)
        if raw is None:
            if field.required:
                raise _invalid(name, "required")
            continue
        values[name] = _lax(field.type, raw)
    try:
        call = msgspec.convert(values, spec.arguments)
    except msgspec.ValidationError as exc:
        found = _AT_FIELD.search(str(exc))
        if found is None or found.group(1) not in values:
            raise MemoriesError("invalid_argument", f"the arguments: {str(exc)[:200]}") from None
        name = found.group(1)
        raise _problem(spec, name, values[name]) from None
    for name, field in fields.items():
        _, meta = _base(field.type)
        limit = (meta.extra or {}).get("max_utf8_bytes") if meta is not None else None
        value = getattr(call, name)
        if limit is not None and len(value.encode("utf-8", "surrogatepass")) > limit:
            raise MemoriesError("query_too_long", f"{name}: longer than {limit:,} UTF-8 bytes")
    return call

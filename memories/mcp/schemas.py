"""JSON Schemas of the MCP tools, made from their msgspec structs and inlined for the clients that need it.

``msgspec.json.schema`` writes each struct once under ``$defs`` and points at it with ``$ref``. Several MCP
clients refuse or mangle a tool schema with ``$ref``/``$defs`` (Cursor and VS Code drop the tool, some model APIs
reject the keywords), so every reference is replaced by a copy of its definition: the schemas here have neither.
On the way:

- the struct's ``$type`` tag (:data:`memories.protocol.TAG_FIELD`), which the client never sends nor sees (a
  result's document drops it), is left out;
- a struct's class name (``title``) and docstring (``description``, developer prose) are left out; the fields'
  descriptions (their ``Meta``) stay;
- a ``Literal`` of strings says ``"type": "string"`` beside its ``enum`` (some clients require a type);
- a tuple's ``"items": false`` after its ``prefixItems`` is left out when ``maxItems`` already bounds it (the
  boolean schema is refused by some clients; the Inspector's ``--strict`` calls it unportable);
- an **input** schema shows an optional argument whose default is ``null`` as its plain type, not a union with
  ``null`` (``anyOf`` is poorly supported in tool arguments; an absent argument and ``null`` mean the same), and
  keeps the other defaults; an **output** schema keeps the unions (results hold nulls) and drops defaults.

No ``$schema`` keyword is written: MCP takes a tool schema without one as JSON Schema 2020-12 (the 2025-11-25
revision, SEP-1613), the dialect ``msgspec`` writes (``prefixItems`` for tuples).
"""

from __future__ import annotations

from typing import Any

import msgspec

from memories.protocol import TAG_FIELD

_NULL = {"type": "null"}


def input_schema(struct: type[msgspec.Struct]) -> dict[str, Any]:
    """The inlined JSON Schema of a tool's arguments (``struct``'s fields), an object at the root.

    >>> from memories import protocol as p
    >>> schema = input_schema(p.ToolSearch)
    >>> schema["required"], schema["properties"]["limit"]["maximum"], schema["additionalProperties"]
    (['query'], 100, False)
    """
    return _inline(struct, for_input=True)


def output_schema(struct: type[msgspec.Struct], extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The inlined JSON Schema of a tool's structured result (``struct``), with the optional properties ``extra``
    (name -> schema) that the server adds beside the struct's fields (``warnings``). ``additionalProperties`` is
    false: a result struct decodes leniently (a daemon may add an optional field, :mod:`memories.protocol`), but
    the server sends the struct it decoded, so no other field reaches the client."""
    schema = _inline(struct, for_input=False)
    schema["properties"].update(extra or {})
    schema["additionalProperties"] = False
    return schema


def _inline(struct: type[msgspec.Struct], *, for_input: bool) -> dict[str, Any]:
    raw = msgspec.json.schema(struct)
    definitions: dict[str, Any] = raw.pop("$defs", {})
    schema = _resolve(raw, definitions, for_input, ())
    assert isinstance(schema, dict) and schema.get("type") == "object", schema
    return schema


def _resolve(node: Any, definitions: dict[str, Any], for_input: bool, seen: tuple[str, ...]) -> Any:
    """``node`` with every ``$ref`` replaced by its definition, recursively (a struct that contains itself would
    have no finite inlined form: ``ValueError``)."""
    if isinstance(node, list):
        return [_resolve(item, definitions, for_input, seen) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name in seen:
            raise ValueError(f"{name} refers to itself; its schema cannot be inlined")
        definition = {k: v for k, v in definitions[name].items() if k not in ("title", "description")}
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve({**definition, **siblings}, definitions, for_input, (*seen, name))
    out = {key: _resolve(value, definitions, for_input, seen) for key, value in node.items()}
    properties = out.get("properties")
    if isinstance(properties, dict) and TAG_FIELD in properties:
        del properties[TAG_FIELD]
        out["required"] = [name for name in out.get("required", []) if name != TAG_FIELD]
    enum = out.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(value, str) for value in enum) and "type" not in out:
        out = {"type": "string", **out}
    prefix = out.get("prefixItems")
    if out.get("items") is False and isinstance(prefix, list) and out.get("maxItems") == len(prefix):
        del out["items"]
    if for_input:
        return _without_null_default(out)
    out.pop("default", None)
    return out


def _without_null_default(node: dict[str, Any]) -> dict[str, Any]:
    """``{"anyOf": [X, {"type": "null"}], "default": null}`` as ``X`` (with the node's other keys)."""
    options = node.get("anyOf")
    if node.get("default", 0) is not None or not isinstance(options, list) or _NULL not in options:
        return node
    rest = [option for option in options if option != _NULL]
    if len(rest) != 1:
        return node
    kept = {k: v for k, v in node.items() if k not in ("anyOf", "default")}
    return {**rest[0], **kept}

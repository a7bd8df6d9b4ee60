"""The MCP tools' schemas and argument decoding (memories/mcp/tools.py, memories/mcp/schemas.py), in process."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgspec
import pytest
from jsonschema import Draft202012Validator

from memories import protocol as p
from memories.errors import MemoriesError
from memories.mcp.schemas import input_schema, output_schema
from memories.mcp.tools import TOOLS, decode


def _keys(node: Any) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {key for value in node.values() for key in _keys(value)}
    if isinstance(node, list):
        return {key for value in node for key in _keys(value)}
    return set()


@pytest.mark.parametrize("name", list(TOOLS))
def test_schemas_are_inlined_2020_12_objects_without_the_tag(name: str) -> None:
    """No ``$ref``/``$defs`` (some clients reject them), no ``$type``, valid JSON Schema 2020-12; the arguments
    closed (``additionalProperties: false``) and without ``anyOf`` (an optional argument is its plain type)."""
    spec = TOOLS[name]
    for schema in (spec.input_schema, spec.output_schema):
        Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert not {"$ref", "$defs", "$schema", p.TAG_FIELD} & _keys(schema), json.dumps(schema)
    assert "anyOf" not in _keys(spec.input_schema)
    assert spec.output_schema["properties"]["warnings"]["items"] == {"type": "string"}
    assert "warnings" not in spec.output_schema["required"]


def test_each_result_struct_validates_against_its_output_schema() -> None:
    """What the daemon sends (the struct encoded, the tag dropped, warnings added) is what the schema allows."""
    hit = p.SearchHit("S1", "a" * 16, 1, "0" * 64, 0, 9, 0.5, "t", "memory", None, "text")
    citation = p.Citation("S1", "a" * 16, 1, "0" * 64, 0, 9, "t", "text")
    documents = {
        "memory_search": p.ToolSearchReport(
            results=[p.RecordHit("a" * 16, 1, "t", 0.5, [p.ChunkHit("S1", 0, 4, "text")])], truncated=False, omitted=0
        ),
        "memory_read": p.ReadPage(
            id="a" * 16,
            revision=1,
            kind="card",
            title="t",
            source=None,
            tags=["x"],
            created=1.0,
            updated=2.0,
            offset=0,
            next_offset=None,
            total_bytes=4,
            truncated=False,
            text="text",
        ),
        "memory_retrieve": p.ToolRetrieveReport(
            mode="bm25", match_mode="any", results=[hit], truncated=True, omitted=3
        ),
        "memory_ask": p.ToolAskReport(
            status="answered",
            answer="At two [S1].",
            answer_truncated=False,
            citations=[citation],
            mode="hybrid",
            reason=None,
            truncated=False,
            omitted=0,
        ),
    }
    for name, result in documents.items():
        document = {k: v for k, v in msgspec.to_builtins(result).items() if k != p.TAG_FIELD}
        Draft202012Validator(TOOLS[name].output_schema).validate({**document, "warnings": ["bm25 only"]})
        with pytest.raises(Exception, match="Additional properties"):
            Draft202012Validator(TOOLS[name].output_schema).validate({**document, "extra": 1})


def test_a_new_optional_argument_is_one_field() -> None:
    """Issue 20's filters: one field with a default appears in the schema, optional, with its description."""

    class Filtered(p.ToolSearch):
        since: Annotated[str, msgspec.Meta(description="Only notes changed since.")] | None = None

    schema = input_schema(Filtered)
    assert schema["properties"]["since"] == {"type": "string", "description": "Only notes changed since."}
    assert schema["required"] == ["query"]
    assert "since" in output_schema(p.ToolSearchReport, {"since": {"type": "string"}})["properties"]


def test_tools_are_listed_in_one_order_with_titles() -> None:
    assert list(TOOLS) == ["memory_search", "memory_read", "memory_retrieve", "memory_ask"]
    assert all(spec.title and spec.description for spec in TOOLS.values())


@pytest.mark.parametrize("limit", [5, "5", 5.0])
def test_an_integer_may_come_as_digits_or_as_a_number_with_no_fraction(limit: object) -> None:
    """JSON Schema's ``integer`` holds 5.0 (a zero fractional part), and clients that only have floats send it."""
    assert decode("memory_search", {"query": "x", "limit": limit}) == p.ToolSearch(query="x", limit=5)


@pytest.mark.parametrize("limit", [5.5, True, "5.0", "abc", [5], float("inf"), float("nan")])
def test_anything_else_for_an_integer_is_refused(limit: object) -> None:
    with pytest.raises(MemoriesError) as raised:
        decode("memory_search", {"query": "x", "limit": limit})
    assert str(raised.value) == "invalid_argument: limit: expected an integer"


@pytest.mark.parametrize(
    ("tool", "arguments", "line"),
    [
        ("memory_search", {"query": "x", "limit": 0}, "invalid_argument: limit: must be at least 1"),
        ("memory_search", {"query": "x", "limit": "1000"}, "limit_too_large: "),
        ("memory_search", {}, "invalid_argument: query: required"),
        ("memory_search", {"query": 5}, "invalid_argument: query: expected a string"),
        ("memory_search", {"query": "农" * 342}, "query_too_long: query: longer than 1,024 UTF-8 bytes"),
        ("memory_ask", {"question": "é" * 513}, "query_too_long: question: longer than 1,024 UTF-8 bytes"),
        ("memory_search", {"query": "x", "colour": "red"}, "invalid_argument: colour: unknown argument (memory_search"),
        ("memory_search", {"query": "x", "$type": "ToolRead"}, "invalid_argument: $type: unknown argument"),
        ("memory_retrieve", {"query": "x", "mode": "magic"}, "invalid_argument: mode: expected one of bm25, vector,"),
        ("memory_retrieve", {"query": "x", "match_mode": 1}, "invalid_argument: match_mode: expected one of any, all"),
        ("memory_retrieve", {"query": "x", "cards_only": "yes"}, "invalid_argument: cards_only: expected true or"),
        ("memory_read", {"id": "x", "offset": -1}, "invalid_argument: offset: must be at least 0"),
        ("memory_read", {"id": "x", "revision": 2**60}, "invalid_argument: revision: too large"),
        ("memory_read", {"id": "x" * 65}, "invalid_argument: id: expected a record id"),
        ("memory_read", {"id": "a\nb"}, "invalid_argument: id: expected a record id"),
        ("memory_read", {"id": ""}, "invalid_argument: id: expected a record id"),
        ("memory_read", {"revision": 1}, "invalid_argument: id: required"),
        ("memory_write", {}, "invalid_argument: unknown tool 'memory_write'; the tools are memory_search, "),
    ],
)
def test_each_bad_argument_is_one_line_naming_it(tool: str, arguments: dict[str, Any], line: str) -> None:
    with pytest.raises(MemoriesError) as raised:
        decode(tool, arguments)
    assert str(raised.value).startswith(line) and "\n" not in str(raised.value)


def test_null_means_the_default_and_strings_may_carry_booleans() -> None:
    call = decode("memory_retrieve", {"query": "x", "mode": None, "limit": None, "cards_only": "true"})
    assert call == p.ToolRetrieve(query="x", mode=None, limit=10, cards_only=True)
    assert decode("memory_read", {"id": "0123456789abcdef", "revision": "2"}) == p.ToolRead(
        id="0123456789abcdef", revision=2
    )

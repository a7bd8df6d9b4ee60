"""The MCP tools' argument decoding (memories/mcp/tools.py), in process."""

from __future__ import annotations

import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from memories.mcp.tools import decode


@pytest.mark.parametrize("limit", [5, "5", 5.0])
def test_an_integer_may_come_as_digits_or_as_a_number_with_no_fraction(limit: object) -> None:
    """JSON Schema's ``integer`` holds 5.0 (a zero fractional part), and clients that only have floats send it."""
    assert decode("memory_search", {"query": "x", "limit": limit}) == p.ToolSearch(query="x", limit=5)


@pytest.mark.parametrize("limit", [5.5, True, "5.0", "abc", [5], float("inf"), float("nan")])
def test_anything_else_for_an_integer_is_refused(limit: object) -> None:
    with pytest.raises(MemoriesError) as raised:
        decode("memory_search", {"query": "x", "limit": limit})
    assert str(raised.value) == "invalid_argument: limit: expected an integer"

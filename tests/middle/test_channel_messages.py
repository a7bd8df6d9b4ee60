"""Issue 21: each channel's messages name its own arguments. ``model_not_installed`` told a CLI user to search with
``mode: "bm25"`` over MCP, beside ``--mode bm25``; an AI client is told only its tool's argument, and nothing of the
user's machine (the model's folder, a CLI command)."""

from __future__ import annotations

import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle


async def test_a_missing_model_is_told_in_each_channels_own_terms(middle: Middle) -> None:
    await middle.add("alpha note")
    with pytest.raises(MemoriesError) as cli:
        await middle.ok(p.RagSearch(vault="notes", query="alpha", mode="vector"))
    assert cli.value.code == "model_not_installed"
    assert "--mode bm25" in cli.value.message and "memories rag model-install" in cli.value.message
    assert "MCP" not in cli.value.message and "mode:" not in cli.value.message

    grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["retrieve"], expires="1h"))
    with pytest.raises(MemoriesError) as mcp:
        await middle.ok(p.Granted(token=grant.token, call=p.ToolRetrieve(query="alpha", mode="vector")))
    assert mcp.value.code == "model_not_installed"
    assert 'mode "bm25"' in mcp.value.message
    assert "--mode" not in mcp.value.message and "memories " not in mcp.value.message
    assert str(middle.daemon.models.path) not in mcp.value.message

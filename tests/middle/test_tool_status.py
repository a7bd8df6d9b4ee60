"""The granted status request an MCP server's instructions come from (memories/daemon/grants/tools.py), in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import GenerationConfig, RagConfig
from memories.errors import MemoriesError
from tests.fixtures.middle import PASSPHRASE, Middle, running_middle


async def _token(middle: Middle, scope: list[p.GrantScope]) -> str:
    grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=scope, expires="1h"))
    return str(grant.token)


async def test_any_grant_may_ask_and_a_cold_vault_stays_cold(middle: Middle) -> None:
    await middle.add("apple orchard notes")
    await middle.add("apple pie")
    await middle.ok(p.MemoryAdd(vault="notes", kind="memory", sensitivity="private", title="p", body=b"apple"))
    await middle.ok(p.MemoryAdd(vault="notes", kind="credential", sensitivity="general", title="c", body=b"apple"))
    token = await _token(middle, ["read"])  # a scope without search: the status is not a tool
    status = await middle.ok(p.Granted(token=token, call=p.ToolStatus()))
    assert status == p.ToolStatusReport(
        locked=False, generation="none", vault="notes", scope=["read"], records=2, model=False, embedded=None
    )
    assert w.IndexSync not in middle.index.started  # nothing was built for it
    assert not middle.fakes["embedding"].handlers  # nor loaded or embedded


async def test_the_embedded_share_is_known_once_the_cache_is_warm(middle: Middle) -> None:
    middle.fake_model(lambda batch: w.Vectors(vectors=b"\0\0\x80\x3f" * 4 * len(batch.inputs), dimension=4))
    for n in range(4):
        await middle.add(f"apple {n}")
    token = await _token(middle, ["search", "retrieve"])
    await middle.ok(p.Granted(token=token, call=p.ToolRetrieve(query="apple", mode="bm25")))
    status = await middle.ok(p.Granted(token=token, call=p.ToolStatus()))
    assert status.model is True and status.embedded is None  # warm, but the model is not loaded yet
    await middle.ok(p.RagIndex(vault="notes"))  # the owner embeds the vault
    status = await middle.ok(p.Granted(token=token, call=p.ToolStatus()))
    assert status.embedded == 1.0


@pytest.mark.parametrize(
    ("url", "generation"),
    [("https://generation.example/v1/chat/completions", "remote"), ("http://127.0.0.1:9/v1/chat", "device")],
)
async def test_a_locked_home_says_only_that_and_where_answers_come_from(
    tmp_path: Path, url: str, generation: str
) -> None:
    config = RagConfig(generation=GenerationConfig(protocol="compatible", url=url, model="m"))
    async with running_middle(tmp_path, config) as middle:
        token = await _token(middle, ["search"])
        await middle.ok(p.Lock())
        status = await middle.ok(p.Granted(token=token, call=p.ToolStatus()))
        assert status == p.ToolStatusReport(locked=True, generation=generation)
        await middle.ok(p.Unlock(passphrase=PASSPHRASE))
        assert (await middle.ok(p.Granted(token=token, call=p.ToolStatus()))).vault == "notes"


async def test_an_invalid_or_revoked_token_learns_nothing(middle: Middle) -> None:
    grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["search"], expires="1h"))
    await middle.ok(p.GrantRevoke(id=grant.id))
    for token, code in (("mem_" + "x" * 43, "grant_invalid"), (grant.token, "grant_revoked")):
        with pytest.raises(MemoriesError) as raised:
            await middle.ok(p.Granted(token=token, call=p.ToolStatus()))
        assert raised.value.code == code
    await middle.ok(p.Lock())
    with pytest.raises(MemoriesError) as raised:
        await middle.ok(p.Granted(token="mem_" + "x" * 43, call=p.ToolStatus()))
    assert raised.value.code == "grant_invalid"

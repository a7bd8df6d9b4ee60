"""What the daemon does with an AI client's calls: a grant reaches its own vault, its own tools and general records
only; a revoke, an expiry or the vault's deletion takes effect on the next call, and during a call drops its result.
In-process (tests/fixtures/middle.py): the calls are the :class:`~memories.protocol.Granted` requests an MCP server
sends. Moved from tests/e2e/test_mcp.py (issue 18 item 4); tests/e2e/test_mcp.py keeps the MCP server's own part
(every tool through a real server, a grant_invalid without a token) and tests/e2e/test_mcp_http.py a revoke during a
call through a real server."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import GenerationConfig, RagConfig
from memories.errors import MemoriesError
from memories.mcp.tools import decode
from tests.fixtures.middle import Middle, running_middle

GENERATION = GenerationConfig(protocol="compatible", url="https://generation.example/v1/chat/completions", model="m")


async def fails(code: str, middle: Middle, request: p.Request) -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        await middle.ok(request)
    assert caught.value.code == code, caught.value
    return caught.value


async def grant(middle: Middle, scope: p.GrantScope, vault: str = "notes", expires: str = "30d") -> p.GrantCreated:
    created: p.GrantCreated = await middle.ok(p.GrantCreate(vault=vault, client="test", scope=[scope], expires=expires))
    return created


async def _add(
    middle: Middle,
    vault: str,
    title: str,
    body: str,
    sensitivity: p.Sensitivity = "general",
    kind: p.RecordKind = "memory",
) -> str:
    ref = await middle.ok(p.MemoryAdd(vault=vault, kind=kind, sensitivity=sensitivity, title=title, body=body.encode()))
    record_id: str = ref.id
    return record_id


async def test_grants_reach_their_vault_their_tools_and_general_records_only(middle: Middle, tmp_path: Path) -> None:
    for name in ("V1", "V2", "V0"):
        await middle.ok(p.VaultCreate(name=name))
    a = await _add(middle, "V1", "note A", "apple orchard notes")
    await _add(middle, "V1", "note B", "apple pie recipe")
    private = await _add(middle, "V1", "private apple", "apple secret", sensitivity="private")
    credential = await _add(middle, "V1", "apple login", "apple password", kind="credential")
    c = await _add(middle, "V2", "note C", "apple from the other vault")
    g1 = (await middle.ok(p.GrantCreate(vault="V1", client="test", scope=["search", "read"]))).token
    g2 = (await grant(middle, "ask", "V1")).token
    g0 = (await middle.ok(p.GrantCreate(vault="V0", client="test", scope=["search", "read", "retrieve", "ask"]))).token

    def call(token: str, tool: p.ToolCall) -> p.Granted:
        return p.Granted(token=token, call=tool)

    empty = await middle.ok(call(g0, p.ToolSearch(query="apple")))
    assert p.document(empty) == {"results": [], "truncated": False, "omitted": 0}
    assert (await middle.ok(call(g0, p.ToolRetrieve(query="apple")))).results == []

    found = await middle.ok(call(g1, p.ToolSearch(query="apple", limit=100)))
    assert {r.title for r in found.results} == {"note A", "note B"}
    await middle.ok(call(g1, p.ToolRead(id=a)))
    missing = await fails("record_not_found", middle, call(g1, p.ToolRead(id="0123456789abcdef")))
    for other in (c, private, credential):
        error = await fails("record_not_found", middle, call(g1, p.ToolRead(id=other)))
        assert error.message.replace(other, "ID") == missing.message.replace("0123456789abcdef", "ID")  # no oracle
    with pytest.raises(MemoriesError) as unknown:  # no argument names a vault (the MCP server's decoding)
        decode("memory_search", {"query": "apple", "vault": "V2"})
    assert f"{unknown.value.code}: {unknown.value.message}".startswith("invalid_argument: vault: unknown argument")
    await fails("scope_denied", middle, call(g1, p.ToolRetrieve(query="apple")))
    await fails("scope_denied", middle, call(g2, p.ToolSearch(query="apple")))

    (tmp_path / "other").mkdir()
    async with running_middle(tmp_path / "other") as other_home:
        await other_home.ok(p.VaultCreate(name="V1"))
        foreign = (await grant(other_home, "search", "V1")).token
    for locked in (False, True):
        if locked:
            await middle.ok(p.Lock())
        for token in ("", "not-a-token", "mem_" + "x" * 43, foreign):
            await fails("grant_invalid", middle, call(token, p.ToolSearch(query="apple")))
        if locked:
            await fails("vault_locked", middle, call(g1, p.ToolSearch(query="apple")))
        else:
            await middle.ok(call(g1, p.ToolSearch(query="apple")))


def set_clock_ahead(middle: Middle, seconds: float) -> None:
    """The daemon's grant clock, ``seconds`` ahead of the real one (the e2e hook was a clock-offset file)."""
    grants: Any = middle.daemon.grants
    real = getattr(grants, "_real_clock", grants._clock)
    grants._real_clock = real
    grants._clock = lambda: real() + seconds


async def test_revoke_and_expiry_take_effect_on_the_next_call(middle: Middle) -> None:
    await middle.add("expiring body", title="t")
    revoked = await grant(middle, "search")
    expiring = await grant(middle, "search", expires="1h")

    def search(token: str) -> p.Granted:
        return p.Granted(token=token, call=p.ToolSearch(query="expiring"))

    assert (await middle.ok(search(revoked.token))).results
    await middle.ok(p.GrantRevoke(id=revoked.id))
    await fails("grant_revoked", middle, search(revoked.token))
    set_clock_ahead(middle, 1800)  # half-way
    assert (await middle.ok(search(expiring.token))).results
    set_clock_ahead(middle, 3600)
    await fails("grant_expired", middle, search(expiring.token))
    states = {g.id: g.state for g in (await middle.ok(p.GrantList())).grants}
    assert sorted(states.values()) == ["expired", "revoked"]


async def test_deleting_a_vault_revokes_its_grants_for_open_sessions(middle: Middle) -> None:
    def add(body: str) -> p.MemoryAdd:
        return p.MemoryAdd(vault="doomed", kind="memory", sensitivity="general", title="t", body=body.encode())

    await middle.ok(p.VaultCreate(name="doomed"))
    await middle.ok(add("doomed body"))
    call = p.Granted(token=(await grant(middle, "search", "doomed")).token, call=p.ToolSearch(query="doomed"))
    assert (await middle.ok(call)).results
    await middle.ok(p.VaultDelete(vault="doomed"))
    await middle.ok(p.VaultCreate(name="doomed"))  # a new vault of the same name is not the grant's
    await middle.ok(add("doomed body again"))
    await fails("grant_revoked", middle, call)


async def _during_a_slow_call(middle: Middle, token: str, act: Callable[[], Awaitable[object]]) -> MemoriesError:
    """Run a memory_retrieve whose index step is held, call ``act()`` once its job runs, release the step, and
    return the call's failure."""
    middle.index.started.pop(w.IndexQuery, None)
    hold = middle.index.holds[w.IndexQuery] = trio.Event()
    call = p.Granted(token=token, call=p.ToolRetrieve(query="slow", mode="bm25"))
    failures: list[MemoriesError] = []

    async def slow() -> None:
        with pytest.raises(MemoriesError) as caught:
            await middle.ok(call)
        failures.append(caught.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slow)
        await middle.index.started.setdefault(w.IndexQuery, trio.Event()).wait()
        await act()
        hold.set()
    del middle.index.holds[w.IndexQuery]
    return failures[0]


async def test_a_revoke_or_an_expiry_during_a_call_drops_its_result(middle: Middle) -> None:
    await middle.add("a slow search result", title="slow")
    revoked = await grant(middle, "retrieve")
    error = await _during_a_slow_call(middle, revoked.token, lambda: middle.ok(p.GrantRevoke(id=revoked.id)))
    assert error.code == "grant_revoked"
    cut = [j for j in (await middle.ok(p.Jobs())).jobs if j.error and j.error.code == "grant_revoked"]
    assert len(cut) == 1 and cut[0].state == "failed"

    expiring = await grant(middle, "retrieve", expires="1h")

    async def expire() -> None:
        set_clock_ahead(middle, 7200)

    error = await _during_a_slow_call(middle, expiring.token, expire)
    assert error.code == "grant_expired"


async def test_a_revoke_during_a_slow_memory_ask_drops_the_answer(tmp_path: Path) -> None:
    async with running_middle(tmp_path, RagConfig(generation=GENERATION)) as middle:
        await middle.add("a slow search result", title="slow")
        generating = trio.Event()

        async def generate(request: w.Generate) -> w.GeneratedText:
            generating.set()
            await trio.sleep_forever()  # a slow generation service
            raise AssertionError("unreachable")

        middle.fakes["remote"].handlers[w.Generate] = generate
        revoked = await grant(middle, "ask")
        failures: list[MemoriesError] = []

        async def ask() -> None:
            with pytest.raises(MemoriesError) as caught:
                await middle.ok(p.Granted(token=revoked.token, call=p.ToolAsk(question="slow search", mode="bm25")))
            failures.append(caught.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await generating.wait()
            await middle.ok(p.GrantRevoke(id=revoked.id))
        assert failures[0].code == "grant_revoked"
        (job,) = [j for j in (await middle.ok(p.Jobs())).jobs if j.kind == "ask"]
        assert job.error is not None and job.error.code == "grant_revoked"

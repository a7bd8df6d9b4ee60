"""``rag ask`` in-process: a vault change while the generation runs, its progress while it waits, the structured
output it asks for (memories/daemon/search/ask.py). The vault changes
that keep or drop an answer through the CLI and the loopback fake service are in tests/e2e/test_remote.py."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import GenerationConfig, RagConfig
from memories.daemon.core.context import RequestContext
from memories.daemon.core.jobs import Job
from memories.daemon.search.ask import WAITING
from memories.errors import MemoriesError
from tests.fixtures.middle import running_middle

GENERATION = GenerationConfig(protocol="compatible", url="https://generation.example/v1/chat/completions", model="m")


async def test_a_vault_made_device_only_during_the_generation_drops_its_answer(tmp_path: Path) -> None:
    """R-41: the run after the change sees the vault's policy as it is now; its answer, from a service that may no
    longer see the vault, is not delivered, and nothing is sent again."""
    async with running_middle(tmp_path, RagConfig(generation=GENERATION)) as middle:
        await middle.add("restic backups run at two", title="Backups")
        generating, release = trio.Event(), trio.Event()
        calls: list[w.Generate] = []

        async def generate(request: w.Generate) -> w.GeneratedText:
            calls.append(request)
            generating.set()
            await release.wait()
            return w.GeneratedText(text='{"answer": "At two [S1].", "citations": ["S1"]}', structured_output="none")

        middle.fakes["remote"].handlers[w.Generate] = generate
        outcome: list[MemoriesError] = []

        async def ask() -> None:
            try:
                await middle.ok(p.RagAsk(vault="notes", question="restic", mode="bm25"))
            except MemoriesError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await generating.wait()
            await middle.ok(p.VaultPolicy(vault="notes", device_only=True))
            release.set()

        assert [error.code for error in outcome] == ["policy_changed"] and len(calls) == 1


async def test_without_generation_config_the_owner_and_an_ai_client_each_get_their_own_message(tmp_path: Path) -> None:
    """The owner learns what to add where (api_key_env is optional for a loopback url, as docs/guide/models.md
    says); an AI client learns what to do instead, in its own tools' words, and nothing of the user's machine."""
    async with running_middle(tmp_path) as middle:
        with pytest.raises(MemoriesError) as owner:
            await middle.ok(p.RagAsk(vault="notes", question="restic", mode="bm25"))
        assert owner.value.code == "generation_not_configured"
        assert "(protocol, url and model; api_key_env too unless the url is a loopback address)" in owner.value.message
        assert str(tmp_path / "home" / "config.toml") in owner.value.message

        grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["ask"], expires="1h"))
        with pytest.raises(MemoriesError) as client:
            await middle.ok(p.Granted(token=grant.token, call=p.ToolAsk(question="restic", mode="bm25")))
        assert client.value.code == "generation_not_configured"
        assert "memory_retrieve" in client.value.message
        assert "rag ask" not in client.value.message and str(tmp_path) not in client.value.message


def _listening(events: list[p.Progress]) -> RequestContext:
    """A request context whose jobs report their progress into ``events`` (as the client connection does)."""

    def attach(job: Job) -> None:
        job.listeners.append(events.append)

    return RequestContext(attach)


@pytest.mark.parametrize("caller", ["rag ask", "memory_ask"])
async def test_an_ask_reports_its_wait_each_second_and_each_retry(
    tmp_path: Path, mock_clock: trio.testing.MockClock, caller: str
) -> None:
    """Issue 22 item 4: the wait for the generation service in seconds, and the worker's retry notes, reach
    whoever waits for the request: the CLI's connection, or the MCP server for a memory_ask call."""
    async with running_middle(tmp_path, RagConfig(generation=GENERATION)) as middle:
        await middle.add("restic backups run at two", title="Backups")
        generating, release = trio.Event(), trio.Event()

        async def generate(request: w.Generate, progress: Callable[[str], Awaitable[None]]) -> w.GeneratedText:
            generating.set()
            await progress("retrying 2/3 after 429, waiting 4 s")
            await release.wait()
            return w.GeneratedText(text='{"answer": "At two [S1].", "citations": ["S1"]}', structured_output="none")

        middle.fakes["remote"].handlers[w.Generate] = generate
        events: list[p.Progress] = []
        if caller == "rag ask":
            request: p.Request = p.RagAsk(vault="notes", question="restic", mode="bm25")
        else:
            grant = await middle.ok(p.GrantCreate(vault="notes", client="test", scope=["ask"], expires="1h"))
            request = p.Granted(token=grant.token, call=p.ToolAsk(question="restic", mode="bm25"))
        answers: list[p.Result] = []

        async def ask() -> None:
            answers.append(await middle.ok(request, _listening(events)))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await generating.wait()
            for _ in range(2):
                await trio.testing.wait_all_tasks_blocked()
                mock_clock.jump(1)
            await trio.testing.wait_all_tasks_blocked()
            release.set()

    assert answers and answers[0].status == "answered"  # type: ignore[attr-defined]
    waits = [(event.done, event.unit) for event in events if event.note == WAITING]
    assert waits[:3] == [(0, "seconds"), (1, "seconds"), (2, "seconds")]
    (retry,) = [event for event in events if event.note and event.note.startswith("retrying")]
    assert (retry.note, retry.unit) == ("retrying 2/3 after 429, waiting 4 s", "seconds")


async def test_the_structured_output_a_server_took_is_asked_for_again(tmp_path: Path) -> None:
    """Issue 22 item 1: remembered per (url, model) for the daemon's run, so a server that refused the schema once
    is not asked for it (and paid for the refusal) on every question."""
    async with running_middle(tmp_path, RagConfig(generation=GENERATION)) as middle:
        await middle.add("restic backups run at two", title="Backups")
        requests: list[w.Generate] = []
        outcomes: list[w.GeneratedText | MemoriesError] = [
            MemoriesError("upstream_error", "HTTP 400", {"status": 400, "structured_output": "json_object"}),
            w.GeneratedText(text='{"answer": "At two [S1].", "citations": ["S1"]}', structured_output="none"),
            w.GeneratedText(text='{"answer": "At two [S1].", "citations": ["S1"]}', structured_output="none"),
        ]

        def generate(request: w.Generate) -> w.GeneratedText:
            requests.append(request)
            outcome = outcomes.pop(0)
            if isinstance(outcome, MemoriesError):
                raise outcome
            return outcome

        middle.fakes["remote"].handlers[w.Generate] = generate
        ask = p.RagAsk(vault="notes", question="restic", mode="bm25")
        with pytest.raises(MemoriesError):
            await middle.ok(ask)
        await middle.ok(ask)
        await middle.ok(ask)

    assert [(r.structured_output, r.probing) for r in requests] == [
        ("json_schema", True),
        ("json_object", False),
        ("none", False),
    ]
    assert requests[0].labels == ["S1"]

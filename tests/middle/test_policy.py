"""Device-only holds for jobs already running (issue 21 item 5): a policy change cuts the vault's jobs
(``policy_changed``) and drops replies in flight, and every remote step (embedding batch, query embedding, rerank,
generation) checks the vault's policy as it is now. In-process with fake workers; the same through the real remote
worker and a recording proxy is tests/e2e/test_remote.py::test_a_policy_change_stops_a_running_background_index."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import EmbeddingConfig, GenerationConfig, RagConfig, RerankConfig
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle, running_middle

OFF_DEVICE = "https://models.invalid.example/v1"
EMBEDDING = EmbeddingConfig(
    protocol="compatible", url=f"{OFF_DEVICE}/embeddings", model="m", dimensions=4, batch_size=1
)
GENERATION = GenerationConfig(protocol="compatible", url=f"{OFF_DEVICE}/chat/completions", model="m")
RERANK = RerankConfig(protocol="compatible", url=f"{OFF_DEVICE}/rerank", model="m")


class HeldRemote:
    """The fake remote worker's handler of one request type: records each request, holds the first until
    :attr:`release` is set, then answers ``reply``."""

    def __init__(self, middle: Middle, kind: type, reply: Any) -> None:
        self.requests: list[Any] = []
        self.started, self.release = trio.Event(), trio.Event()
        self._reply = reply
        middle.fakes["remote"].handlers[kind] = self.handle

    async def handle(self, request: Any) -> Any:
        self.requests.append(request)
        self.started.set()
        await self.release.wait()
        return self._reply(request) if callable(self._reply) else self._reply


def _vectors(request: w.RemoteEmbed) -> w.RemoteVectors:
    return w.RemoteVectors(vectors=bytes(16 * len(request.inputs)), dimension=4, ok=list(range(len(request.inputs))))


async def _job(middle: Middle, job_id: int) -> p.JobInfo:
    """The job once it has ended."""
    with trio.fail_after(60):
        while (job := next(j for j in (await middle.ok(p.Jobs())).jobs if j.id == job_id)).state in (
            "queued",
            "running",
            "cancelling",
        ):
            await trio.sleep(0.01)
    return job


async def _dropped(middle: Middle, at_least: int) -> None:
    with trio.fail_after(60):
        while (await middle.ok(p.Status())).dropped_replies < at_least:
            await trio.sleep(0.01)


async def test_a_policy_change_cuts_a_running_background_index_and_drops_the_batch_in_flight(tmp_path: Path) -> None:
    """It used to only bump the epoch: the job took it for an edit, kept the vault row it started with and went on
    sending chunks (and notes added later) to the off-device service."""
    async with running_middle(tmp_path, RagConfig(embedding=EMBEDDING)) as middle:
        for n in range(5):
            await middle.add(f"note number {n}")
        embed = HeldRemote(middle, w.RemoteEmbed, _vectors)
        started = await middle.ok(p.RagIndex(vault="notes", background=True))
        await embed.started.wait()

        info = await middle.ok(p.VaultPolicy(vault="notes", device_only=True))
        assert info.device_only
        job = await _job(middle, started.job_id)  # ended before the policy change answered
        assert job.state == "failed" and job.error is not None and job.error.code == "policy_changed"
        await middle.add("a note added after the change")
        embed.release.set()
        await _dropped(middle, 1)  # the batch in flight answered, and its reply was dropped

        assert len(embed.requests) == 1 and middle.index.embedded(middle.vault_id) == set()
        with pytest.raises(MemoriesError) as refused:
            await middle.ok(p.RagIndex(vault="notes", background=True))
        assert refused.value.code == "device_only_vault" and len(embed.requests) == 1


async def test_a_generation_in_flight_is_cut_and_its_reply_dropped(tmp_path: Path) -> None:
    async with running_middle(tmp_path, RagConfig(generation=GENERATION)) as middle:
        await middle.add("restic backups run at two", title="Backups")
        answer = w.GeneratedText(text='{"answer": "At two [S1].", "citations": ["S1"]}', structured_output="none")
        generate = HeldRemote(middle, w.Generate, answer)
        outcome: list[MemoriesError] = []

        async def ask() -> None:
            try:
                await middle.ok(p.RagAsk(vault="notes", question="restic", mode="bm25"))
            except MemoriesError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask)
            await generate.started.wait()
            await middle.ok(p.VaultPolicy(vault="notes", device_only=True))
            assert [error.code for error in outcome] == ["policy_changed"]  # cut before the change answered
            generate.release.set()
        await _dropped(middle, 1)
        assert len(generate.requests) == 1


@pytest.mark.parametrize("step", ["embedding batch", "query embedding", "rerank", "generation"])
async def test_every_remote_step_checks_the_current_policy_first(tmp_path: Path, step: str) -> None:
    """A job holding a vault row read before the policy changed (a race the cut cannot see: the row was read, the
    job not yet registered) still sends nothing: each remote step reads the policy as stored now."""
    rag = {
        "embedding batch": RagConfig(embedding=EMBEDDING),
        "query embedding": RagConfig(embedding=EMBEDDING),
        "rerank": RagConfig(rerank=RERANK),
        "generation": RagConfig(generation=GENERATION),
    }[step]
    async with running_middle(tmp_path, rag) as middle:
        await middle.add("restic backups run at two", title="Backups")
        await middle.add("restic checks the repository", title="Checks")
        remote: list[Any] = []
        for kind in (w.RemoteEmbed, w.Rerank, w.Generate):
            middle.fakes["remote"].handlers[kind] = lambda request: remote.append(request)
        if step == "query embedding":
            middle.fakes["remote"].handlers[w.RemoteEmbed] = lambda request: remote.append(request) or _vectors(request)
            await middle.ok(p.RagIndex(vault="notes"))  # every chunk embedded: only the query is left to send
            remote.clear()
        held = w.IndexMissing if "embedding" in step else w.IndexQuery
        middle.index.holds[held] = hold = trio.Event()
        vault = await middle.daemon.store.resolve_unlocked("notes")
        if step == "generation":
            request: p.Request = p.RagAsk(vault="notes", question="restic", mode="bm25")
        else:
            request = p.RagSearch(vault="notes", query="restic", mode="bm25" if step == "rerank" else "vector")
        outcome: list[MemoriesError] = []

        async def run() -> None:
            try:
                await middle.ok(request)
            except MemoriesError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            await middle.index.started.setdefault(held, trio.Event()).wait()
            # The policy changes under the job without its cut (as for a job registered just after the cut).
            await middle.daemon.store.set_policy(vault, True)
            hold.set()
        assert [error.code for error in outcome] == ["device_only_vault"] and remote == []

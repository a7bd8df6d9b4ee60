"""``rag ask``: an answer drawn only from the vault's evidence, with citations that are checked (R-08, R-43).

::

    [rag.generation]? ── no ──▶ generation_not_configured (nothing else runs)
    device-only vault and a non-loopback URL? ──▶ device_only_vault (before any request)
    retrieve as `rag search`, evidence chunks only ── none ──▶ insufficient_evidence, reason "retrieval"
    S1..Sn within max_context_chars ─▶ workers.remote (Generate) ─▶ parse_answer (labels checked)
    cites nothing, or answers nothing ──▶ insufficient_evidence, reason "model"
    else answered, each citation with its exact text; an answer over the answer cap is cut (answer_truncated)

Citation checking checks references (every label exists and was sent), not whether each claim is supported by its
source. A reply that arrives after lock, a revoke or a cancel is dropped (the job's cancel scope and acceptance
check, :mod:`memories.daemon.core.jobs`). Retrying generation may add provider cost; retries stay within
``[rag.http] retries``, and malformed output is never retried.

**Structured output** is asked for as the server took it before in this daemon's run, per ``(url, model)``
(:attr:`Asking.structured_output`): ``json_schema`` first, one level less after each refusal
(:class:`memories.providers.generation.StructuredOutputLadder`), remembered once the server answers or refuses.

**Signs of life.** While the generation service works, the job reports progress once a second in ``seconds``
waited, noted ``waiting for the generation service``, and each retry as its own note (``retrying 2/3 after 429,
waiting 4 s``): the CLI shows them on a terminal, ``memory_ask`` clients as MCP progress notifications.

**A vault change during an ask generates again only when what the model was shown changed.** Each generation may
be a paid call, so the job keeps the reply it paid for. When the vault's epoch moved meanwhile (a note added, an
ingest in progress, a sync), the acceptance check runs the job again, and that run first checks every chunk the
model was shown, cited or not, against the vault as it is now (:func:`_still_held`: the record still eligible, at
the same revision, with the same title and the same text at the same byte span). All held: the same reply is
answered, with no second call. One changed (edited, deleted, made private, or the vault made device-only): the
reply is dropped, retrieval runs on the current vault and generation runs again on what it finds, within the
job's budget. A new note alone never costs a generation; the answer is then from the notes as they were when it
was generated, all of them still held.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast, get_args

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.caps import cut_answer
from memories.config import GenerationConfig, RagConfig
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.egress import check_current_policy, refuse_device_only
from memories.daemon.core.jobs import JobManager, VaultJob
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.backends import request_budget
from memories.daemon.search.retrieval import Retrieval
from memories.daemon.search.spec import SearchSpec
from memories.errors import MemoriesError
from memories.rag.answers import Source, parse_answer, select_sources, user_prompt
from memories.vault.store import VaultRow
from memories.vault.views import IndexText

WAITING = "waiting for the generation service"
"""The note of the progress events of an ask while its generation request runs."""

STRUCTURED_OUTPUTS = frozenset(get_args(w.StructuredOutput))


class Asking:
    """The ``rag ask`` handler.

    Args:
        store: the store gate; jobs: the job queue; retrieval: the search it answers from; remote: the remote
        worker (generation); rag: the ``[rag]`` settings (``generation``, ``http``); config_path: the config
        file, named when ``[rag.generation]`` is missing; default_budget: seconds a remote request of a job
        without a budget may take.
    """

    def __init__(
        self,
        store: StoreGate,
        jobs: JobManager,
        retrieval: Retrieval,
        remote: WorkerHandle,
        rag: RagConfig,
        config_path: str,
        default_budget: float,
    ) -> None:
        self._store = store
        self._jobs = jobs
        self._retrieval = retrieval
        self._remote = remote
        self._rag = rag
        self._config_path = config_path
        self._default_budget = default_budget
        self.structured_output: dict[tuple[str, str], w.StructuredOutput] = {}
        """``(url, model)`` → the structured output that server took last (or stepped down to) in this run."""

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagAsk: self.ask}

    @property
    def configured(self) -> bool:
        """``[rag.generation]`` is set; without it every ask fails with ``generation_not_configured``."""
        return self._rag.generation is not None

    @property
    def egress_url(self) -> str | None:
        """Where an ask sends vault text: ``[rag.generation] url`` (``None`` when it is not configured)."""
        generation = self._rag.generation
        return generation.url if generation is not None else None

    async def ask(self, request: p.RagAsk, ctx: RequestContext) -> p.AskReport:
        """``rag ask``: :meth:`answer` of the request's question and search.

        Raises:
            MemoriesError: ``limit_too_large`` and a malformed filter's ``invalid_argument`` (before any work), and
                what :meth:`answer` raises.
        """
        return await self.answer(request.vault, SearchSpec.of(request), ctx)

    async def answer(self, vault_ref: str, search: SearchSpec, ctx: RequestContext) -> p.AskReport:
        """Answer the question ``search.query`` from the evidence of ``search`` in the vault ``vault_ref`` names (a
        name or id; see the module docstring).

        Raises:
            MemoriesError: ``generation_not_configured``, ``device_only_vault``, ``invalid_model_output`` (with the
                reason), the search's limits and the services' failures (``upstream_unavailable``, ``auth_failed``…).
        """
        generation = self._rag.generation
        if generation is None:
            raise MemoriesError(
                "generation_not_configured",
                f"`rag ask` needs a [rag.generation] table (protocol, url and model; api_key_env too unless the url "
                f"is a loopback address) in {self._config_path}; restart the daemon after adding it",
            )
        vault = await self._vault(vault_ref, generation)
        job = self._jobs.new_job("ask", vault.id, vault.name, epoch_checked=True)
        ctx.attach(job)
        generated: _Generated | None = None  # kept across the job's runs: a vault change alone never pays again

        async def work(job: VaultJob) -> p.AskReport:
            nonlocal generated
            current = await self._vault(vault.id, generation)  # a run after a change sees the current policy
            if generated is not None:
                if _still_held(await self._store.index_texts(current, _records_of(generated.shown)), generated.shown):
                    return generated.report()
                generated = None  # what the model was shown changed: its answer is dropped
            mode, hits = await self._retrieval.retrieve(job, current, ctx, search, evidence=True)
            if not hits:
                return _insufficient(mode, "retrieval")
            sources = select_sources([(hit.title, hit.text) for hit in hits], generation.max_context_chars)
            await check_current_policy(self._store, current, generation.url, "rag.generation")
            reply = await self._generate(job, generation, search.query, sources)
            generated = _Generated(mode, sources, hits[: len(sources)], reply.text)
            return generated.report()

        return await self._jobs.run(job, work)

    async def _generate(
        self, job: VaultJob, generation: GenerationConfig, question: str, sources: list[Source]
    ) -> w.GeneratedText:
        """One generation request, reporting the wait and each retry as the job's progress (module docstring).

        Raises:
            MemoriesError: the service's failures, ``budget_exceeded``.
        """
        server = (generation.url, generation.model)
        known = self.structured_output.get(server)
        body = w.Generate(
            service=generation,
            http=self._rag.http,
            user=user_prompt(question, sources),
            labels=[source.label for source in sources],
            budget_seconds=request_budget(job, self._default_budget),
            structured_output=known or "json_schema",
            probing=known is None,
        )
        started = trio.current_time()

        def waited() -> int:
            return int(trio.current_time() - started)

        def on_retry(event: w.WorkerProgress) -> None:
            job.progress(waited(), None, "seconds", note=event.note)

        self._remote.handed_vault_text()
        failure: MemoriesError | None = None

        async def tick() -> None:
            while True:
                job.progress(waited(), None, "seconds", note=WAITING)
                await trio.sleep(1)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            try:
                # The reply is kept even when the vault changed meanwhile; the acceptance check then runs the job
                # again, and that run keeps it if the chunks it was shown are still held.
                reply = await job.call(self._remote, body, epoch=False, on_progress=on_retry)
            except MemoriesError as exc:  # raised below, as itself rather than in an exception group
                failure = exc
            nursery.cancel_scope.cancel()
        if failure is not None:
            reached = failure.details.get("structured_output")
            if reached in STRUCTURED_OUTPUTS:
                self.structured_output[server] = cast(w.StructuredOutput, reached)
            raise failure
        self.structured_output[server] = reply.structured_output
        return reply

    async def _vault(self, ref: str, generation: GenerationConfig) -> VaultRow:
        """The vault ``ref`` names, unlocked, refused when it is device-only and generation leaves the device.

        Raises:
            MemoriesError: ``device_only_vault`` and what :meth:`StoreGate.resolve_unlocked` raises.
        """
        vault = await self._store.resolve_unlocked(ref)
        refuse_device_only(vault, generation.url, "rag.generation")
        return vault


@dataclass(frozen=True)
class _Generated:
    """One generation, already paid for: the chunks the model was shown (``shown``, labelled ``sources``) and its
    reply."""

    mode: p.SearchMode
    sources: list[Source]
    shown: list[w.WorkerHit]
    reply: str

    def report(self) -> p.AskReport:
        """The reply as an answer with checked citations (raises ``invalid_model_output``)."""
        answer, labels = parse_answer(self.reply, [source.label for source in self.sources])
        if not labels or not answer.strip():  # the prompt's way of saying the sources do not answer
            return _insufficient(self.mode, "model")
        by_label = {source.label: hit for source, hit in zip(self.sources, self.shown, strict=True)}
        citations = [_citation(label, by_label[label]) for label in labels]
        answer, cut = cut_answer(answer)
        return p.AskReport(status="answered", answer=answer, answer_truncated=cut, citations=citations, mode=self.mode)


def _records_of(shown: list[w.WorkerHit]) -> list[str]:
    """The record ids of the chunks the model was shown, sorted."""
    return sorted({hit.asset_id for hit in shown})


def _still_held(current: list[IndexText], shown: list[w.WorkerHit]) -> bool:
    """Whether ``current`` (the vault's eligible records of the chunks shown, decrypted now) still holds every chunk
    the model was shown, as it was shown: its record eligible, at the same revision, with the same title and the
    same text at the same byte span. Every chunk shown counts, cited or not: an answer may repeat a source it does
    not cite."""
    held = {record.id: record for record in current}
    for hit in shown:
        record = held.get(hit.asset_id)
        if record is None or record.revision != hit.revision or record.title != hit.title:
            return False
        if record.body.encode()[hit.byte_start : hit.byte_end] != hit.text.encode():
            return False
    return True


def _insufficient(mode: p.SearchMode, reason: str) -> p.AskReport:
    return p.AskReport(
        status="insufficient_evidence",
        answer=None,
        answer_truncated=False,
        citations=[],
        mode=mode,
        reason=reason,  # type: ignore[arg-type]
    )


def _citation(label: str, hit: w.WorkerHit) -> p.Citation:
    return p.Citation(
        label=label,
        asset_id=hit.asset_id,
        revision=hit.revision,
        chunk_hash=hit.chunk_hash,
        byte_start=hit.byte_start,
        byte_end=hit.byte_end,
        title=hit.title,
        text=hit.text,
    )

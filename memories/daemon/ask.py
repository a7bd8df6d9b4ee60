"""``rag ask``: an answer drawn only from the vault's evidence, with citations that are checked (R-08, R-43).

::

    [rag.generation]? ── no ──▶ generation_not_configured (nothing else runs)
    device-only vault and a non-loopback URL? ──▶ device_only_vault (before any request)
    retrieve as `rag search`, evidence chunks only ── none ──▶ insufficient_evidence, reason "retrieval"
    S1..Sn within max_context_chars ─▶ workers.remote (Generate) ─▶ parse_answer (labels checked)
    cites nothing, or answers nothing ──▶ insufficient_evidence, reason "model"
    else answered, each citation with its exact text; an answer over the answer cap is cut (answer_truncated)

Citation checking checks references (every label exists and was sent), not whether each claim is supported by its
source. A reply that arrives after lock, or for an older state of the vault, is dropped (the job's epoch and
cancel scope, :mod:`memories.daemon.jobs`). Retrying generation may add provider cost; retries stay within
``[rag.http] retries``, and malformed output is never retried.
"""

from __future__ import annotations

from memories import protocol as p
from memories import worker_protocol as w
from memories.caps import cut_answer
from memories.config import RagConfig
from memories.daemon.backends import request_budget
from memories.daemon.context import Handlers, RequestContext
from memories.daemon.egress import refuse_device_only
from memories.daemon.jobs import JobManager, VaultJob
from memories.daemon.retrieval import Retrieval
from memories.daemon.store_gate import StoreGate
from memories.daemon.workers import WorkerHandle
from memories.errors import MemoriesError
from memories.limits import check_result_limit
from memories.rag.answers import parse_answer, select_sources, user_prompt


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

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.RagAsk: self.ask}

    async def ask(self, request: p.RagAsk, ctx: RequestContext) -> p.AskReport:
        """Answer ``request.question`` from the vault (see the module docstring).

        Raises:
            MemoriesError: ``generation_not_configured``, ``device_only_vault``, ``invalid_model_output`` (with the
                reason), the search's limits and the services' failures (``upstream_unavailable``, ``auth_failed``…).
        """
        generation = self._rag.generation
        if generation is None:
            raise MemoriesError(
                "generation_not_configured",
                f"`rag ask` needs a [rag.generation] table (protocol, url, model, api_key_env) in "
                f"{self._config_path}; restart the daemon after adding it",
            )
        check_result_limit(request.limit)
        vault = await self._store.resolve_unlocked(request.vault)
        refuse_device_only(vault, generation.url, "rag.generation")
        search = p.RagSearch(
            vault=request.vault,
            query=request.question,
            mode=request.mode,
            limit=request.limit,
            cards_only=request.cards_only,
            no_rerank=request.no_rerank,
        )
        job = self._jobs.new_job("ask", vault.id, vault.name, epoch_checked=True)
        ctx.attach(job)

        async def work(job: VaultJob) -> p.AskReport:
            mode, hits = await self._retrieval.retrieve(job, vault, ctx, search, evidence=True)
            if not hits:
                return _insufficient(mode, "retrieval")
            sources = select_sources([(hit.title, hit.text) for hit in hits], generation.max_context_chars)
            body = w.Generate(
                service=generation,
                http=self._rag.http,
                user=user_prompt(request.question, sources),
                budget_seconds=request_budget(job, self._default_budget),
            )
            self._remote.handed_vault_text()
            reply = await job.call(self._remote, body)
            answer, labels = parse_answer(reply.text, [source.label for source in sources])
            if not labels or not answer.strip():  # the prompt's way of saying the sources do not answer
                return _insufficient(mode, "model")
            by_label = {source.label: hit for source, hit in zip(sources, hits, strict=False)}
            citations = [_citation(label, by_label[label]) for label in labels]
            answer, cut = cut_answer(answer)
            return p.AskReport(status="answered", answer=answer, answer_truncated=cut, citations=citations, mode=mode)

        return await self._jobs.run(job, work)


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

"""The embedding backend as the supervisor uses it: local EmbeddingGemma, or a remote service (R-22, R-28, R-32).

One interface, two implementations::

    await backend.available()        can it embed at all (local: the model is installed; remote: always)
    await backend.space()            the vector space: key and input recipe (local: loads the model first)
    backend.plan_size                inputs the index worker names per plan (several batches)
    await backend.batches(job, inputs, background)   the plan cut into batches (local: by token count, smaller
                                     ones for the background index)
    await backend.embed(job, inputs) one request's vectors, with inputs the service refused as too long
    await backend.embed_query(job, q) float32[dimension] bytes of the query vector
    backend.egress_url               where vault text goes (None: nowhere, the model runs in the daemon)

The backend owns the input recipe, its dimension and its space key: EmbeddingGemma's task prefixes (applied by
the index worker through :class:`~memories.protocol.InputRecipe`); Gemini's ``taskType`` with the document title
sent beside the text; a compatible model's prefixes only when configured. The remote key binds protocol, URL,
model, dimensions and both prefixes, so vectors of two configurations never mix and any change re-embeds.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.config import EmbeddingConfig, HttpConfig, RagConfig
from memories.daemon.core.jobs import Job
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.index.models import Models
from memories.errors import MemoriesError
from memories.models.embedding import DOCUMENT_PREFIX, vector_space_key
from memories.providers import choice as providers
from memories.rag.answers import MIN_SIMILARITY

PLAN_BATCHES = 32
"""Batches of ``[rag] embed_batch_size`` the local model plans at once. The index worker names the missing inputs
shortest first by an estimate (it has no tokenizer), the embedding worker counts their tokens, and the plan is
embedded in batches of equal token counts. Measured on the sample corpus with the real tokenizer, batches of 8
pad to 1.18 times their real tokens in estimate order, 1.04 with plans of 8 batches, 1.01 with plans of 32, and
1.00 in one exact order over everything; a plan of 32 batches is about a minute of work on 2 cores."""

BACKGROUND_BATCH_TOKENS = 512
"""Most tokens (padded: inputs × the longest) in one batch of the background index with the local model (one input
at least), so a search's query embedding, which waits behind the batch in flight, never waits long.
Measured with the real Q4 model on 2 threads (``ops/bench/kept_vectors.py wait``, ``docs/search-quality.md``): on
long chunks a query's p95 was 1.89 s against 2.61 s with batches of ``embed_batch_size`` = 8 chunks, for as many
chunks per second within the noise; on short notes, where 8 chunks fit in about 512 tokens, the same."""

LOCAL_RECIPE = w.InputRecipe(prefix=DOCUMENT_PREFIX)
"""EmbeddingGemma's document prompt ``title: {title} | text: `` (its model card, "Prompt instructions")."""


@dataclass
class Embedded:
    """One embedding request's outcome: float32[len(ok), dimension] bytes for the inputs at indexes ``ok``, and
    the reasons for inputs the service refused (index → reason)."""

    vectors: bytes
    dimension: int
    ok: list[int]
    failed: dict[int, str] = field(default_factory=dict)


class LocalBackend:
    """EmbeddingGemma in ``workers.embedding`` (:class:`memories.daemon.index.models.Models` loads and installs it).

    Args:
        models: the local model; batch_size: chunks per embedding batch (``[rag] embed_batch_size``);
        min_similarity: the evidence cosine for ``rag ask`` (``[rag] local_min_similarity``), ``None`` for the
        measured default :data:`memories.rag.answers.MIN_SIMILARITY` ``["local"]``.
    """

    name = "local"
    egress_url: str | None = None
    concurrency = 1
    """Batches in flight at once: one (the model uses every thread it is given)."""

    def __init__(self, models: Models, batch_size: int, min_similarity: float | None = None) -> None:
        self._models = models
        self.batch_size = batch_size
        self.min_similarity = MIN_SIMILARITY["local"] if min_similarity is None else min_similarity

    async def available(self) -> bool:
        return await self._models.installed()

    @property
    def plan_size(self) -> int:
        """``batch_size`` × :data:`PLAN_BATCHES`."""
        return self.batch_size * PLAN_BATCHES

    async def batches(self, job: Job, inputs: list[w.ModelInput], background: bool) -> list[list[int]]:
        """Positions of ``inputs`` by the token count the model sees (ties keep the plan's order), in batches of at
        most ``batch_size``; a background batch also holds at most :data:`BACKGROUND_BATCH_TOKENS` padded tokens
        (one input at least)."""
        counts = await self._models.token_counts(job, [item.text for item in inputs])
        order = sorted(range(len(inputs)), key=counts.__getitem__)
        budget = BACKGROUND_BATCH_TOKENS if background else None
        batches: list[list[int]] = []
        for position in order:
            size = len(batches[-1]) + 1 if batches else 0
            # sorted by count: this input is the batch's longest, so the batch pads to its count
            if 0 < size <= self.batch_size and (budget is None or size * counts[position] <= budget):
                batches[-1].append(position)
            else:
                batches.append([position])
        return batches

    async def space(self) -> w.VectorSpace:
        """Raises ``model_not_installed``, ``model_invalid``."""
        return w.VectorSpace(key=await self._models.space_key(), recipe=LOCAL_RECIPE)

    async def embed(self, job: Job, inputs: list[w.ModelInput]) -> Embedded:
        vectors = await self._models.embed_documents(job, [item.text for item in inputs])
        return Embedded(vectors.vectors, vectors.dimension, list(range(len(inputs))))

    async def embed_query(self, job: Job, query: str) -> bytes:
        return await self._models.embed_query(job, query)

    async def state(self) -> p.ModelState:
        return await self._models.state()

    def load_warnings(self) -> list[str]:
        return self._models.load_warnings()


class RemoteBackend:
    """A ``gemini`` or ``compatible`` embedding service, called from ``workers.remote``.

    Args:
        config: ``[rag.embedding]``; http: ``[rag.http]``; remote: the remote worker (it is handed vault text).
        default_budget: seconds a request of a job without a budget may take (``[daemon] job_budget_seconds``).
    """

    def __init__(self, config: EmbeddingConfig, http: HttpConfig, remote: WorkerHandle, default_budget: float) -> None:
        self._http = http
        self._remote = remote
        self._default_budget = default_budget
        self.config = config
        self.name = config.protocol
        self.egress_url: str | None = config.url
        self.batch_size = config.batch_size
        self._concurrency = config.concurrency
        self._proven = False
        self.min_similarity = (
            config.min_similarity if config.min_similarity is not None else MIN_SIMILARITY[config.protocol]
        )
        self.dimension = config.dimensions
        self._provider = providers.embedding(config)
        description = {
            "backend": config.protocol,
            "url": config.url,
            "model": config.model,
            "dimensions": config.dimensions if config.dimensions is not None else "fixed by the first reply",
            **self._provider.space_parts(),
        }
        self._space = w.VectorSpace(key=vector_space_key(description), recipe=self._provider.recipe())
        self._limiter = trio.CapacityLimiter(config.concurrency)

    async def available(self) -> bool:
        return True

    @property
    def concurrency(self) -> int:
        """Batches in flight at once: ``[rag.embedding] concurrency``, but one until a request has succeeded, so
        a server that states a lower batch limit does so once, before several full batches are on their way."""
        return self._concurrency if self._proven else 1

    @property
    def plan_size(self) -> int:
        """One batch per request in flight: ``batch_size`` × :attr:`concurrency`."""
        return self.batch_size * self.concurrency

    async def batches(self, job: Job, inputs: list[w.ModelInput], background: bool) -> list[list[int]]:
        """The plan's own order (the service's tokenizer is not known here) in batches of ``batch_size``, background
        or not (a service's cores are not the machine's)."""
        size = self.batch_size
        return [list(range(first, min(first + size, len(inputs)))) for first in range(0, len(inputs), size)]

    async def space(self) -> w.VectorSpace:
        return self._space

    async def embed(self, job: Job, inputs: list[w.ModelInput]) -> Embedded:
        """One request of up to ``batch_size`` inputs, at most ``concurrency`` in flight; the width of the first
        reply is kept for every later one when ``dimensions`` is not configured."""
        reply = await self._call(job, inputs, "document")
        return Embedded(reply.vectors, reply.dimension, reply.ok, dict(reply.failed))

    async def embed_query(self, job: Job, query: str) -> bytes:
        reply = await self._call(job, [w.ModelInput(self._provider.query_text(query))], "query")
        if not reply.ok:
            reason = next(iter(reply.failed.values()), "refused")
            raise MemoriesError("upstream_error", f"rag.embedding refused the query: {reason}")
        return reply.vectors

    async def _call(self, job: Job, inputs: list[w.ModelInput], task: str) -> w.RemoteVectors:
        body = w.RemoteEmbed(
            service=self.config,
            http=self._http,
            inputs=inputs,
            task=task,  # type: ignore[arg-type]
            dimension=self.dimension,
            budget_seconds=request_budget(job, self._default_budget),
        )
        async with self._limiter:
            self._remote.handed_vault_text()
            reply = await job.call(self._remote, body, budget=False, epoch=False)
        if reply.ok:
            self._proven = True
            if self.dimension is None:
                self.dimension = reply.dimension
        return reply

    async def state(self) -> p.ModelState:
        config = self.config
        return p.ModelState(
            installed=True,
            verified=True,
            space_key=self._space.key,
            path="",
            backend=config.protocol,
            remote=p.RemoteBackendState(
                protocol=config.protocol,
                url=config.url,
                model=config.model,
                dimension=self.dimension,
                api_key_env=config.api_key_env,
                key_set=bool(config.api_key_env and os.environ.get(config.api_key_env)),
            ),
        )

    def load_warnings(self) -> list[str]:
        return []


EmbeddingBackend = LocalBackend | RemoteBackend


def request_budget(job: Job, default: float) -> float:
    """Seconds a remote request of ``job`` may take: what is left of the job's budget (every attempt and wait of
    the request stays within it), or ``default`` (``[daemon] job_budget_seconds``) for a job without one."""
    if job.deadline is None:
        return default
    return max(job.deadline - trio.current_time(), 0.001)


def embedding_backend(rag: RagConfig, models: Models, remote: WorkerHandle, default_budget: float) -> EmbeddingBackend:
    """The backend ``config.toml`` selects: ``[rag.embedding]`` when present, else the local model (``models``)."""
    config = rag.embedding
    if config is None:
        return LocalBackend(models, rag.embed_batch_size, rag.local_min_similarity)
    return RemoteBackend(config, rag.http, remote, default_budget)

"""``workers.remote``: every outbound HTTP call of the daemon — the model download (R-23), remote embeddings,
generation and the learned reranker (R-28 … R-39).

Holds no keys. It handles up to :data:`THREADS` requests at once (the supervisor keeps embedding requests within
``[rag.embedding] concurrency``), so a model download never blocks ``rag ask``; all share one httpx client per
``[rag.http]``. Once it has been handed vault text the supervisor restarts it on lock, like the other plaintext
workers. API keys are read here from the environment inherited from the daemon, so they never cross a pipe. Each
request carries its job's budget as a deadline, and the worker loop's cancellation is checked before every attempt
and during every wait.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import msgspec
import numpy as np

from memories import worker_protocol as w
from memories.config import HttpConfig
from memories.errors import MemoriesError
from memories.http.api import post_json
from memories.http.client import build_client
from memories.http.retry import Deadline, RetryPolicy
from memories.models.install import InstallProgress, install_model
from memories.paths import storage_error
from memories.providers import choice
from memories.providers.capabilities import EmbedText
from memories.providers.embedding import BatchLimit, embed_remote
from memories.providers.generation import StructuredOutputLadder
from workers.loop import Context, run_worker

THREADS = 20
"""Requests handled at once: ``[rag.embedding] concurrency`` is at most 16, plus a download, an ask, a rerank."""

_clients: dict[bytes, httpx.Client] = {}
_clients_lock = threading.Lock()
_batch_limit = BatchLimit()


def _client(config: HttpConfig) -> tuple[httpx.Client, RetryPolicy]:
    """The shared client for these ``[rag.http]`` settings (one per daemon config, built on first use)."""
    settings = msgspec.msgpack.encode(config)  # the struct is mutable, so not hashable; its encoding is
    with _clients_lock:
        client = _clients.get(settings)
        if client is None:
            client = _clients[settings] = build_client(config)
    return client, RetryPolicy.from_config(config)


def _deadline(seconds: float) -> Deadline:
    return Deadline.after(
        seconds, "budget_exceeded", f"the request did not finish within the job budget ({seconds:g} s)"
    )


def download_model(request: w.DownloadModel, ctx: Context) -> w.ModelInstalled:
    """Install the manifest's files into ``dest_dir`` with progress in bytes; a full or read-only disk there is
    ``disk_full`` or ``home_read_only`` naming the folder (the partial files stay, so a run later resumes)."""

    def progress(event: InstallProgress) -> None:
        ctx.progress(event.bytes_done, event.bytes_total, "bytes", note=event.note)

    try:
        report = install_model(
            request.manifest,
            Path(request.dest_dir),
            base_url=request.base_url,
            from_dir=Path(request.from_dir) if request.from_dir else None,
            http_config=request.http,
            progress=progress,
            cancelled=ctx.cancelled,
        )
    except OSError as exc:
        refused = storage_error(exc.errno, request.dest_dir)
        if refused is None:
            raise
        raise refused from None
    return w.ModelInstalled(files=report.files)


def embed(request: w.RemoteEmbed, ctx: Context) -> w.RemoteVectors:
    """float32[len(ok), dimension] for the inputs the service embedded; refused inputs in ``failed``."""
    client, policy = _client(request.http)
    outcome = embed_remote(
        client,
        choice.embedding(request.service),
        [EmbedText(item.text, item.title) for item in request.inputs],
        task=request.task,
        dimension=request.dimension,
        limit=_batch_limit,
        policy=policy,
        deadline=_deadline(request.budget_seconds),
        cancelled=ctx.cancelled,
    )
    vectors = np.ascontiguousarray(outcome.vectors, dtype=np.float32)
    width = vectors.shape[1] if vectors.ndim == 2 else 0
    return w.RemoteVectors(vectors=vectors.tobytes(), dimension=width, ok=outcome.ok, failed=outcome.failed)


def generate(request: w.Generate, ctx: Context) -> w.GeneratedText:
    """One generation call; the reply text of a complete answer (``invalid_model_output`` otherwise).

    A refusal of the structured output asked for steps down a level and asks again, as a retry
    (:class:`~memories.providers.generation.StructuredOutputLadder`); each retry is a progress note.
    """
    client, policy = _client(request.http)
    wire = choice.generation(request.service)
    ladder = StructuredOutputLadder(wire, request.structured_output, probing=request.probing)

    def body() -> dict[str, Any]:
        return wire.request(request.user, request.labels, ladder.level)

    def fallback(status: int, message: str, error: Any) -> dict[str, Any] | None:
        return body() if ladder.refused(status, message, error) else None

    try:
        reply = post_json(
            client,
            wire.endpoint(),
            body(),
            policy=policy,
            deadline=_deadline(request.budget_seconds),
            cancelled=ctx.cancelled,
            on_retry=lambda note: ctx.progress(0, None, "seconds", note=note),
            fallback=fallback,
        )
        text = wire.text(reply)
    except MemoriesError as exc:
        if ladder.level != request.structured_output:
            exc.details["structured_output"] = ladder.level
        raise
    return w.GeneratedText(text=text, structured_output=ladder.level)


def rerank_documents(request: w.Rerank, ctx: Context) -> w.RerankOrder:
    """The learned reranker's checked order of the candidates."""
    client, policy = _client(request.http)
    reranker = choice.rerank(request.service)
    body = reranker.request(request.query, request.documents, request.top_n)
    reply = post_json(
        client,
        reranker.endpoint(),
        body,
        policy=policy,
        deadline=_deadline(request.budget_seconds),
        cancelled=ctx.cancelled,
    )
    return w.RerankOrder(order=reranker.order(reply, len(request.documents), request.top_n))


if __name__ == "__main__":
    run_worker(
        "remote",
        {
            w.DownloadModel: download_model,
            w.RemoteEmbed: embed,
            w.Generate: generate,
            w.Rerank: rerank_documents,
        },
        threads=THREADS,
    )

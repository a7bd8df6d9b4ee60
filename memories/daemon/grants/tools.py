"""MCP tool calls (:class:`~memories.protocol.Granted`): the grant's checks, then the owner's search or read on the
grant's vault only, cut to the result cap (:mod:`memories.caps`).

Revoke, expiry and lock reach calls in flight (R-44): a revoke cuts the jobs of the grant's running calls at once
(:meth:`Tools.revoked`), and the grant's check (:meth:`~memories.daemon.grants.registry.Grants.guard`: auth epoch,
expiry by the daemon's clock, lock) is one of the guards of each job's acceptance check
(:mod:`memories.daemon.core.jobs`), so a result that finishes after the grant stopped holding is dropped, never sent.
A read runs no job; its page is checked the same way before it is sent.

A status request (:class:`~memories.protocol.ToolStatus`, the MCP server's instructions) is answered from what
the daemon already knows: ``rag status``'s counts (the index worker's cache only when it is warm; nothing is built
or embedded) and whether ``[rag.generation]`` leaves the machine. Any valid grant may ask, whatever its scope; while
the home is locked the answer says only that (and the generation kind, from the config).

No existence oracle: a record that is not retrieval-eligible (private, credential, file; judged on its latest
revision and on the revision asked for), a deleted one, one of another vault and an id that never existed all
give the same ``record_not_found`` message. Searches only ever see eligible records, so their counts reveal
nothing outside the grant.
"""

from __future__ import annotations

from typing import Literal

import msgspec
import trio

from memories import protocol as p
from memories.caps import SNIPPET_STEPS, Cost, cost_of, cut_text, fit_hits, page
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.egress import leaves_device
from memories.daemon.core.jobs import Job
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.grants.registry import Grants
from memories.daemon.index.status import IndexStatus
from memories.daemon.search.ask import Asking
from memories.daemon.search.retrieval import Retrieval
from memories.daemon.search.spec import SearchSpec
from memories.errors import MemoriesError
from memories.vault.catalog import split_tags
from memories.vault.store import VaultRow
from memories.vault.views import OpenedRevision

_SCOPE: dict[type, p.GrantScope | None] = {
    p.ToolSearch: "search",
    p.ToolRead: "read",
    p.ToolRetrieve: "retrieve",
    p.ToolAsk: "ask",
    p.ToolStatus: None,
}


NO_GENERATION = (
    "memory_ask needs a generation service, and the user has not configured one in Memories; use memory_retrieve "
    "and answer from the chunks it returns, citing their labels"
)
"""What an AI client is told when ``[rag.generation]`` is missing: what it can do instead, in its own tools' names,
and nothing of the user's machine (no config path, no CLI command)."""

NO_MODEL = (
    'the user has not installed the embedding model in Memories, so only mode "bm25" searches this vault; '
    'call again with mode "bm25"'
)
"""``model_not_installed`` told to an AI client: in its tools' arguments, without the model's folder or the CLI
command the user is told (each channel names only its own arguments)."""


class Tools:
    """The daemon's side of ``memories mcp serve``.

    Args:
        store: the store gate; grants: the grants; retrieval: the owner's searches and asking: ``rag ask``, run on
        the grant's vault; index_status: ``rag status``'s counts (for a status request).
    """

    def __init__(
        self, store: StoreGate, grants: Grants, retrieval: Retrieval, asking: Asking, index_status: IndexStatus
    ) -> None:
        self._store = store
        self._grants = grants
        self._retrieval = retrieval
        self._asking = asking
        self._index_status = index_status
        self._running: dict[str, set[Job]] = {}
        """Grant id -> the jobs of its calls in flight."""

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.Granted: self.call}

    def revoked(self, grant_ids: list[str]) -> None:
        """The grants were revoked: cut the jobs of their calls in flight now (``grant_revoked``)."""
        for grant_id in grant_ids:
            for job in list(self._running.get(grant_id, ())):
                job.cancel("grant_revoked")

    async def call(self, request: p.Granted, ctx: RequestContext) -> p.Result:
        """Authorize ``request.call`` (:meth:`~memories.daemon.grants.registry.Grants.authorize`), answer it, and
        accept the answer only if the grant still holds.

        Raises:
            MemoriesError: the grant's failures (also ``grant_revoked``, ``grant_expired`` or ``vault_locked`` for a
                call the grant stopped covering while it ran), then those of the search or read
                (``record_not_found``, ``limit_too_large``, ``query_too_long``, ...).
        """
        if isinstance(request.call, p.ToolStatus):
            return await self._status(request.token)
        authorized = await self._store.run(self._grants.authorize, request.token, _SCOPE[type(request.call)])
        guard = self._grants.guard(authorized)
        running = self._running.setdefault(authorized.grant_id, set())
        mine: list[Job] = []

        def attach(job: Job) -> None:
            job.guards.append(guard)  # checked by the gate just before the job's result is accepted
            running.add(job)
            mine.append(job)
            ctx.attach(job)

        call_ctx = RequestContext(attach)
        try:
            result = await self._answer(request.call, authorized.vault, call_ctx)
        except MemoriesError as exc:
            if exc.code == "model_not_installed":
                raise MemoriesError(exc.code, NO_MODEL) from None
            raise
        finally:
            ctx.warnings.extend(call_ctx.warnings)
            running.difference_update(mine)
            if not running:
                self._running.pop(authorized.grant_id, None)
        stopped = guard()  # a read runs no job; for a search this repeats the gate's last check
        if stopped is not None:
            raise stopped
        return result

    async def _status(self, token: str) -> p.ToolStatusReport:
        url = self._asking.egress_url
        generation: Literal["none", "device", "remote"] = "none"
        if url is not None:
            generation = "remote" if leaves_device(url) else "device"
        try:
            authorized = await self._store.run(self._grants.authorize, token, None)
        except MemoriesError as exc:
            if exc.code != "vault_locked":  # the token is valid (it is judged before the lock)
                raise
            return p.ToolStatusReport(locked=True, generation=generation)
        state = await self._index_status.status(p.RagStatus(vault=authorized.vault.id), RequestContext())
        embedded = None
        if state.cache == "warm" and state.model.space_key is not None and state.embedded is not None:
            embedded = state.embedded / state.chunks if state.chunks else 1.0
        return p.ToolStatusReport(
            locked=False,
            generation=generation,
            vault=authorized.vault.name,
            scope=authorized.scope,
            records=state.records,
            model=state.model.installed,
            embedded=embedded,
        )

    async def _answer(self, call: p.ToolCall, vault: VaultRow, ctx: RequestContext) -> p.Result:
        if isinstance(call, p.ToolSearch):
            found = await self._retrieval.record_search(vault, SearchSpec.of(call), ctx)
            records, omitted = fit_hits(
                found.results, _overhead(p.ToolSearchReport(results=[], truncated=True, omitted=0))
            )
            return p.ToolSearchReport(results=records, truncated=omitted > 0, omitted=omitted)
        if isinstance(call, p.ToolRetrieve):
            report = await self._retrieval.report(vault, SearchSpec.of(call), ctx)
            empty = p.ToolRetrieveReport(
                mode=report.mode,
                match_mode=report.match_mode,
                results=[],
                truncated=True,
                omitted=0,
                weak_matches=report.weak_matches,
            )
            hits, omitted = fit_hits(report.results, _overhead(empty))
            return msgspec.structs.replace(empty, results=hits, truncated=omitted > 0, omitted=omitted)
        if isinstance(call, p.ToolAsk):
            if not self._asking.configured:  # the owner's message names `rag ask` and the daemon's config file
                raise MemoriesError("generation_not_configured", NO_GENERATION)
            answer = await self._asking.answer(vault.id, SearchSpec.of(call), ctx)
            return fit_answer(answer)
        assert isinstance(call, p.ToolRead)
        try:
            view = await self._store.read_eligible(vault, call.id, call.revision)
        except MemoriesError as exc:
            if exc.code == "record_not_found":
                raise _not_found(call) from None
            raise
        if view is None:
            raise _not_found(call)
        return await trio.to_thread.run_sync(_read_page, view, call)


def fit_answer(report: p.AskReport) -> p.ToolAskReport:
    """The report whole when it fits the cap; else its citations' texts cut to shorter snippets in turn
    (:data:`~memories.caps.SNIPPET_STEPS`), and, as a last resort (citations whose titles alone fill the cap), the
    answer cut further. The daemon's ask has already cut the answer to the answer cap, the same for the CLI."""
    fitted = p.ToolAskReport(
        status=report.status,
        answer=report.answer,
        answer_truncated=report.answer_truncated,
        citations=report.citations,
        mode=report.mode,
        reason=report.reason,
        truncated=report.answer_truncated,
        omitted=0,
    )
    if cost_of(fitted).fits():
        return fitted
    for limit in SNIPPET_STEPS:
        citations = [msgspec.structs.replace(c, text=cut_text(c.text, limit)) for c in report.citations]
        shortened = sum(len(c.text) > limit for c in report.citations)
        fitted = msgspec.structs.replace(fitted, citations=citations, truncated=True, omitted=shortened)
        if cost_of(fitted).fits():
            return fitted
    answer = fitted.answer or ""
    end = page(answer, 0, _overhead(msgspec.structs.replace(fitted, answer="")))
    return msgspec.structs.replace(fitted, answer=cut_text(answer, end - 1), answer_truncated=True)


def _overhead(empty: msgspec.Struct) -> Cost:
    return cost_of(empty) + Cost(0, 16)  # the digits of "omitted" and "truncated": false vs true


def _not_found(call: p.ToolRead) -> MemoriesError:
    revision = f" revision {call.revision}" if call.revision is not None else ""
    return MemoriesError("record_not_found", f"no record {call.id!r}{revision} is readable with this grant")


def _read_page(view: OpenedRevision, call: p.ToolRead) -> p.ReadPage:
    """One page of an eligible revision (in a thread: a body is up to 2 MiB)."""
    data = view.body.encode("utf-8")
    if not 0 <= call.offset <= len(data) or (call.offset < len(data) and 0x80 <= data[call.offset] < 0xC0):
        raise MemoriesError(
            "invalid_argument",
            f"offset: {call.offset} is not the start of a character within the body ({len(data)} bytes)",
        )
    start_char = len(data[: call.offset].decode("utf-8"))
    first = p.ReadPage(
        id=view.id,
        revision=view.revision,
        kind=view.kind,
        title=view.title,
        source=view.meta.get("source"),
        tags=split_tags(view.meta.get("tags")),
        created=view.created,
        updated=view.updated,
        offset=call.offset,
        next_offset=len(data),
        total_bytes=len(data),
        truncated=True,
        text="",
    )
    end_char = page(view.body, start_char, cost_of(first))
    text = view.body[start_char:end_char]
    next_offset = call.offset + len(text.encode("utf-8"))
    more = next_offset < len(data)
    return msgspec.structs.replace(first, text=text, next_offset=next_offset if more else None, truncated=more)

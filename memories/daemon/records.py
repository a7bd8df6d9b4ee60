"""Vault and record requests: ``vault create|list|show|policy|rename|delete`` and
``memory add|read|list|update|delete|move``.

Each runs its store work through the store gate (:class:`StoreGate`) and marks the vault changed afterwards, so
every cache of it is stale from the next request on (R-19); an add, update or move also tells the background index
(:meth:`memories.daemon.index.indexing.Indexing.start_reindex`), which embeds the new text by itself (``[rag]
auto_index``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.filters import listed, search_filter
from memories.daemon.core.jobs import Epochs, JobManager
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.core.views import record_summary, record_view, vault_info
from memories.daemon.core.workers import WorkerHandle
from memories.daemon.grants.registry import Grants
from memories.errors import MemoriesError
from memories.vault.store import VaultRow


class Records:
    """The vault and record requests of the daemon; every one needs the home unlocked (``vault_locked``).

    Args:
        store: the store gate; epochs: bumped by every change; jobs: a deleted vault's jobs are cancelled;
        grants: a deleted vault's grants are revoked; index: the index worker, which drops a deleted vault's cache;
        changed: "a vault changed, keep it embedded" (:meth:`memories.daemon.index.indexing.Indexing.start_reindex`).
    """

    def __init__(
        self,
        store: StoreGate,
        epochs: Epochs,
        jobs: JobManager,
        grants: Grants,
        index: WorkerHandle,
        changed: Callable[[VaultRow], Awaitable[object]],
    ) -> None:
        self._changed = changed
        self._store = store
        self._epochs = epochs
        self._jobs = jobs
        self._grants = grants
        self._index = index

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {
            p.VaultCreate: self._vault_create,
            p.VaultList: self._vault_list,
            p.VaultShow: self._vault_show,
            p.VaultPolicy: self._vault_policy,
            p.VaultRename: self._vault_rename,
            p.VaultDelete: self._vault_delete,
            p.MemoryAdd: self._memory_add,
            p.MemoryRead: self._memory_read,
            p.MemoryList: self._memory_list,
            p.MemoryUpdate: self._memory_update,
            p.MemoryDelete: self._memory_delete,
            p.MemoryMove: self._memory_move,
        }

    async def _vault_create(self, request: p.VaultCreate, ctx: RequestContext) -> p.Result:
        return vault_info(await self._store.create_vault(request.name, request.device_only))

    async def _vault_list(self, request: p.VaultList, ctx: RequestContext) -> p.Result:
        """Works while locked too: the device-only policies are then shown as stored, unverified (each is proven by
        its vault's sealed key once unlocked, :meth:`Keyring.vault_key`)."""
        if self._store.locked:
            if not self._store.initialized:
                self._store.check_unlocked()  # not_initialized
            ctx.warnings.append(
                "the home is locked: device-only policies are shown as stored and are verified only after unlock"
            )
        return p.VaultListing(vaults=[vault_info(v) for v in await self._store.vaults()])

    async def _vault_show(self, request: p.VaultShow, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        count = await self._store.count_records(vault)
        return p.VaultDetail(
            id=vault.id, name=vault.name, device_only=vault.device_only, created=vault.created, records=count
        )

    async def _vault_policy(self, request: p.VaultPolicy, ctx: RequestContext) -> p.Result:
        """Set the device-only policy. A change cuts the vault's jobs (``policy_changed``) and answers once they
        have ended: a job that started under the old policy sends nothing more, and a reply in flight is dropped.
        The policy is stored first, so a job that starts meanwhile sees it at its next remote step
        (:func:`memories.daemon.core.egress.check_current_policy`)."""
        vault = await self._store.resolve_unlocked(request.vault)
        changed = vault.device_only != request.device_only
        vault = await self._store.set_policy(vault, request.device_only)
        self._epochs.bump(vault.id)
        if changed:
            await self._jobs.cut_vault(vault.id, "policy_changed")
        return vault_info(vault)

    async def _vault_rename(self, request: p.VaultRename, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return vault_info(await self._store.rename_vault(vault, request.name))

    async def _vault_delete(self, request: p.VaultDelete, ctx: RequestContext) -> p.Result:
        """Cancel the vault's jobs, revoke its grants, delete it with its key and records, and drop its cache in the
        index worker. Grants are revoked first: a failure in between leaves a vault no AI client can reach."""
        vault = await self._store.resolve_unlocked(request.vault)
        self._jobs.cancel_where("cancelled", vault.id)
        records, revoked = await self._store.delete_vault(vault, lambda: len(self._grants.revoke_vault(vault.id)))
        self._epochs.bump(vault.id)
        try:
            await self._index.call(w.IndexDrop(vault=vault.id))
        except MemoriesError as exc:  # a worker that died (or was refused) holds no cache
            if exc.code not in ("worker_crashed", "restart_needed"):
                raise
        return p.VaultDeleted(id=vault.id, name=vault.name, records=records, revoked_grants=revoked)

    async def _memory_add(self, request: p.MemoryAdd, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        record_id, revision = await self._store.add(
            vault, request.kind, request.sensitivity, request.title, request.body, request.meta
        )
        self._epochs.bump(vault.id)
        await self._changed(vault)
        return p.RecordRef(id=record_id, revision=revision)

    async def _memory_read(self, request: p.MemoryRead, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return record_view(await self._store.read(vault, request.id, request.revision))

    async def _memory_list(self, request: p.MemoryList, ctx: RequestContext) -> p.Result:
        search = search_filter(request)
        vault = await self._store.resolve_unlocked(request.vault)
        rows = listed(await self._store.summaries(vault, request.kind), search)
        return p.RecordListing(records=[record_summary(r) for r in rows])

    async def _memory_update(self, request: p.MemoryUpdate, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        record_id, revision = await self._store.update(
            vault,
            request.id,
            title=request.title,
            body=request.body,
            sensitivity=request.sensitivity,
            meta=request.meta,
            revision=request.revision,
        )
        self._epochs.bump(vault.id)
        await self._changed(vault)
        return p.RecordRef(id=record_id, revision=revision)

    async def _memory_delete(self, request: p.MemoryDelete, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        await self._store.delete(vault, request.id)
        self._epochs.bump(vault.id)
        return p.Done(ok=True)

    async def _memory_move(self, request: p.MemoryMove, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        target = await self._store.resolve_unlocked(request.to)
        revision = await self._store.move(vault, request.id, target)
        self._epochs.bump(vault.id)
        self._epochs.bump(target.id)
        await self._changed(target)
        return p.RecordRef(id=request.id, revision=revision)

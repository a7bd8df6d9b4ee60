"""Vault and record requests: ``vault create|list|show|policy|rename|delete`` and
``memory add|read|list|update|delete|move``.

Each runs its store work in the store's thread (:meth:`Daemon.db`) and marks the vault changed afterwards, so
every cache of it is stale from the next request on (R-19).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memories import protocol as p
from memories import worker_protocol as w
from memories.daemon.server import Connection
from memories.errors import MemoriesError
from memories.store import VaultRow

if TYPE_CHECKING:
    from memories.daemon.supervisor import Daemon, Handler


class Records:
    """The vault and record requests of the daemon; every one needs the home unlocked (``vault_locked``)."""

    def __init__(self, daemon: Daemon) -> None:
        self._daemon = daemon

    def handlers(self) -> dict[type, Handler]:
        """Request type -> handler, for the daemon's dispatch table."""
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

    async def _vault_create(self, request: p.VaultCreate, conn: Connection) -> p.Result:
        row = await self._daemon.db(self._daemon.vaults.create, request.name, request.device_only)
        return _vault_info(row)

    async def _vault_list(self, request: p.VaultList, conn: Connection) -> p.Result:
        """Works while locked too: the device-only policies are then shown as stored, unverified (each is proven by
        its vault's sealed key once unlocked, :meth:`Keyring.vault_key`)."""
        keyring = self._daemon.keyring
        if keyring.locked:
            if not await self._daemon.db(lambda: keyring.initialized):
                keyring.master()  # not_initialized
            conn.warnings.append(
                "the home is locked: device-only policies are shown as stored and are verified only after unlock"
            )
        return p.VaultListing(vaults=[_vault_info(v) for v in await self._daemon.db(self._daemon.vaults.list)])

    async def _vault_show(self, request: p.VaultShow, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        count = await self._daemon.db(self._daemon.vaults.count_records, vault)
        return p.VaultDetail(
            id=vault.id, name=vault.name, device_only=vault.device_only, created=vault.created, records=count
        )

    async def _vault_policy(self, request: p.VaultPolicy, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        vault = await self._daemon.db(self._daemon.vaults.set_policy, vault, request.device_only)
        self._daemon.content_changed(vault)
        return _vault_info(vault)

    async def _vault_rename(self, request: p.VaultRename, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        return _vault_info(await self._daemon.db(self._daemon.vaults.rename, vault, request.name))

    async def _vault_delete(self, request: p.VaultDelete, conn: Connection) -> p.Result:
        """Cancel the vault's jobs, revoke its grants, delete it with its key and records, and drop its cache in the
        index worker. Grants are revoked first: a failure in between leaves a vault no AI client can reach."""
        daemon = self._daemon
        vault = await daemon.resolve_unlocked(request.vault)
        daemon.jobs.cancel_where("cancelled", vault.id)

        def delete() -> tuple[int, int]:
            revoked = daemon.grants.revoke_vault(vault.id)
            return daemon.vaults.delete_vault(vault), len(revoked)

        records, revoked = await daemon.db(delete)
        daemon.content_changed(vault)
        try:
            await daemon.workers["index"].call(w.IndexDrop(vault=vault.id))
        except MemoriesError as exc:  # a worker that died (or was refused) holds no cache
            if exc.code not in ("worker_crashed", "restart_needed"):
                raise
        return p.VaultDeleted(id=vault.id, name=vault.name, records=records, revoked_grants=revoked)

    async def _memory_add(self, request: p.MemoryAdd, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        record_id, revision = await self._daemon.db(
            self._daemon.vaults.add,
            vault,
            request.kind,
            request.sensitivity,
            request.title,
            request.body,
            request.meta,
        )
        self._daemon.content_changed(vault)
        return p.RecordRef(id=record_id, revision=revision)

    async def _memory_read(self, request: p.MemoryRead, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        return await self._daemon.db(self._daemon.vaults.read, vault, request.id, request.revision)

    async def _memory_list(self, request: p.MemoryList, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        return p.RecordListing(records=await self._daemon.db(self._daemon.vaults.summaries, vault, request.kind))

    async def _memory_update(self, request: p.MemoryUpdate, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)

        def update() -> tuple[str, int]:
            return self._daemon.vaults.update(
                vault,
                request.id,
                title=request.title,
                body=request.body,
                sensitivity=request.sensitivity,
                meta=request.meta,
                revision=request.revision,
            )

        record_id, revision = await self._daemon.db(update)
        self._daemon.content_changed(vault)
        return p.RecordRef(id=record_id, revision=revision)

    async def _memory_delete(self, request: p.MemoryDelete, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        await self._daemon.db(self._daemon.vaults.delete, vault, request.id)
        self._daemon.content_changed(vault)
        return p.Done(ok=True)

    async def _memory_move(self, request: p.MemoryMove, conn: Connection) -> p.Result:
        vault = await self._daemon.resolve_unlocked(request.vault)
        target = await self._daemon.resolve_unlocked(request.to)
        revision = await self._daemon.db(self._daemon.vaults.move, vault, request.id, target)
        self._daemon.content_changed(vault)
        self._daemon.content_changed(target)
        return p.RecordRef(id=request.id, revision=revision)


def _vault_info(row: VaultRow) -> p.VaultInfo:
    return p.VaultInfo(id=row.id, name=row.name, device_only=row.device_only)

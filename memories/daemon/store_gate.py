"""The store gate: the SQLite store, the keyring and the vaults behind one limiter.

Every store call runs in a thread, one at a time (the SQLite connection is shared across threads), through
:meth:`StoreGate.run`; nothing reads SQLite on the event loop. Lock takes the same limiter
(:meth:`StoreGate.exclusive`), so it never interleaves with a store call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import trio

from memories.daemon.keyring import Keyring
from memories.daemon.vaults import Vaults
from memories.errors import MemoriesError
from memories.store import Store, VaultRow

T = TypeVar("T")


class StoreGate:
    """The store and what reads it, one call at a time.

    Args:
        store: the home's database.
        keyring: the keys over ``store``.
        vaults: vault and record operations over ``store``.
    """

    def __init__(self, store: Store, keyring: Keyring, vaults: Vaults) -> None:
        self.store = store
        self.keyring = keyring
        self.vaults = vaults
        self.limiter = trio.CapacityLimiter(1)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run a blocking store call in a thread, one at a time."""
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def exclusive(self) -> trio.CapacityLimiter:
        """``async with gate.exclusive():`` — no store call runs meanwhile (lock)."""
        return self.limiter

    @property
    def locked(self) -> bool:
        """No keys are held (in memory: never reads the store)."""
        return self.keyring.locked

    async def load(self) -> None:
        """Read what the keyring needs to know before the first request (whether the home is initialized)."""
        await self.run(self.keyring.load)

    async def resolve(self, ref: str) -> VaultRow:
        """The vault named by id or name (works while locked).

        Raises:
            MemoriesError: ``not_initialized``, ``vault_not_found``, ``ambiguous_vault``.
        """
        if not self.keyring.initialized:
            raise MemoriesError("not_initialized", "this home has no key hierarchy yet; run `memories init`")
        return await self.run(self.vaults.resolve, ref)

    async def resolve_unlocked(self, ref: str) -> VaultRow:
        """:meth:`resolve`, after checking the home is unlocked, with the vault's device-only policy proven by its
        sealed key (R-41).

        Raises:
            MemoriesError: ``vault_locked``, ``integrity_error`` (a policy changed outside Memories) and what
                :meth:`resolve` raises.
        """
        self.keyring.master()
        vault = await self.resolve(ref)
        await self.run(self.keyring.vault_key, vault)
        return vault

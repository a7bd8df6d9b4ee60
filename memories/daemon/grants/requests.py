"""``grant create|list|revoke``: the owner's grant requests (the grants themselves:
:mod:`memories.daemon.grants.registry`)."""

from __future__ import annotations

from memories import protocol as p
from memories.daemon.core.context import Handlers, RequestContext
from memories.daemon.core.store_gate import StoreGate
from memories.daemon.grants.registry import Grants
from memories.daemon.grants.tools import Tools
from memories.errors import MemoriesError


class GrantRequests:
    """The grant requests of the daemon.

    Args:
        store: the store gate (grants run in its thread); grants: the grants; tools: a revoke cuts the jobs of the
        grant's calls in flight (:meth:`Tools.revoked`).
    """

    def __init__(self, store: StoreGate, grants: Grants, tools: Tools) -> None:
        self._store = store
        self._grants = grants
        self._tools = tools

    def handlers(self) -> Handlers:
        """The requests this module answers."""
        return {p.GrantCreate: self._create, p.GrantList: self._list, p.GrantRevoke: self._revoke}

    async def _create(self, request: p.GrantCreate, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve_unlocked(request.vault)
        return await self._store.run(self._grants.create, vault, request.client, list(request.scope), request.expires)

    async def _list(self, request: p.GrantList, ctx: RequestContext) -> p.Result:
        vault = await self._store.resolve(request.vault) if request.vault is not None else None
        return p.GrantListing(grants=await self._store.run(self._grants.listing, vault))

    async def _revoke(self, request: p.GrantRevoke, ctx: RequestContext) -> p.Result:
        if (request.id is None) == (request.token is None):
            raise MemoriesError("invalid_argument", "revoke a grant by its id or by its token, not both or neither")
        revoked = await self._store.run(self._grants.revoke, request.id, request.token)
        self._tools.revoked([revoked.id])
        return p.GrantListing(grants=[revoked])

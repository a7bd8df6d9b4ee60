"""Device-only vaults (R-41): no step sends their data to a non-loopback model endpoint.

A request that would hand vault text to an endpoint (embedding chunks or a query, rerank, generation) asks
:func:`refuse_device_only` first, before a job starts, so a refusal means not one byte left. A job runs for a
while (``rag index --background`` for hours), and the policy may change meanwhile: a change cuts the vault's jobs
(``policy_changed``, :meth:`memories.daemon.core.jobs.JobManager.cut_vault`), and every remote step (each embedding
batch, query embedding, rerank and generation) also asks :func:`check_current_policy`, which reads the policy as
stored now, right before the request is built: a job that started from a vault row read before the change sends
nothing either. Local inference and loopback services (``127.0.0.0/8``, ``::1``, ``localhost``) are allowed.
"""

from __future__ import annotations

import urllib.parse

from memories.daemon.core.store_gate import StoreGate
from memories.errors import MemoriesError
from memories.http.urls import is_loopback_host
from memories.vault.store import VaultRow


def leaves_device(url: str | None) -> bool:
    """True when ``url`` names a non-loopback host (``None``: the model runs in the daemon)."""
    return url is not None and not is_loopback_host(urllib.parse.urlsplit(url).hostname)


def refuse_device_only(vault: VaultRow, url: str | None, table: str) -> None:
    """Raise for a device-only vault whose data would go to ``url`` (the ``table``'s endpoint, for the message).

    Raises:
        MemoriesError: ``device_only_vault`` naming the vault, the table and the host.
    """
    if vault.device_only and leaves_device(url):
        host = urllib.parse.urlsplit(url).hostname if url else None
        raise MemoriesError(
            "device_only_vault",
            f"vault {vault.name} is device-only: its data may not go to {host} ([{table}] url); use a loopback "
            "service or the local model, or `memories vault policy VAULT --device-only off`",
            {"vault": vault.id, "table": table},
        )


async def check_current_policy(store: StoreGate, vault: VaultRow, url: str | None, table: str) -> None:
    """Before a remote step of a job on ``vault``: :func:`refuse_device_only` with the vault's policy as stored now
    (proven by its sealed key), not as it was when the job started. No store call when ``url`` is loopback or
    ``None``.

    Raises:
        MemoriesError: ``device_only_vault``; ``vault_locked``, ``vault_not_found``, ``integrity_error``.
    """
    if leaves_device(url):
        refuse_device_only(await store.resolve_unlocked(vault.id), url, table)

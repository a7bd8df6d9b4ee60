"""Vaults over their limits (issue 28 item 1): refused at once, with the figures they have now and the setting to
raise, and never at the cost of another index build.

A vault whose records add up to more than ``[rag] max_chunks`` chunks or ``max_text_bytes`` bytes of text
(:class:`~memories.limits.IndexLimits`) keeps every record (``rag ingest`` and a watch store every note), but the
index worker holds no cache of it, so it cannot be searched. Finding that out costs a build up to the limit (the
worker analyses every batch until one crosses it) and a count of the rest (:class:`~memories.worker_protocol.
IndexMeasure`: chunked, not analysed), once; the figures are then kept per vault revision:

- in memory, per vault epoch (:class:`OverLimits`): every later search, ``memory search``, ``rag index`` or refresh
  at that epoch is refused before it reaches the index worker, at the cost of a dictionary look-up;
- sealed in the home, in the vault's index snapshot row (:mod:`memories.vault.snapshots`: the figures in place of
  the worker's bytes, bound to the records' head revisions), so that after a lock, a restart or an eviction the
  first refusal costs one unsealing of a few bytes, not a build. With ``[rag] keep_index = false`` nothing is
  written and the figures are kept in memory only.

A change of the vault (a new epoch; new head revisions) makes the figures stale: the next search measures again.
"""

from __future__ import annotations

from typing import Any

from memories.daemon.core.jobs import VaultJob
from memories.errors import MemoriesError
from memories.limits import SETTINGS, IndexLimits, VaultFigures
from memories.vault.store import VaultRow

_UNITS = {"chunks": "chunks", "text_bytes": "bytes of text and metadata"}


def figures_of(details: dict[str, Any]) -> VaultFigures:
    """The figures a ``vault_too_large`` of the index worker carries (``details``: ``chunks``, ``text_bytes``;
    older or fake workers give only ``limit`` and ``value``)."""
    value = int(details.get("value", 0))
    chunks = details.get("chunks", value if details.get("limit") == "chunks" else 0)
    text_bytes = details.get("text_bytes", value if details.get("limit") == "text_bytes" else 0)
    return VaultFigures(int(chunks), int(text_bytes))


def too_large_error(vault: VaultRow, figures: VaultFigures, limits: IndexLimits) -> MemoriesError:
    """The one ``vault_too_large`` of a vault over ``limits``: by vault name, with what its records add up to now,
    how far over which limit, and the way down or up.

    ``details``: ``vault`` (name), ``vault_id``, ``limit`` (``chunks`` | ``text_bytes``), ``max``, ``value``,
    ``over`` (``value - max``), ``chunks``, ``text_bytes`` and ``setting`` (the ``config.toml`` key to raise).
    """
    limit = limits.over(figures) or "chunks"
    maximum = limits.chunks if limit == "chunks" else limits.text_bytes
    value = figures.chunks if limit == "chunks" else figures.text_bytes
    setting = SETTINGS[limit]
    table, key = setting.split(".")
    return MemoriesError(
        "vault_too_large",
        f"vault {vault.name!r} holds {figures.chunks:,} chunks and {figures.text_bytes:,} bytes of text and metadata, "
        f"{value - maximum:,} {_UNITS[limit]} over the limit of {maximum:,} ([{table}] {key}); every record is "
        f"kept, but searches fail until records are deleted or moved to another vault (`memory move`), or "
        f"{key} is raised in config.toml and the daemon restarted",
        {
            "vault": vault.name,
            "vault_id": vault.id,
            "limit": limit,
            "max": maximum,
            "value": value,
            "over": value - maximum,
            "chunks": figures.chunks,
            "text_bytes": figures.text_bytes,
            "setting": setting,
        },
    )


class OverLimits:
    """The figures of each vault found over ``limits``, at the vault epoch they were measured at.

    Attributes:
        limits: the per-vault limits (``[rag] max_chunks`` …).
        measured: vaults measured over the limits since the daemon started (each cost a build; for tests).
    """

    def __init__(self, limits: IndexLimits) -> None:
        self.limits = limits
        self._known: dict[str, tuple[int, VaultFigures, MemoriesError]] = {}
        self.measured = 0

    def check(self, job: VaultJob, vault: VaultRow) -> None:
        """Refuse at once when the vault was found over its limits at the job's epoch.

        Raises:
            MemoriesError: ``vault_too_large`` (:func:`too_large_error`).
        """
        known = self._known.get(vault.id)
        if known is not None and known[0] == job.epoch:
            raise known[2]

    def refuse(self, vault: VaultRow, epoch: int, figures: VaultFigures) -> MemoriesError:
        """Keep ``figures`` as the vault's at ``epoch``; the error to raise."""
        error = too_large_error(vault, figures, self.limits)
        self._known[vault.id] = (epoch, figures, error)
        return error

    def within(self, vault: VaultRow) -> None:
        """The vault's cache was built within the limits: forget its figures."""
        self._known.pop(vault.id, None)

    def last(self, vault: VaultRow) -> MemoriesError | None:
        """The vault's refusal as last measured (it may have changed since), for ``rag status``."""
        known = self._known.get(vault.id)
        return None if known is None else known[2]

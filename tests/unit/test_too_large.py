"""How a vault over its limits is told: by name, what its records add up to, how far over which limit, and the
setting to raise (issue 28 item 1)."""

from __future__ import annotations

from memories.daemon.index.over_limit import figures_of, too_large_error
from memories.limits import IndexLimits, VaultFigures
from memories.vault.store import VaultRow

VAULT = VaultRow(id="4f0c9e2a7d1b3c55", name="over", device_only=False, created=0.0, wrapped_key=b"")


def test_a_refusal_says_what_the_vault_holds_how_far_over_and_which_setting_to_raise() -> None:
    error = too_large_error(VAULT, VaultFigures(10_027, 1_234_567), IndexLimits.r21())
    assert error.message.startswith(
        "vault 'over' holds 10,027 chunks and 1,234,567 bytes of text and metadata, 27 chunks over the limit of "
        "10,000 ([rag] max_chunks); every record is kept, but searches fail until records are deleted"
    )
    assert "max_chunks is raised in config.toml" in error.message
    assert error.details == {
        "vault": "over",
        "vault_id": VAULT.id,
        "limit": "chunks",
        "max": 10_000,
        "value": 10_027,
        "over": 27,
        "chunks": 10_027,
        "text_bytes": 1_234_567,
        "setting": "rag.max_chunks",
    }


def test_a_vault_over_the_text_limit_only_names_max_text_bytes() -> None:
    limits = IndexLimits(chunks=100_000, text_bytes=1_000_000)
    error = too_large_error(VAULT, VaultFigures(5_000, 1_500_000), limits)
    assert error.details["limit"] == "text_bytes" and error.details["setting"] == "rag.max_text_bytes"
    assert "500,000 bytes of text and metadata over the limit of 1,000,000 ([rag] max_text_bytes)" in error.message


def test_the_figures_of_a_worker_refusal() -> None:
    assert figures_of({"limit": "chunks", "max": 5, "value": 9, "chunks": 9, "text_bytes": 40}) == VaultFigures(9, 40)
    assert figures_of({"limit": "chunks", "max": 5, "value": 9}) == VaultFigures(9, 0)  # a fake worker's

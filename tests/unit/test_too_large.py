"""How a vault over the R-21 limits is told: by name, how far over, and whether records were left uncounted."""

from __future__ import annotations

from memories.daemon.index.feed import too_large_error
from memories.errors import MemoriesError
from memories.vault.store import VaultRow

VAULT = VaultRow(id="4f0c9e2a7d1b3c55", name="over", device_only=False, created=0.0, wrapped_key=b"")
REFUSED = MemoriesError(
    "vault_too_large", "vault 4f0c… would hold 10,027 chunks", {"limit": "chunks", "max": 10_000, "value": 10_027}
)


def test_a_refusal_with_every_record_counted_says_how_far_over() -> None:
    error = too_large_error(VAULT, REFUSED)
    assert error.message.startswith("vault 'over' would hold 10,027 chunks, 27 over the limit of 10,000; ")
    assert error.details["over"] == 27 and error.details["pending"] == 0


def test_a_refusal_before_the_last_batch_says_at_least_and_what_was_not_counted() -> None:
    """A new user told '27 over' deleted 42 notes and was refused again: 1,885 chunks over, counted batch by batch,
    the sync stopped at the first batch over the limit."""
    error = too_large_error(VAULT, REFUSED, pending=1_234)
    assert error.message.startswith(
        "vault 'over' would hold at least 10,027 chunks, at least 27 over the limit of 10,000 "
        "(1,234 more records not counted); "
    )
    assert error.details["pending"] == 1_234

"""Grants in the store: the token only as SHA-256, sealed terms that editing the database cannot widen, the check
order of every MCP call (issue 9, acceptance 3's store side). Real SQLite, real keys, a clock we move."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from memories.config import CryptoConfig
from memories.daemon.grants.registry import MAX_EXPIRY_DAYS, Grants, parse_expiry, token_hash
from memories.errors import MemoriesError
from memories.vault.record_store import RecordStore

CHEAP = CryptoConfig(kdf_memory_kib=256, kdf_iterations=1, kdf_lanes=1)


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def parts(tmp_path: Path):
    records = RecordStore(tmp_path / "memories.db")
    store, keyring, vaults = records.store, records.keys, records.vaults
    keyring.init("passphrase", CHEAP)
    clock = Clock()
    yield store, keyring, vaults, Grants(store, keyring, clock), clock, tmp_path / "memories.db"
    store.close()


def _code(fn, *args) -> str:
    with pytest.raises(MemoriesError) as caught:
        fn(*args)
    return caught.value.code


def test_the_token_is_stored_only_as_its_sha256(parts) -> None:
    store, _, vaults, grants, _, db = parts
    created = grants.create(vaults.create("v1", False), "claude-code", ["search", "read"], "30d")
    assert created.token.startswith("mem_") and len(created.token) == 47
    raw = db.read_bytes() + (
        db.with_name("memories.db-wal").read_bytes() if db.with_name("memories.db-wal").exists() else b""
    )
    assert created.token.encode() not in raw
    row = store.grant(created.id)
    assert row is not None and row.token_hash == token_hash(created.token)


def test_check_order_token_expiry_revocation_scope_then_lock(parts) -> None:
    _, keyring, vaults, grants, clock, _ = parts
    v1 = vaults.create("v1", False)
    g1 = grants.create(v1, "c", ["search", "read"], "1h")
    assert grants.authorize(g1.token, "search").vault.id == v1.id
    for bad in ("", "mem_short", "x" * 47, "mem_" + "A" * 43):
        assert _code(grants.authorize, bad, "search") == "grant_invalid"
    assert _code(grants.authorize, g1.token, "ask") == "scope_denied"
    clock.now += 3601
    assert _code(grants.authorize, g1.token, "ask") == "grant_expired"  # expiry comes before scope
    clock.now -= 3601
    grants.revoke(g1.id, None)
    assert _code(grants.authorize, g1.token, "search") == "grant_revoked"
    clock.now += 3601
    assert _code(grants.authorize, g1.token, "search") == "grant_expired"  # expiry before revocation
    g2 = grants.create(v1, "c", ["ask"], "never")
    keyring.lock()
    assert _code(grants.authorize, "mem_" + "B" * 43, "ask") == "grant_invalid"  # checkable while locked
    assert _code(grants.authorize, g2.token, "ask") == "vault_locked"
    assert _code(grants.authorize, g1.token, "ask") == "grant_expired"


def test_editing_the_database_cannot_widen_or_unrevoke_a_grant(parts) -> None:
    _, _, vaults, grants, _, db = parts
    v1, v2 = vaults.create("v1", False), vaults.create("v2", False)
    narrow = grants.create(v1, "c", ["search"], "1h")
    wide = grants.create(v2, "c", ["search", "read", "retrieve", "ask"], "never")
    edit = sqlite3.connect(db)
    # The clear copies are for listing only.
    edit.execute(
        "UPDATE grants SET scope = 'search,read,retrieve,ask', expires = NULL, vault_id = ? WHERE id = ?",
        (v2.id, narrow.id),
    )
    edit.commit()
    assert _code(grants.authorize, narrow.token, "read") == "scope_denied"
    assert grants.authorize(narrow.token, "search").vault.id == v1.id
    # Sealed terms moved onto another grant fail authentication.
    edit.execute("UPDATE grants SET terms = (SELECT terms FROM grants WHERE id = ?) WHERE id = ?", (wide.id, narrow.id))
    edit.commit()
    assert _code(grants.authorize, narrow.token, "search") == "integrity_error"
    # A revoke erases the sealed terms: clearing the flag does not bring the grant back.
    grants.revoke(None, wide.token)
    edit.execute("UPDATE grants SET revoked = NULL WHERE id = ?", (wide.id,))
    edit.commit()
    assert _code(grants.authorize, wide.token, "search") == "grant_revoked"
    edit.close()


def test_listing_never_shows_a_token_and_revoking_a_vault_revokes_its_grants(parts) -> None:
    _, _, vaults, grants, _, _ = parts
    v1, v2 = vaults.create("v1", False), vaults.create("v2", False)
    a = grants.create(v1, "a", ["search"], "7d")
    b = grants.create(v2, "b", ["read"], "12h")
    listing = grants.listing(None)
    assert [g.id for g in listing] == [a.id, b.id]
    assert all(not hasattr(g, "token") for g in listing)
    assert [g.id for g in grants.listing(v2)] == [b.id]
    assert grants.revoke_vault(v1.id) == [a.id]
    assert {g.id: g.state for g in grants.listing(None)} == {a.id: "revoked", b.id: "active"}


def test_expiry_forms() -> None:
    now = 1_800_000_000.0
    assert parse_expiry("30m", now) == now + 1800
    assert parse_expiry("12h", now) == now + 43200
    assert parse_expiry("7d", now) == now + 7 * 86400
    assert parse_expiry("never", now) is None
    assert parse_expiry("2030-01-01T00:00:00+00:00", now) == 1893456000.0
    for bad in ("0m", "5w", "yesterday", "2020-01-01T00:00:00+00:00", "", "0001-01-01"):
        assert _code(parse_expiry, bad, now) == "invalid_argument"
    assert parse_expiry(f"{MAX_EXPIRY_DAYS}d", now) == now + MAX_EXPIRY_DAYS * 86400


@pytest.mark.parametrize("far", ["3651d", "99999999d", "9" * 5000 + "m", "2999-01-01", "9999-12-31T23:59:59+14:00"])
def test_an_expiry_too_far_in_the_future_says_the_maximum(far: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_expiry(far, 1_800_000_000.0)
    assert caught.value.code == "invalid_argument"
    assert "too far in the future" in caught.value.message and f"at most {MAX_EXPIRY_DAYS}d" in caught.value.message


def test_a_locked_home_lists_its_live_grants_as_suspended(parts) -> None:
    _, keyring, vaults, grants, clock, _ = parts
    v1 = vaults.create("v1", False)
    live, gone = grants.create(v1, "a", ["search"], "7d"), grants.create(v1, "b", ["search"], "1h")
    revoked = grants.create(v1, "c", ["search"], "7d")
    grants.revoke(revoked.id, None)
    clock.now += 3601
    keyring.lock()
    states = {g.id: g.state for g in grants.listing(None)}
    assert states == {live.id: "suspended", gone.id: "expired", revoked.id: "revoked"}
    keyring.unlock("passphrase")
    assert {g.id: g.state for g in grants.listing(None)}[live.id] == "active"


def test_the_guard_of_an_authorized_call_sees_revoke_expiry_and_lock(parts) -> None:
    _, keyring, vaults, grants, clock, _ = parts
    v1 = vaults.create("v1", False)
    created = grants.create(v1, "c", ["search"], "1h")
    guard = grants.guard(grants.authorize(created.token, "search"))
    assert guard() is None
    clock.now += 3600
    assert guard().code == "grant_expired"
    clock.now -= 3600
    other = grants.guard(grants.authorize(grants.create(v1, "c", ["search"], "never").token, "search"))
    grants.revoke(created.id, None)
    assert guard().code == "grant_revoked" and other() is None  # revoke bumps only that grant's auth epoch
    keyring.lock()
    assert other().code == "vault_locked"

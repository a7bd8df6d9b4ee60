"""Grants: what an AI client may do with one vault, until when; checked in the daemon on every MCP call.

A grant is created by the owner (``grant create``, ``inject``) and answers to a 256-bit random token shown once.
The store keeps the token's SHA-256 only, and the grant's **terms** — vault id, scope, expiry — sealed under the
master key with associated data binding them to the grant id and the token hash (:func:`memories.crypto.
grant_terms_aad`): editing the database cannot widen a grant, move it to another vault or undo a revoke (revoke
erases the sealed terms). The clear copies of vault, client, scope and expiry exist for ``grant list`` only.

Every call is checked in this order (:meth:`Grants.authorize`)::

    token      empty, malformed, unknown (another home's, or purged)   grant_invalid   (also while locked)
    expiry     the daemon's clock at or past ``expires``                grant_expired
    revocation revoked                                                  grant_revoked
    scope      the tool is not in the grant's scope                     scope_denied
    vault      the home is locked                                       vault_locked

While locked the sealed terms cannot be opened, so expiry and revocation are judged from the clear copies and the
call then fails with ``vault_locked`` (lock suspends every grant; unlock is never possible through MCP). The
self-reported client name is a label and never authorizes anything.
"""

from __future__ import annotations

import datetime
import hashlib
import re
import secrets
import time
import unicodedata
from collections.abc import Callable
from typing import NamedTuple, get_args

import msgspec

from memories import crypto
from memories import protocol as p
from memories.errors import MemoriesError
from memories.vault.keys import Keyring
from memories.vault.rules import new_id
from memories.vault.store import GrantRow, Store, VaultRow

TOKEN_PREFIX = "mem_"
TOKEN_BYTES = 32
"""256 random bits, written as ``mem_`` and 43 URL-safe base64 characters."""
_TOKEN = re.compile(r"mem_[A-Za-z0-9_-]{43}")

DEFAULT_EXPIRY = "30d"
"""What ``grant create`` and ``inject`` use without ``--expires``: long enough for daily use, short enough that a
forgotten grant lapses by itself."""

SCOPES: tuple[p.GrantScope, ...] = get_args(p.GrantScope)

MAX_EXPIRY_DAYS = 3650
"""The furthest expiry a grant may have, in days from its creation (about 10 years): a longer one is almost surely
a typo (``99999999d``), and ``never`` says "no expiry" on purpose."""

_RELATIVE = re.compile(r"([0-9]+)([mhd])")
_UNIT_SECONDS = {"m": 60, "h": 3600, "d": 86400}

_INVALID = (
    "the grant token is not valid for this home (empty, malformed or unknown); "
    "create one with `memories grant create` or `memories inject`"
)


class GrantTerms(msgspec.Struct, forbid_unknown_fields=True):
    """The sealed part of a grant: the only copy that authorizes. ``expires`` in Unix seconds, ``None``: never."""

    vault_id: str
    scope: list[p.GrantScope]
    expires: float | None


class Authorized(NamedTuple):
    """A call that passed every check: the grant's id, vault, scope and expiry, and its auth epoch then."""

    grant_id: str
    vault: VaultRow
    scope: list[p.GrantScope]
    expires: float | None
    epoch: int


Guard = Callable[[], MemoriesError | None]
"""A re-check of an authorized call when its result is about to be accepted: the error instead, or ``None``."""


def token_hash(token: str) -> bytes:
    """SHA-256 of the token's UTF-8 bytes: what the store keeps instead of the token."""
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


def parse_expiry(text: str, now: float) -> float | None:
    """``30m``, ``12h``, ``7d`` (from ``now``), an ISO-8601 time (local time when it names no zone) or ``never``.

    Returns:
        Unix seconds, or ``None`` for never.

    Raises:
        MemoriesError: ``invalid_argument`` for anything else, a time not in the future, or one more than
            :data:`MAX_EXPIRY_DAYS` days after ``now`` (the message says the maximum).
    """
    text = text.strip()
    if text == "never":
        return None
    latest = now + MAX_EXPIRY_DAYS * 86400
    match = _RELATIVE.fullmatch(text)
    if match:
        digits, unit = match.groups()
        # Compared before converting: a thousand-digit count is too far, not a ValueError from int().
        seconds = int(digits) * _UNIT_SECONDS[unit] if len(digits) <= 12 else latest
        expires = now + seconds
    else:
        try:
            moment = datetime.datetime.fromisoformat(text)
        except ValueError:
            raise MemoriesError(
                "invalid_argument", f"--expires {text!r} is not 30m, 12h, 7d, an ISO-8601 time or never"
            ) from None
        try:
            expires = moment.timestamp()
        except (OverflowError, OSError, ValueError):  # a year the platform's clock cannot reach (1, 9999 + zone)
            expires = 0.0 if moment.year < 1970 else latest + 1
    if expires <= now:
        raise MemoriesError("invalid_argument", f"--expires {text} is not in the future")
    if expires > latest:
        raise MemoriesError(
            "invalid_argument",
            f"--expires {text} is too far in the future: at most {MAX_EXPIRY_DAYS}d (about 10 years) from now; "
            "give never for a grant that does not expire",
        )
    return expires


def check_scope(scope: list[str]) -> list[p.GrantScope]:
    """The scope without duplicates, in the canonical order; raises ``invalid_argument`` for an empty one or an
    unknown tool."""
    unknown = [s for s in scope if s not in SCOPES]
    if unknown or not scope:
        raise MemoriesError("invalid_argument", f"--scope takes a comma-separated list of {', '.join(SCOPES)}")
    return [s for s in SCOPES if s in scope]


def _check_client(name: str) -> str:
    name = unicodedata.normalize("NFC", name.strip())
    if not name or len(name) > 64 or any(unicodedata.category(c)[0] == "C" for c in name):
        raise MemoriesError("invalid_argument", "--client must be 1 to 64 printable characters")
    return name


class Grants:
    """Grant records over the store, sealed with the keyring's master key. Blocking (runs in the store's thread).

    Args:
        clock: the daemon's clock in Unix seconds (``time.time``, shifted by a test hook in the tests).
    """

    def __init__(self, store: Store, keyring: Keyring, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._keys = keyring
        self._clock = clock
        self._auth_epochs: dict[str, int] = {}

    def auth_epoch(self, grant_id: str) -> int:
        """The grant's auth epoch, bumped by every revoke (R-44): work authorized at an older one is dropped."""
        return self._auth_epochs.get(grant_id, 0)

    def guard(self, authorized: Authorized) -> Guard:
        """What a call authorized as ``authorized`` re-checks before its result is accepted: the home still
        unlocked (lock suspends every grant), the grant not revoked since (its auth epoch), not expired by now."""

        def check() -> MemoriesError | None:
            if self._keys.locked:
                return MemoriesError("vault_locked", "the home was locked while the call ran")
            if self.auth_epoch(authorized.grant_id) != authorized.epoch:
                return _revoked()
            if authorized.expires is not None and self._clock() >= authorized.expires:
                return _expired(authorized.expires)
            return None

        return check

    def create(self, vault: VaultRow, client: str, scope: list[str], expires: str) -> p.GrantCreated:
        """A new grant and its token (shown once). Raises ``vault_locked``, ``invalid_argument``."""
        master = self._keys.master()
        client = _check_client(client)
        scopes = check_scope(scope)
        now = self._clock()
        expires_at = parse_expiry(expires, now)
        grant_id = new_id()
        token = TOKEN_PREFIX + secrets.token_urlsafe(TOKEN_BYTES)
        digest = token_hash(token)
        terms = GrantTerms(vault_id=vault.id, scope=scopes, expires=expires_at)
        sealed = crypto.seal(master, msgspec.msgpack.encode(terms), crypto.grant_terms_aad(grant_id, digest))
        row = GrantRow(grant_id, digest, vault.id, client, ",".join(scopes), time.time(), expires_at, None, sealed)
        self._store.insert_grant(row)
        return p.GrantCreated(
            id=grant_id, token=token, vault=vault.name, client=client, scope=scopes, expires=expires_at
        )

    def listing(self, vault: VaultRow | None) -> list[p.GrantInfo]:
        """Every grant (of ``vault``), from the clear listing copies; works while locked."""
        names = {v.id: v.name for v in self._store.vaults()}
        return [self._info(row, names) for row in self._store.grants(vault.id if vault else None)]

    def revoke(self, grant_id: str | None, token: str | None) -> p.GrantInfo:
        """Revoke one grant (idempotent); works while locked.

        Raises:
            MemoriesError: ``grant_invalid`` for an unknown token; ``invalid_argument`` for an unknown id.
        """
        if token is not None:
            row = self._store.grant_by_token_hash(token_hash(token)) if _TOKEN.fullmatch(token) else None
            if row is None:
                raise MemoriesError("grant_invalid", _INVALID)
        else:
            row = self._store.grant(grant_id or "")
            if row is None:
                raise MemoriesError("invalid_argument", f"no grant has the id {grant_id!r} (see `memories grant list`)")
        self._revoke([row.id])
        revoked = self._store.grant(row.id)
        assert revoked is not None
        return self._info(revoked, {v.id: v.name for v in self._store.vaults()})

    def revoke_vault(self, vault_id: str) -> list[str]:
        """Revoke every grant of a vault (when the vault is deleted); their ids."""
        ids = [row.id for row in self._store.grants(vault_id) if row.revoked is None]
        self._revoke(ids)
        return ids

    def _revoke(self, ids: list[str]) -> None:
        self._store.revoke_grants(ids, time.time())
        for grant_id in ids:
            self._auth_epochs[grant_id] = self.auth_epoch(grant_id) + 1

    def authorize(self, token: str, tool: p.GrantScope | None) -> Authorized:
        """Check an MCP call in the documented order (see the module docstring); the grant's vault when it passes.
        ``tool`` ``None`` is a status request (:class:`~memories.protocol.ToolStatus`), which any scope covers.

        Raises:
            MemoriesError: ``grant_invalid``, ``grant_expired``, ``grant_revoked``, ``scope_denied``,
                ``vault_locked``, ``integrity_error`` (the sealed terms were changed).
        """
        row = self._store.grant_by_token_hash(token_hash(token)) if _TOKEN.fullmatch(token) else None
        if row is None:
            raise MemoriesError("grant_invalid", _INVALID)
        epoch = self.auth_epoch(row.id)
        now = self._clock()
        if self._keys.locked or row.terms is None:
            self._check_time(row.expires, now)
            if row.revoked is not None or row.terms is None:
                raise _revoked()
            self._keys.master()  # raises vault_locked
        assert row.terms is not None
        sealed = crypto.open_sealed(self._keys.master(), row.terms, crypto.grant_terms_aad(row.id, row.token_hash))
        terms = msgspec.msgpack.decode(sealed, type=GrantTerms)
        self._check_time(terms.expires, now)
        if row.revoked is not None:
            raise _revoked()
        if tool is not None and tool not in terms.scope:
            raise MemoriesError(
                "scope_denied", f"this grant allows {', '.join(terms.scope)}; memory_{tool} is not among them"
            )
        vault = next((v for v in self._store.vaults() if v.id == terms.vault_id), None)
        if vault is None:
            raise _revoked()
        return Authorized(row.id, vault, terms.scope, terms.expires, epoch)

    @staticmethod
    def _check_time(expires: float | None, now: float) -> None:
        if expires is not None and now >= expires:
            raise _expired(expires)

    def _info(self, row: GrantRow, names: dict[str, str]) -> p.GrantInfo:
        state: p.GrantState = "active"
        if row.revoked is not None:
            state = "revoked"
        elif row.expires is not None and self._clock() >= row.expires:
            state = "expired"
        elif self._keys.locked:  # lock suspends every grant: its calls fail with vault_locked until unlock
            state = "suspended"
        scope = [s for s in row.scope.split(",") if s in SCOPES]
        return p.GrantInfo(
            id=row.id,
            vault=names.get(row.vault_id, row.vault_id),
            client=row.client,
            scope=scope,
            created=row.created,
            expires=row.expires,
            state=state,
        )


def _expired(expires: float) -> MemoriesError:
    moment = datetime.datetime.fromtimestamp(expires).astimezone().isoformat(timespec="seconds")
    return MemoriesError("grant_expired", f"the grant expired at {moment}; create a new one")


def _revoked() -> MemoriesError:
    return MemoriesError("grant_revoked", "the grant was revoked; create a new one")

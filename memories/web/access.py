"""Who may use the web app: a one-time link token exchanged for a session cookie, and each session's CSRF token.

Every local account can reach a loopback port, so the port alone proves nothing. ``memories web`` prints a link
holding a token of :data:`TOKEN_BYTES` random bytes; its first use opens a session (a cookie of as many random
bytes) and the token is spent. Secrets are compared in constant time, and sessions are looked up by the SHA-256 of
their cookie, so no comparison depends on how much of a guess was right. Nothing here is ever logged or stored on
disk: the sessions end with the process.

>>> access = Access(clock=lambda: 0.0)
>>> token = access.token
>>> session = access.redeem(token)
>>> access.redeem(token) is None, access.session(session.cookie) is session
(True, True)
>>> access.csrf_ok(session, session.csrf), access.csrf_ok(session, "guess")
(True, False)
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

TOKEN_BYTES = 32
"""Random bytes of the link token, a session cookie and a CSRF token: 256 bits (the issue asks at least 128)."""

TOKEN_SECONDS = 15 * 60
"""How long the printed link stays valid, in seconds, if nobody opens it."""

SESSION_SECONDS = 12 * 60 * 60
"""How long a session lasts after its last request, in seconds."""

MAX_SESSIONS = 16
"""Sessions kept at most (the oldest goes first): one person's browsers, not a crowd."""


@dataclass
class Session:
    """One browser's session: its cookie value, its CSRF token (a form field, never a cookie) and when it ends
    (seconds of the app's clock)."""

    cookie: str
    csrf: str
    expires: float


def _digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()


class Access:
    """The link token (:attr:`token`, spent by :meth:`redeem`) and the sessions it opened.

    ``clock`` gives seconds (default :func:`time.monotonic`); tests pass their own.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.token = secrets.token_urlsafe(TOKEN_BYTES)
        self._token_digest: bytes | None = _digest(self.token)
        self._token_expires = clock() + TOKEN_SECONDS
        self._sessions: dict[bytes, Session] = {}

    def redeem(self, token: str) -> Session | None:
        """A new session for the link token, which is spent by it; ``None`` for any other string, a spent token or
        an expired one."""
        expected = self._token_digest
        if expected is None or not hmac.compare_digest(_digest(token), expected):
            return None
        self._token_digest = None
        if self._clock() > self._token_expires:
            return None
        session = Session(secrets.token_urlsafe(TOKEN_BYTES), secrets.token_urlsafe(TOKEN_BYTES), 0.0)
        self._touch(session)
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.pop(next(iter(self._sessions)))
        self._sessions[_digest(session.cookie)] = session
        return session

    def session(self, cookie: str | None) -> Session | None:
        """The live session of a cookie value (its end moved on), or ``None``."""
        if not cookie:
            return None
        key = _digest(cookie)
        session = self._sessions.get(key)
        if session is None:
            return None
        if self._clock() > session.expires:
            del self._sessions[key]
            return None
        self._touch(session)
        return session

    @staticmethod
    def csrf_ok(session: Session, field: str | None) -> bool:
        """Whether a form's CSRF field is this session's token (constant time)."""
        return field is not None and hmac.compare_digest(_digest(field), _digest(session.csrf))

    def _touch(self, session: Session) -> None:
        session.expires = self._clock() + SESSION_SECONDS

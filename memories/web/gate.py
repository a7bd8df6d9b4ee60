"""The ASGI gate in front of every request of ``memories web``, in this order, before any routing:

1. **Host**: exactly one ``Host`` header naming 127.0.0.1, localhost or [::1] (DNS rebinding), else 403.
2. **Origin**: at most one, and when present this server's own origin (``http://127.0.0.1:PORT`` and its loopback
   twins), else 403; a request other than GET or HEAD without an ``Origin`` is refused too (403): a browser always
   sends it on a POST, so a state-changing request must say where it comes from. Under ``Referrer-Policy:
   no-referrer`` a browser sends ``Origin: null`` on our own forms' POSTs; that counts as same-origin only with
   ``Sec-Fetch-Site: same-origin``, a header no page can set (the Fetch standard's forbidden request headers).
3. **The link token** (``?token=``): spent for a session, answered with the session cookie
   (``HttpOnly; SameSite=Strict; Path=/``, no ``Secure``: plain loopback HTTP) and a redirect to the same address
   without the token; a spent, expired or wrong token gets 403.
4. **The session cookie**: without a live one, 401 and a page saying to open the link ``memories web`` printed.
5. **CSRF**: a POST's form (at most :data:`MAX_FORM_BYTES`) must carry the session's token in the field
   :data:`CSRF_FIELD`, else 403; other methods than GET, HEAD and POST get 405.

Every response, refusals included, carries :data:`SECURITY_HEADERS`. A refusal is a short page naming its reason,
never the request's headers; nothing here logs.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from memories.serving import host_name
from memories.web.access import Access, Session

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
"""The ASGI 3 callables' types."""

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
"""Host names a request may address."""

COOKIE = "memories_session"
"""The session cookie's name."""

CSRF_FIELD = "csrf"
"""The form field holding the session's CSRF token."""

SESSION_KEY = "memories.session"
"""The ASGI scope key of the request's :class:`~memories.web.access.Session` (pages put its CSRF token in forms)."""

MAX_FORM_BYTES = 64 * 1024
"""Largest POST body read, in bytes (a question or a form of buttons; larger: 413)."""

CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; object-src 'none'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
"""The Content-Security-Policy: this server's own files only, no inline script, never framed."""

SECURITY_HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]
"""Headers added to every response (``Cache-Control: no-store``: pages show note text)."""


def cookie_header(name: str, value: str) -> tuple[bytes, bytes]:
    """A ``Set-Cookie`` header as every cookie of the app is set: ``HttpOnly; SameSite=Strict; Path=/``."""
    return (b"set-cookie", f"{name}={value}; Path=/; HttpOnly; SameSite=Strict".encode())


def _cookies(headers: dict[str, list[str]]) -> dict[str, str]:
    found: dict[str, str] = {}
    for header in headers.get("cookie", []):
        for part in header.split(";"):
            name, sep, value = part.strip().partition("=")
            if sep:
                found.setdefault(name, value)
    return found


class Gate:
    """The checks above, then ``app`` with the request's session in ``scope[SESSION_KEY]``."""

    def __init__(self, app: App, access: Access, port: int) -> None:
        self._app = app
        self._access = access
        self._origins = {f"http://{name}:{port}" for name in ("127.0.0.1", "localhost", "[::1]")}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return

        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *SECURITY_HEADERS]
            await send(message)

        headers: dict[str, list[str]] = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1").lower(), []).append(value.decode("latin-1"))
        method = scope["method"]
        hosts, origins = headers.get("host", []), headers.get("origin", [])
        if len(hosts) != 1 or host_name(hosts[0]) not in LOOPBACK_NAMES:
            await refuse(secured, 403, "the Host header must name 127.0.0.1, localhost or [::1]")
            return
        origin = origins[0].strip().lower() if len(origins) == 1 else None
        if origin == "null" and headers.get("sec-fetch-site") == ["same-origin"]:
            origin = None  # our own form under Referrer-Policy: no-referrer (the browser says so in Sec-Fetch-Site)
            origins = ["same-origin"]
        if len(origins) > 1 or (origin is not None and origin not in self._origins):
            await refuse(secured, 403, "requests from another origin (another web page) are not served")
            return
        if method not in ("GET", "HEAD") and not origins:
            await refuse(secured, 403, "a request that changes something must carry this page's Origin")
            return
        query = urllib.parse.parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        tokens = [value for name, value in query if name == "token"]
        if tokens:
            await self._redeem(secured, scope["path"], tokens, query)
            return
        session = self._access.session(_cookies(headers).get(COOKIE))
        if session is None:
            await refuse(secured, 401, "open the link `memories web` printed (it holds a one-time token)")
            return
        scope[SESSION_KEY] = session
        if method in ("GET", "HEAD"):
            await self._app(scope, receive, secured)
        elif method == "POST":
            await self._post(scope, receive, secured, session)
        else:
            await refuse(secured, 405, f"method {method} is not served")

    async def _redeem(self, send: Send, path: str, tokens: list[str], query: list[tuple[str, str]]) -> None:
        session = self._access.redeem(tokens[0]) if len(tokens) == 1 else None
        if session is None:
            await refuse(send, 403, "this link was used already or has expired: run `memories web` again for a new one")
            return
        rest = urllib.parse.urlencode([(name, value) for name, value in query if name != "token"])
        target = path if path.startswith("/") and not path.startswith(("//", "/\\")) else "/"
        location = target + (f"?{rest}" if rest else "")
        response_headers = [
            (b"location", urllib.parse.quote(location, safe="/?&=%:+,;@").encode("latin-1")),
            cookie_header(COOKIE, session.cookie),
            (b"content-length", b"0"),
        ]
        await send({"type": "http.response.start", "status": 303, "headers": response_headers})
        await send({"type": "http.response.body", "body": b""})

    async def _post(self, scope: Scope, receive: Receive, send: Send, session: Session) -> None:
        body = b""
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > MAX_FORM_BYTES:
                await refuse(send, 413, f"a form is at most {MAX_FORM_BYTES} bytes")
                return
        fields = urllib.parse.parse_qs(body.decode("latin-1"), keep_blank_values=True)
        given = fields.get(CSRF_FIELD, [])
        if len(given) != 1 or not self._access.csrf_ok(session, given[0]):
            await refuse(send, 403, "this form is stale or did not come from this app (CSRF token): reload the page")
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self._app(scope, replay, send)


async def refuse(send: Send, status: int, reason: str) -> None:
    """Answer with ``status`` and a short HTML page saying ``reason``."""
    page = (
        '<!doctype html><html lang="en"><meta charset="utf-8"><title>Memories</title>'
        f"<h1>{status}</h1><p>{html.escape(reason)}</p></html>"
    ).encode()
    response_headers = [(b"content-type", b"text/html; charset=utf-8"), (b"content-length", str(len(page)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": response_headers})
    await send({"type": "http.response.body", "body": page})

"""``memories web`` in process (issue 31): the gate's checks before routing (Host, Origin, link token, session,
CSRF), the security headers, and the pages over a fake daemon (search results in the HTML, a hostile note made
inert, the daemon's errors on a page)."""

from __future__ import annotations

import re
import urllib.parse
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

import memories.web.daemon
from memories import protocol as p
from memories.errors import MemoriesError
from memories.paths import Home
from memories.web.access import TOKEN_SECONDS, Access
from memories.web.serve import build
from tests.fixtures.fake_daemon import fake_daemon

PORT = 8766
BASE = f"http://127.0.0.1:{PORT}"
ORIGIN = {"Origin": BASE}
HOSTILE = (
    "<script>window.flag=1</script>\n\n<img src=x onerror=alert(1)>\n\n[click](javascript:alert(1))\n\n"
    "<svg onload=alert(1)><script>alert(2)</script></svg>\n\n[entity](&#106;avascript:alert(1))\n\n"
    "[fine](https://example.com) ![remote](https://example.com/track.png)\n"
)


def _hit(**fields: Any) -> p.SearchHit:
    values: dict[str, Any] = {
        "label": "S1", "asset_id": "a" * 32, "revision": 1, "chunk_hash": "c" * 64, "byte_start": 0,
        "byte_end": 12, "score": 1.5, "title": "日记 <b>", "kind": "card", "source": "daily/2024.md",
        "text": "今天 去了 公园", "highlights": [(0, 2)],
    }  # fmt: skip
    return p.SearchHit(**{**values, **fields})


def _answer(request: p.Request) -> Any:
    if isinstance(request, p.VaultList):
        return p.VaultListing(vaults=[p.VaultInfo(id="0" * 16, name="notes", device_only=False)])
    if isinstance(request, p.RagSearch):
        return p.SearchReport(mode="bm25", match_mode=request.match_mode, results=[_hit()])
    if isinstance(request, p.MemoryRead):
        return p.RecordView(
            id=request.id, revision=1, revision_id="f" * 64, kind="card", sensitivity="general",
            title="<script>window.flag=2</script>", body=HOSTILE, meta={"x": "<img src=x onerror=alert(3)>"},
            created=0.0, updated=0.0,
        )  # fmt: skip
    if isinstance(request, p.JobCancel):
        return p.JobListing(jobs=[])
    raise MemoriesError("vault_locked", "the home is locked; unlock it with `memories unlock`")


def _client(home: Home, access: Access) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=build(home, PORT, access)), base_url=BASE)


async def _signed_in(client: httpx.AsyncClient, access: Access) -> None:
    reply = await client.get(f"/search?token={access.token}&q=x")
    assert reply.status_code == 303 and reply.headers["location"] == "/search?q=x"
    cookie = reply.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Secure" not in cookie
    assert access.token not in cookie


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize("method", ["GET", "POST", "PUT"])
@pytest.mark.parametrize("path", ["/", "/search", "/nowhere", "/web.css"])
async def test_foreign_host_or_origin_refused_before_anything(tmp_path: Path, method: str, path: str) -> None:
    home = Home(str(tmp_path), str(tmp_path / "config.toml"))
    access = Access()
    async with _client(home, access) as client:
        await _signed_in(client, access)
        foreign_host = await client.request(method, path, headers={"Host": "evil.example:8766", **ORIGIN})
        foreign_origin = await client.request(method, path, headers={"Origin": "http://evil.example"})
        other_port = await client.request(method, path, headers={"Origin": "http://127.0.0.1:1"})
    for reply in (foreign_host, foreign_origin, other_port):
        assert reply.status_code == 403
        assert "default-src 'self'" in reply.headers["content-security-policy"]


async def test_token_once_then_cookie_then_csrf(tmp_path: Path) -> None:
    async with fake_daemon(tmp_path, _answer) as daemon:
        access = Access()
        async with _client(daemon.home, access) as client:
            anonymous = await client.get("/search")
            assert anonymous.status_code == 401
            await _signed_in(client, access)
            page = await client.get("/status")  # the fake daemon says locked: the error page, with a form-less body
            assert page.status_code == 423 and "vault_locked" in page.text and "memories unlock" in page.text
            search = await client.get("/search?vault=notes&q=x")
            assert search.status_code == 200
            token = _csrf((await client.get("/ask")).text)
            assert (await client.post("/jobs/cancel", data={"job": "1"}, headers=ORIGIN)).status_code == 403
            assert (await client.post("/jobs/cancel", data={"job": "1", "csrf": token})).status_code == 403
            done = await client.post("/jobs/cancel", data={"job": "1", "csrf": token}, headers=ORIGIN)
            assert done.status_code == 303 and isinstance(daemon.requests[-1], p.JobCancel)
            null = {"Origin": "null"}  # what a browser sends on our own form under Referrer-Policy: no-referrer
            assert (
                await client.post("/jobs/cancel", data={"job": "1", "csrf": token}, headers=null)
            ).status_code == 403
            same = {**null, "Sec-Fetch-Site": "same-origin"}
            assert (
                await client.post("/jobs/cancel", data={"job": "1", "csrf": token}, headers=same)
            ).status_code == 303
            reused = await client.get(f"/search?token={access.token}")
            assert reused.status_code == 403
        async with _client(daemon.home, access) as stranger:  # another client with the spent link, no cookie
            assert (await stranger.get(f"/search?token={access.token}")).status_code == 403
            assert (await stranger.get("/search?vault=notes&q=x")).status_code == 401


async def test_expired_token_refused(tmp_path: Path) -> None:
    now = [0.0]
    access = Access(clock=lambda: now[0])
    now[0] = TOKEN_SECONDS + 1
    async with _client(Home(str(tmp_path), str(tmp_path / "c.toml")), access) as client:
        assert (await client.get(f"/?token={access.token}")).status_code == 403


async def test_search_results_in_the_html_with_highlights(tmp_path: Path) -> None:
    async with fake_daemon(tmp_path, _answer) as daemon:
        access = Access()
        async with _client(daemon.home, access) as client:
            await _signed_in(client, access)
            reply = await client.get(
                "/search", params={"vault": "notes", "q": "今天", "mode": "bm25", "tag": "a,b", "since": "2024-01-01"}
            )
    assert reply.status_code == 200
    for name, value in (("cache-control", "no-store"), ("referrer-policy", "no-referrer")):
        assert reply.headers[name] == value
    csp = reply.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
    assert "<mark>今天</mark>" in reply.text and "日记 &lt;b&gt;" in reply.text and "daily/2024.md" in reply.text
    search = daemon.requests[-1]
    assert isinstance(search, p.RagSearch) and search.mode == "bm25" and search.tags == ["a", "b"]
    assert search.since == "2024-01-01" and search.highlight


async def test_hostile_note_is_inert(tmp_path: Path) -> None:
    async with fake_daemon(tmp_path, _answer) as daemon:
        access = Access()
        async with _client(daemon.home, access) as client:
            await _signed_in(client, access)
            reply = await client.get("/note", params={"vault": "notes", "id": "a" * 32, "start": 0, "end": 40})
    assert reply.status_code == 200
    body = reply.text.replace('<script src="/web.js" defer></script>', "", 1)  # the app's own script, once
    assert (
        "<script" not in body
        and "<img" not in body
        and "<svg" not in body
        and "onerror=" not in body.replace("onerror=alert", "")
    )
    assert "javascript:" not in re.sub(r">[^<]*<", "><", body)  # only as text, never in an attribute
    assert 'href="https://example.com" rel="noopener noreferrer"' in body
    assert "track.png" not in body and 'id="hit"' in body


async def test_daemon_down_is_a_page(tmp_path: Path) -> None:
    access = Access()
    async with _client(Home(str(tmp_path), str(tmp_path / "c.toml")), access) as client:
        await _signed_in(client, access)
        reply = await client.get("/search?q=x")
        assert reply.status_code == 503 and "daemon_not_running" in reply.text and "Traceback" not in reply.text
        bad = await client.get("/search?q=x&limit=zz")
        assert "daemon_not_running" in bad.text or "invalid_argument" in bad.text


async def test_language_follows_the_browser_and_the_switch(tmp_path: Path) -> None:
    access = Access()
    async with _client(Home(str(tmp_path), str(tmp_path / "c.toml")), access) as client:
        await _signed_in(client, access)
        chinese = await client.get("/search", headers={"Accept-Language": "zh-TW,zh;q=0.9"})
        assert 'lang="zh-Hant"' in chinese.text
        switched = await client.get("/language?to=en&back=//evil.example")
        assert switched.headers["location"] == "/" and "HttpOnly; SameSite=Strict" in switched.headers["set-cookie"]
        english = await client.get("/search", headers={"Accept-Language": "zh-TW"})
        assert '<html lang="en">' in english.text


async def test_a_browser_that_hangs_up_on_an_ask_hangs_up_on_the_daemon(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Cancel on the ask page (the browser closes its connection): the server closes its daemon socket, where the
    daemon cancels the ask job; the fake daemon's answer never comes (and the client's silence timeout is an hour),
    so only the hang-up ends the request."""
    monkeypatch.setattr(memories.web.daemon, "SILENCE_SECONDS", 3600.0)

    async def answer(request: p.Request) -> Any:
        if isinstance(request, p.RagAsk):
            await trio.sleep_forever()
        return _answer(request)

    async with fake_daemon(tmp_path, answer) as daemon:
        access = Access()
        session = access.redeem(access.token)
        assert session is not None
        body = urllib.parse.urlencode({"csrf": session.csrf, "vault": "notes", "question": "公园"}).encode()
        asked, left = trio.Event(), trio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            if not sent:
                sent.append({})
                return {"type": "http.request", "body": body, "more_body": False}
            await left.wait()
            return {"type": "http.disconnect"}

        async def send(message: Any) -> None:
            sent.append(message)

        async def leave() -> None:
            while not any(isinstance(request, p.RagAsk) for request in daemon.requests):
                await trio.sleep(0.01)
            asked.set()
            left.set()

        headers = [
            (b"host", f"127.0.0.1:{PORT}".encode()),
            (b"origin", BASE.encode()),
            (b"cookie", f"memories_session={session.cookie}".encode()),
            (b"content-type", b"application/x-www-form-urlencoded"),
        ]
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": "/ask", "raw_path": b"/ask", "query_string": b"", "root_path": "", "headers": headers,
            "client": ("127.0.0.1", 50000), "server": ("127.0.0.1", PORT),
        }  # fmt: skip
        with trio.fail_after(30):  # a deadline for a hang, not a timing assertion
            async with trio.open_nursery() as nursery:
                nursery.start_soon(leave)
                await build(daemon.home, PORT, access)(scope, receive, send)
            await daemon.hung_up.wait()
    assert asked.is_set() and sent[1]["status"] == 204

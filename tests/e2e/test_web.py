"""``memories web``'s black-box contract (issue 31): the link with its one-time token printed on stderr and flushed
into a pipe, a foreign Host refused, search results in the server-rendered HTML from a real daemon, the daemon's
error on a page while the server stays up, the token in no log, SIGTERM ends it with status 0."""

from __future__ import annotations

import re
import signal
import subprocess

import httpx

from tests.fixtures.daemon import HomeDir, memories_executable
from tests.fixtures.mcp_client import server_env


def test_web_contract(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--kind", "card", "--title", "公园", "--body", "今天 去了 公园 with friends")
    process = subprocess.Popen(
        [memories_executable(), "web", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server_env(vault, None),
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().decode()
        found = re.search(r"(http://127\.0\.0\.1:(\d+)/\S*\?token=([A-Za-z0-9_-]{43,}))$", line.strip())
        assert found is not None and "#" not in line, line
        link, port, token = found.group(1), int(found.group(2)), found.group(3)
        base = f"http://127.0.0.1:{port}"
        with httpx.Client(base_url=base) as client:
            assert client.get("/search", headers={"Host": "attacker.example"}).status_code == 403
            assert client.post("/", headers={"Origin": "http://attacker.example"}).status_code == 403
            assert client.get("/search").status_code == 401
            opened = client.get(link, follow_redirects=True)
            assert opened.status_code == 200 and "default-src 'self'" in opened.headers["content-security-policy"]
            page = client.get("/search", params={"vault": "notes", "q": "公园", "mode": "bm25"})
            assert page.status_code == 200 and "<mark>公园</mark>" in page.text, page.text
            vault.ok("daemon", "stop")
            down = client.get("/search", params={"vault": "notes", "q": "公园"})
            assert down.status_code == 503 and "daemon_not_running" in down.text and "Traceback" not in down.text
            assert client.get(link).status_code == 403  # spent
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        log = line + process.stderr.read().decode()
        assert log.count(token) == 1 and "Traceback" not in log
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()

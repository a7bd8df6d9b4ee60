"""Issue 12, hangs: nothing the user names or does leaves a command waiting forever."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.fixtures.daemon import HomeDir
from tests.fixtures.mcp_client import RawServer, grant


def test_a_pipe_as_the_body_file_is_refused_at_once(vault: HomeDir, tmp_path: Path) -> None:
    fifo = tmp_path / "body.fifo"
    os.mkfifo(fifo)
    ref = vault.ok("memory", "add", "notes", "--title", "t", "--body", "b")
    # Opening a FIFO for reading blocks until a writer comes; the run's timeout only guards against a hang.
    error = vault.fails("unsupported_file", "memory", "add", "notes", "--title", "t", "--file", str(fifo))
    assert str(fifo) in error["message"]
    vault.fails("unsupported_file", "memory", "update", "notes", ref["id"], "--file", str(fifo))
    vault.fails("invalid_argument", "memory", "add", "notes", "--title", "t", "--file", str(tmp_path))
    body = tmp_path / "body.txt"
    body.write_text("from a file")
    added = vault.ok("memory", "add", "notes", "--title", "t", "--file", str(body))
    assert vault.ok("memory", "read", "notes", added["id"])["body"] == "from a file"


def test_a_stopped_daemon_is_unresponsive_not_a_hang(vault: HomeDir) -> None:
    """SIGSTOP freezes the daemon with its socket open: the kernel still accepts the connection, and only the
    missing heartbeats tell (10 s without a frame)."""
    pid = vault.status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        error = vault.fails("daemon_unresponsive", "vault", "list")
        assert "memories daemon stop" in error["message"]
    finally:
        os.kill(pid, signal.SIGCONT)
    assert vault.ok("vault", "list")["vaults"]


def test_an_mcp_call_to_a_stopped_daemon_is_unresponsive(vault: HomeDir) -> None:
    token = grant(vault, "notes", "search")["token"]
    server = RawServer(vault, token)
    server.initialize()
    pid = vault.status()["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        result = server.call("memory_search", {"query": "x"})
    finally:
        os.kill(pid, signal.SIGCONT)
    assert result["isError"] and result["content"][0]["text"].startswith("daemon_unresponsive: ")
    assert server.close()[0] == 0

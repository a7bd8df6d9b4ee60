"""Issue 29, item 12: another local account can squat the MCP HTTP port and capture the bearer token a client
sends. ``inject --http`` checks who listens on the port (``/proc/net/tcp``'s owner uid, Linux) and refuses a port
another user holds; elsewhere it cannot tell and goes on."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from click.testing import CliRunner

from memories.cli import cli
from memories.errors import MemoriesError
from memories.mcp import listener

_HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode"


def _row(port: int, uid: int, state: str = "0A") -> str:
    return f"   0: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 00000000  {uid} 0 42 1"


def test_the_owner_of_a_real_listener_is_this_user() -> None:
    if listener.listen_uids_known() is False:
        pytest.skip("no /proc/net/tcp here")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(1)
        port = sock.getsockname()[1]
        assert listener.listener_uids(port) == {os.getuid()}
        listener.refuse_foreign(port, listener.listener_uids(port))  # ours: no refusal


def test_only_a_listening_socket_of_another_user_is_foreign(monkeypatch: pytest.MonkeyPatch) -> None:
    other = os.getuid() + 1
    tables = [[_HEADER, _row(8765, other, state="06"), _row(8766, other)], [_HEADER, _row(8765, os.getuid())]]
    monkeypatch.setattr(listener, "_read_tables", lambda: tables)
    assert listener.listener_uids(8765) == {os.getuid()}  # ours listens; theirs is a closing connection
    assert listener.listener_uids(8766) == {other}
    with pytest.raises(MemoriesError) as refused:
        listener.refuse_foreign(8766, {other})
    assert refused.value.code == "http_port_foreign"
    monkeypatch.setattr(listener, "_read_tables", lambda: None)
    assert listener.listener_uids(8766) is None  # unknown (not Linux): no claim


def test_mcp_status_says_who_listens(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = os.getuid() + 1
    monkeypatch.setattr(listener, "_read_tables", lambda: [[_HEADER, _row(8766, other), _row(8767, os.getuid())]])
    status = ["--home", str(tmp_path), "mcp", "status", "--http"]
    foreign = CliRunner().invoke(cli, [*status, "8766"])
    assert foreign.exit_code == 1 and "http_port_foreign" in foreign.output
    ours = CliRunner().invoke(cli, [*status, "8767"])
    assert ours.exit_code == 0 and ours.output == "http://127.0.0.1:8767/mcp: listening: yes, by you\n"
    nobody = CliRunner().invoke(cli, [*status, "8768"])
    assert nobody.exit_code == 0 and "nothing listens" in nobody.output


def test_inject_http_refuses_a_port_another_user_holds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    other = os.getuid() + 1
    monkeypatch.setattr(listener, "_read_tables", lambda: [[_HEADER, _row(8766, other)]])
    args = ["--home", str(tmp_path), "inject", "claude-code", "--vault", "v", "--scope", "search", "--http", "8766"]
    run = CliRunner().invoke(cli, args)
    assert run.exit_code == 1
    assert f"error: http_port_foreign: --http: port 8766 is held by a process of another user (uid {other})" in (
        run.output
    )

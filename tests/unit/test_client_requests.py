"""The client end of the protocol: each request declares its result's type, a reply is decoded into it (a daemon
of another release may add or lack optional result fields), and the two daemon clients, the CLI's and the MCP
server's, give the same error code for the same bad argument."""

from __future__ import annotations

import typing
from pathlib import Path

import msgspec
import pytest

from memories import protocol as p
from memories.client import Client, encode_request, read_reply
from memories.daemon import server
from memories.errors import MemoriesError
from memories.mcp import link
from memories.paths import Home


def test_every_request_declares_a_result_type() -> None:
    results = set(typing.get_args(p.Result))
    for request in typing.get_args(p.Request):
        declared = request.declared_reply()
        assert set(typing.get_args(declared) or (declared,)) <= results, request.__name__
    assert p.Granted.declared_reply() == p.ToolResult
    assert p.RagIndex(vault="v").reply_type() == p.IndexReport | p.JobStarted
    assert p.Granted(token="t", call=p.ToolRead(id="a")).reply_type() is p.ReadPage


def _reply(result: dict[str, object]) -> p.ClientReply:
    return p.ClientReply(result=msgspec.Raw(msgspec.msgpack.encode(result)), warnings=["w"])


def test_a_result_field_unknown_to_the_client_is_ignored_and_a_missing_optional_one_defaulted() -> None:
    newer = {"$type": "SyncJoined", "id": "a" * 16, "name": "notes", "added_later": [1, 2]}
    assert read_reply(_reply(newer), p.SyncJoin(folder="/f", passphrase="x")) == (
        p.SyncJoined(id="a" * 16, name="notes"),
        ["w"],
    )
    older = {"$type": "JobStarted", "job_id": 7}
    assert read_reply(_reply(older), p.RagIndex(vault="v")).result == p.JobStarted(job_id=7)
    status = {"$type": "ToolStatusReport"}  # every field missing: not a reply this client can read
    with pytest.raises(MemoriesError) as caught:
        read_reply(_reply(status), p.Granted(token="t", call=p.ToolStatus()))
    assert caught.value.code == "protocol_mismatch" and "restart the daemon" in caught.value.message


@pytest.mark.parametrize(
    ("cli_request", "mcp_call", "code"),
    [
        (p.MemorySearch(vault="v", query="\ud800"), p.ToolSearch(query="\ud800"), "invalid_utf8"),
        (p.MemoryRead(vault="v", id="a", revision=2**70), p.ToolRead(id="a", revision=2**70), "invalid_argument"),
    ],
)
async def test_the_cli_and_the_mcp_server_give_the_same_code_for_the_same_bad_argument(
    tmp_path: Path, cli_request: p.ClientRequest[object], mcp_call: p.ToolCall, code: str
) -> None:
    """Both fail before connecting (no daemon is needed): the argument cannot be encoded."""
    home = Home(str(tmp_path), str(tmp_path / "config.toml"))
    with pytest.raises(MemoriesError) as cli:
        Client(home).request(cli_request)
    with pytest.raises(MemoriesError) as mcp:
        await link.request(home, p.Granted(token="t", call=mcp_call))
    assert cli.value.code == mcp.value.code == code


@pytest.mark.parametrize(
    ("request_", "field"),
    [
        (p.RagSearch(vault="v", query="q", tags=[""]), "tags[0]"),
        (p.MemoryList(vault="v", source=""), "source"),
        (p.MemorySearch(vault="v", query="q", meta={"k": "v" * 2000}), "meta[...]"),
    ],
)
def test_a_value_beyond_a_fields_bounds_is_invalid_argument_naming_the_field(
    tmp_path: Path, request_: p.ClientRequest[object], field: str
) -> None:
    """The daemon's decoding checks the fields' bounds (an empty ``--tag``, a metadata value over 1,024 code
    points): the argument's fault, not a wire format the two ends disagree on."""
    home = Home(str(tmp_path), str(tmp_path / "config.toml"))
    with pytest.raises(MemoriesError) as bounds:
        server._decode(encode_request(home, request_))
    assert bounds.value.code == "invalid_argument" and bounds.value.message.startswith(f"{field}: Expected `")


def test_a_value_of_the_wrong_type_is_still_a_protocol_error() -> None:
    envelope = {
        "protocol": p.PROTOCOL_VERSION,
        "home": "/h",
        "config": "/c",
        "request": {"$type": "MemoryList", "vault": 5},
    }
    with pytest.raises(MemoriesError) as wrong:
        server._decode(msgspec.msgpack.encode(envelope))
    assert wrong.value.code == "protocol_error"

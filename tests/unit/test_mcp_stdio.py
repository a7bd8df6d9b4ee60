"""The answer to each line the MCP SDK's stdio reader cannot read (memories/mcp/stdio.py)."""

from __future__ import annotations

import json

import mcp.types as types
import pytest
from pydantic import ValidationError

from memories.mcp.stdio import refusal


def _refusal_of(line: str) -> types.JSONRPCError | None:
    """What the SDK's reader passes on for ``line`` (the exception of its strict parse), answered."""
    with pytest.raises(ValidationError) as raised:
        types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    return refusal(raised.value)


@pytest.mark.parametrize("request_id", [7, "call-7", 0])
def test_a_request_with_a_lone_surrogate_is_refused_to_its_own_id(request_id: int | str) -> None:
    line = (
        f'{{"jsonrpc": "2.0", "id": {json.dumps(request_id)}, "method": "tools/call", "params": {{"q": "x\\udfff"}}}}'
    )
    error = _refusal_of(line)
    assert error is not None and error.id == request_id and error.error.code == types.INVALID_REQUEST
    assert error.error.message.startswith("invalid_argument: the request is not valid JSON text: a string is not ")


@pytest.mark.parametrize(
    ("line", "code", "message"),
    [
        ("not json", types.PARSE_ERROR, "protocol_error: the message is not JSON: expected ident at line 1 column 2"),
        ('{"jsonrpc": "2.0", "id": 4', types.PARSE_ERROR, "protocol_error: the message is not JSON: "),
        ("[1, 2]", types.INVALID_REQUEST, "protocol_error: not a JSON-RPC message"),
        ('{"jsonrpc": "2.0", "id": 5, "method": "x", "params": 5}', types.INVALID_REQUEST, "protocol_error: not a "),
        ('["\\ud800"]', types.INVALID_REQUEST, "protocol_error: not valid JSON text: a string is not valid Unicode"),
        # an id that cannot be sent back, or is no id (a boolean), is answered as unknown
        ('{"jsonrpc": "2.0", "id": "\\ud800", "method": "x"}', types.INVALID_REQUEST, "protocol_error: "),
        ('{"jsonrpc": "2.0", "id": true, "method": "\\ud800"}', types.INVALID_REQUEST, "protocol_error: "),
    ],
)
def test_a_message_whose_id_cannot_be_read_is_answered_with_a_null_id(line: str, code: int, message: str) -> None:
    error = _refusal_of(line)
    assert error is not None and error.id is None and error.error.code == code
    assert error.error.message.startswith(message)
    assert "\n" not in error.error.message


@pytest.mark.parametrize(
    "line",
    [
        '{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"reason": "\\ud800"}}',
        '{"jsonrpc": "2.0", "id": 3, "result": {"text": "\\ud800"}}',
    ],
)
def test_a_notification_or_a_response_is_never_answered(line: str) -> None:
    assert _refusal_of(line) is None

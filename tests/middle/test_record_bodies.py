"""What a body written now must be (memories/vault/rules.py ``new_body``), through the daemon's middle."""

from __future__ import annotations

import pytest

from memories import protocol as p
from memories.errors import MemoriesError
from tests.fixtures.middle import Middle


async def test_a_body_written_now_holds_no_nul_byte(middle: Middle) -> None:
    """Issue 29, item 8: ``memory add`` stored NUL bytes that ``rag ingest`` refuses; an update is held to it too, and
    what was stored before is left as it was."""
    with pytest.raises(MemoriesError) as refused:
        await middle.ok(p.MemoryAdd(vault="notes", kind="memory", sensitivity="general", title="t", body=b"a\x00b"))
    assert refused.value.code == "invalid_argument" and "NUL" in refused.value.message
    ref = await middle.add("plain text")
    with pytest.raises(MemoriesError) as refused:
        await middle.ok(p.MemoryUpdate(vault="notes", id=ref.id, body=b"x\x00"))
    assert refused.value.code == "invalid_argument"
    assert (await middle.ok(p.MemoryRead(vault="notes", id=ref.id))).body == "plain text"
    assert [record.id for record in (await middle.ok(p.MemoryList(vault="notes"))).records] == [ref.id]

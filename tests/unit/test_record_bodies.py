"""Bodies of ``memory add|update`` from ``--file`` or standard input (memories/cli/memory.py), in process."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from memories.cli.memory import _body, read_limited
from memories.errors import MemoriesError
from memories.limits import MAX_BODY_BYTES

BOM = b"\xef\xbb\xbf"


def test_a_file_saved_with_a_bom_gives_its_text_without_it(tmp_path: Path) -> None:
    """As ``rag ingest`` does: Windows editors write the BOM; it marks the encoding and is not part of the note,
    so the body, its chunks and their byte offsets start at the text."""
    note = tmp_path / "note.md"
    note.write_bytes(BOM + "# 標題\n\nbody".encode())
    assert _body(None, str(note), required=True) == "# 標題\n\nbody".encode()


def test_standard_input_with_a_bom_gives_its_text_without_it() -> None:
    assert read_limited(io.BytesIO(BOM + b"text"), "standard input") == b"text"


def test_the_size_limit_counts_the_text_after_the_bom(tmp_path: Path) -> None:
    largest = tmp_path / "largest.md"
    largest.write_bytes(BOM + b"a" * MAX_BODY_BYTES)
    assert len(_body(None, str(largest), required=True) or b"") == MAX_BODY_BYTES
    with pytest.raises(MemoriesError) as raised:
        read_limited(io.BytesIO(BOM + b"a" * (MAX_BODY_BYTES + 1)), "standard input")
    assert raised.value.code == "body_too_large"


def test_a_bom_given_in_body_is_kept() -> None:
    """``--body`` is the user's own text, not a file's encoding: it stays as typed."""
    assert _body("\ufeffx", None, required=True) == BOM + b"x"

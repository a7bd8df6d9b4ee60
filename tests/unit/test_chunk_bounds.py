"""Chunk size holds for any text (issue 29, item 10): a note of combining marks (or of characters joined by ZWJ)
was cut into about one chunk per character, because a hard cut backed off over the whole run to keep a character
with its marks, and so did the next chunk's start: a 1 MB note made 499,234 chunks, its vault went over the index's
chunk limit (unsearchable), and the shared index worker spent a minute on it while another vault's search waited.
Now a hard cut backs off at most :data:`~memories.rag.chunking.MAX_CLUSTER` code points, and chunks start at
least :func:`~memories.rag.chunking.min_advance` code points apart, so a body of ``n`` bytes has at most
``n // min_advance + 1`` chunks; ordinary text is cut exactly as before (its chunk hashes, which kept vectors are
keyed by, are pinned below)."""

from __future__ import annotations

import hashlib
import itertools

import pytest

from memories.rag.analysis import analyze_query
from memories.rag.chunking import CHUNK_OVERLAP, MAX_CHUNK_CHARS, chunk_text, min_advance
from memories.rag.vault_index import IndexRecord, VaultIndex
from ops.corpus import load_notes
from tests.unit.test_chunking import _check_invariants
from tests.unit.test_hostile_text import ceiling

MB = 1_000_000

HOSTILE = {
    "combining marks": "\u0301" * (MB // 2),
    "a letter and its marks": "a" + "\u0300\u0301\u0302\u0303" * (MB // 8),
    "ZWJ-joined letters": "a\u200d" * (MB // 4),
    "ZWJ-joined emoji": "👩\u200d" * (MB // 7),
    "variation selectors": "\ufe0f" * (MB // 3),
    "skin tone modifiers": "\U0001f3fb" * (MB // 4),
    "Zalgo words": ("z" + "\u0336" * 60 + " ") * (MB // 124),
}


@pytest.mark.parametrize("body", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_megabyte_of_marks_or_joiners_makes_a_bounded_number_of_chunks(body: str) -> None:
    size = len(body.encode())
    with ceiling("chunking 1 MB of marks"):
        chunks = chunk_text(body)
    assert len(chunks) <= size // 500, f"{len(chunks):,} chunks for {size:,} bytes"
    assert len(chunks) <= len(body) // min_advance(MAX_CHUNK_CHARS) + 1
    _check_invariants(body, chunks)


def test_the_bound_holds_for_any_text_at_any_size() -> None:
    """Starts at least ``min_advance`` apart, whatever the text (whitespace runs, marks, tiny windows)."""
    bodies = [*HOSTILE.values(), ("y" * 100 + " " * 600 + "\n\n") * 100, ("x" + " " * 383) * 300, "e\u0301 " * 9000]
    for body in bodies:
        for max_chars, overlap in ((MAX_CHUNK_CHARS, CHUNK_OVERLAP), (80, 30), (16, 7), (3, 1)):
            chunks = chunk_text(body[:50_000], max_chars=max_chars, overlap=overlap)
            starts = [chunk.start for chunk in chunks]
            gaps = [b - a for a, b in itertools.pairwise(starts)]
            assert min(gaps, default=max_chars) >= min_advance(max_chars), (max_chars, overlap)


def test_a_vault_with_a_megabyte_of_marks_stays_searchable() -> None:
    """Its 499,234 chunks put the vault over the index's 10,000-chunk limit: ``vault_too_large`` for every search."""
    index = VaultIndex("vault")
    hostile = IndexRecord(id="h", revision=1, kind="card", title="marks", body=HOSTILE["combining marks"])
    plain = IndexRecord(id="p", revision=1, kind="card", title="ferns", body="Ferns grow in the shade of oaks.")
    with ceiling("indexing 1 MB of marks"):
        index.apply([hostile, plain], [])
    assert [hit.row.record_id for hit in index.search(analyze_query("ferns shade"))] == ["p"]
    assert len(index.record_rows("h")) <= len(HOSTILE["combining marks"].encode()) // 500


def test_ordinary_text_is_cut_exactly_as_before() -> None:
    """The spans and hashes of every chunk of the sample corpus, and of text with short clusters, as the chunker
    before issue 29 cut them: a change here invalidates every kept vector."""
    digest = hashlib.sha256()
    bodies = [note.body for note in load_notes()]
    bodies += ["e\u0301" * 5000, "👩\u200d💻" * 3000, "Zalgo t\u0301\u0302\u0303\u0304\u0305ext " * 500]
    bodies += [("a" * 700 + " ") * 20, ("x" + " " * 383) * 50, "测试。" * 3000]
    count = 0
    for body in bodies:
        for chunk in chunk_text(body):
            digest.update(f"{chunk.start},{chunk.end},{chunk.chunk_hash};".encode())
            count += 1
    assert (len(bodies), count, digest.hexdigest()) == (
        317,
        4945,
        "21d8d2bac92716fa0c481a229cd54e29725362f7d28fafb5e4158994054f883b",
    )

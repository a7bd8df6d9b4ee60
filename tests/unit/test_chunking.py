"""Chunk offsets, sizes, overlap and coverage (R-16, issue 3 acceptance 3)."""

from __future__ import annotations

import hashlib
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.rag.chunking import CHUNK_OVERLAP, MAX_CHUNK_CHARS, Chunk, chunk_text
from ops.corpus import load_notes


def _corpus_bodies() -> list[tuple[str, str]]:
    """``(path, body)`` of every note listed in ``MANIFEST.tsv`` (a leading BOM is not part of the body)."""
    return [(note.id, note.body) for note in load_notes()]


def _check_invariants(body: str, chunks: list[Chunk], max_chars: int = MAX_CHUNK_CHARS) -> None:
    encoded = body.encode()
    for chunk in chunks:
        assert body[chunk.start : chunk.end] == chunk.text
        assert encoded[chunk.byte_start : chunk.byte_end].decode() == chunk.text
        assert 0 < len(chunk.text) <= max_chars
        assert chunk.text.strip() == chunk.text
        assert chunk.chunk_hash == hashlib.sha256(chunk.text.encode()).hexdigest()
    starts = [chunk.start for chunk in chunks]
    assert starts == sorted(set(starts))
    covered = bytearray(len(body))
    for chunk in chunks:
        covered[chunk.start : chunk.end] = b"\x01" * (chunk.end - chunk.start)
    assert all(covered[index] or char.isspace() for index, char in enumerate(body))


def test_every_corpus_chunk_maps_to_its_bytes() -> None:
    notes = _corpus_bodies()
    assert len(notes) == 311
    for _path, body in notes:
        _check_invariants(body, chunk_text(body))


def test_emoji_is_one_chunk_with_byte_span() -> None:
    [chunk] = chunk_text("A😀B")
    assert (chunk.text, chunk.start, chunk.end, chunk.byte_start, chunk.byte_end) == ("A😀B", 0, 3, 0, 6)


@pytest.mark.parametrize("body", ["x" * 5000, "测试" * 1000], ids=["latin", "han"])
def test_text_without_boundaries_is_cut_hard(body: str) -> None:
    chunks = chunk_text(body)
    assert len(chunks) > 1
    _check_invariants(body, chunks)
    assert chunks[-1].end == len(body)


@pytest.mark.parametrize("body", ["", " ", "\n\n \t\u3000 \n"])
def test_empty_or_whitespace_body_has_no_chunks(body: str) -> None:
    assert chunk_text(body) == []


def test_cuts_prefer_paragraphs_then_sentences() -> None:
    paragraph = "Lorem ipsum dolor sit amet. " * 20  # 560 code points of sentences
    body = paragraph.strip() + "\n\n" + paragraph.strip()
    first = chunk_text(body)[0]
    assert first.end == len(paragraph.strip())  # the paragraph break, not a later sentence end
    han = "这是一个句子，有逗号。" * 100
    assert all(chunk.text.endswith("。") for chunk in chunk_text(han)[:-1])


def test_sentence_end_keeps_closing_quote() -> None:
    body = "于是他说：「走吧。」" + "然后" * 400
    assert chunk_text(body, max_chars=16, overlap=4)[0].text == "于是他说：「走吧。」"


def test_consecutive_chunks_of_long_text_overlap() -> None:
    body = " ".join(f"Sentence number {index} ends here." for index in range(400))
    chunks = chunk_text(body)
    assert len(chunks) > 5
    for previous, current in itertools.pairwise(chunks):
        overlap = previous.end - current.start
        assert CHUNK_OVERLAP // 2 <= overlap <= CHUNK_OVERLAP * 2
        assert len(previous.text) >= MAX_CHUNK_CHARS // 2


def test_hard_cut_keeps_combining_marks_and_joiners_together() -> None:
    body = "e\u0301" * 50 + "👩\u200d💻" * 50
    for chunk in chunk_text(body, max_chars=25, overlap=5):
        assert chunk.text[0] not in "\u0301\u200d💻"
        assert not chunk.text.endswith("\u200d")


def test_invalid_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        chunk_text("text", max_chars=10, overlap=5)
    with pytest.raises(ValueError):
        chunk_text("text", max_chars=0, overlap=0)


_PIECES = st.sampled_from(
    ["a", "word", " ", "  ", "\n", "\n\n", "\t", "\u3000", ".", "!", "?", "。", "！", "？", "…", "」", ")", "，", "、",
     "；", ":", ",", "测试", "資料庫", "😀", "👩\u200d💻", "e\u0301", "ß", "\ufeff"]
)  # fmt: skip
_TEXTS = st.one_of(
    st.text(),
    st.lists(_PIECES, max_size=400).map("".join),
    st.lists(st.one_of(_PIECES, st.text(max_size=5)), max_size=200).map("".join),
)


@settings(deadline=None, max_examples=300)
@given(body=_TEXTS, max_chars=st.integers(1, 80), overlap_share=st.floats(0, 0.49))
def test_random_texts_keep_every_invariant(body: str, max_chars: int, overlap_share: float) -> None:
    overlap = int(max_chars * overlap_share)
    chunks = chunk_text(body, max_chars=max_chars, overlap=overlap)
    _check_invariants(body, chunks, max_chars)
    assert (chunks == []) == (body.strip() == "")


@settings(deadline=None, max_examples=50)
@given(body=st.lists(_PIECES, min_size=300, max_size=1500).map("".join))
def test_random_texts_with_default_sizes(body: str) -> None:
    _check_invariants(body, chunk_text(body))

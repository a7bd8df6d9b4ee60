"""Chunking: cut a record body into overlapping pieces that BM25, vectors and citations share (R-16).

A chunk is an exact slice of the body, at most ``MAX_CHUNK_CHARS`` code points, that starts and ends on
non-whitespace. Consecutive chunks overlap by about ``CHUNK_OVERLAP`` code points so that a sentence cut at a
chunk edge is still whole in one of them. Cuts prefer, in this order::

    paragraph break   a blank line
    sentence end      。！？… or .!? followed by space or the end, with closing quotes/brackets after them
    line break        a single newline (lists, tables and code have no sentence ends)
    clause or space   ，、；：,;: or whitespace
    hard              anywhere, but never between a character and its combining marks or joiners (within
                      MAX_CLUSTER code points: a longer run of them has no place to part)

Chunk size holds for any text: consecutive chunks start at least :func:`min_advance` code points apart, so a body
of ``n`` UTF-8 bytes has at most ``n // min_advance(max_chars) + 1`` chunks (8,193 for 768 KiB at the default
sizes); a note's share of the index grows with its size, never with what it is made of (issue 29, item 10: a 1 MB
note of combining marks was cut into 499,234 chunks). Ordinary text never meets either bound, so its chunks (and
the hashes its kept vectors are keyed by) are what they were.

Each chunk carries its code point span (``start``/``end``, what Python slices with) and its UTF-8 byte span
(``byte_start``/``byte_end``, what results report, R-10), both half-open, and the SHA-256 of its UTF-8 text.

>>> [(c.text, c.byte_start, c.byte_end) for c in chunk_text("A😀B")]
[('A😀B', 0, 6)]
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from bisect import bisect_left, bisect_right

import msgspec

MAX_CHUNK_CHARS = 768
"""Largest chunk in code points (R-16)."""

CHUNK_OVERLAP = 128
"""Usual overlap between consecutive chunks in code points (R-16)."""


def min_advance(max_chars: int) -> int:
    """Fewest code points from one chunk's start to the next one's (96 at the default sizes): so a body of ``n``
    code points (at least ``n`` UTF-8 bytes) has at most ``n // min_advance(max_chars) + 1`` chunks, whatever it
    holds (issue 29, item 10). Ordinary text never comes near it: its chunks start about ``max_chars - overlap``
    apart."""
    return max(1, max_chars // 8)


MAX_CLUSTER = 32
"""Most code points a hard cut backs off to keep a character with its combining marks and joiners: Unicode's
stream-safe text format (UAX #15) allows 30 non-starters in a row, and no real character needs more."""

# Boundary patterns. Each match yields one cut position p: body[:p] ends a unit, body[p:] starts the next one
# (after its leading whitespace). Whitespace-like separators cut before themselves, punctuation after itself.
# Linear on any text: no quantifier gives back what it took (possessive), and an ASCII sentence end is only tried
# where its run of ``.!?`` begins (the lookbehind), not again from each dot of a run that failed (16,000 dots took
# 14 s when it was).
_PARAGRAPH = re.compile(r"\n[^\S\n]*+\n")
_SENTENCE = re.compile(r"[。！？…]++[”’」』）》)\]\"']*+|(?<![.!?])[.!?]++[”’」』）》)\]\"']*+(?=\s|\Z)")
_LINE = re.compile(r"\n")
_CLAUSE = re.compile(r"[，、；：,;:]")
_SPACE = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")

# Characters that continue the previous one and must stay with it: zero width joiner, variation selectors,
# emoji skin tone modifiers (combining marks are found through unicodedata).
_JOINER = "\u200d"
_CONTINUATIONS = frozenset("\u200d\ufe0e\ufe0f" + "".join(map(chr, range(0x1F3FB, 0x1F400))))


class Chunk(msgspec.Struct, frozen=True):
    """One piece of a record body.

    Attributes:
        text: exactly ``body[start:end]``; never empty except in the title-only chunk a caller makes for an
            empty body.
        start, end: half-open span in code points.
        byte_start, byte_end: half-open span in UTF-8 bytes of the body (R-10); a body that began with a BOM
            counts from the first byte after it, because the caller strips it before chunking.
        chunk_hash: SHA-256 hex digest of the UTF-8 ``text``; stable across processes and versions.
    """

    text: str
    start: int
    end: int
    byte_start: int
    byte_end: int
    chunk_hash: str


def chunk_text(
    body: str, *, begin: int = 0, max_chars: int = MAX_CHUNK_CHARS, overlap: int = CHUNK_OVERLAP
) -> list[Chunk]:
    """Cut ``body`` into chunks of at most ``max_chars`` code points overlapping by about ``overlap``.

    The end of a chunk is the last boundary of the best class found in the back half of its window, so chunks
    are not tiny; the next chunk starts at the boundary nearest to ``end - overlap`` (within a quarter of the
    overlap), else exactly there, and never less than :func:`min_advance` after the previous start (unless the
    previous chunk ended sooner). Starts strictly increase, every non-whitespace character of the body lies in
    some chunk, and no chunk begins or ends with whitespace. Time and memory are linear in ``len(body)``, and so is
    the number of chunks, at most ``len(body) // min_advance(max_chars) + 1``.

    Args:
        body: the record body (a ``str`` without lone surrogates, as decoded from UTF-8).
        begin: code point offset where the chunked text starts (after a note's front matter); spans still count
            from the start of ``body``.
        max_chars: largest chunk in code points.
        overlap: wanted overlap in code points.

    Returns:
        The chunks in body order; ``[]`` for an empty or whitespace-only body.

    Raises:
        ValueError: ``max_chars < 1``, ``overlap < 0`` or ``2 * overlap >= max_chars`` (the next window would
            not reach past the previous chunk).

    >>> [c.text for c in chunk_text("One. Two. Three. Four.", max_chars=12, overlap=4)]
    ['One. Two.', 'Two. Three.', 'ree. Four.']
    """
    if max_chars < 1 or overlap < 0 or 2 * overlap >= max_chars:
        raise ValueError(f"need max_chars >= 1 and 0 <= 2 * overlap < max_chars, got {max_chars}, {overlap}")
    text_end = len(body.rstrip())
    start = _skip_space(body, begin)
    if start >= text_end:
        return []
    boundaries = _Boundaries(body)
    byte_offsets = _ByteOffsets(body)
    chunks: list[Chunk] = []
    uncovered = start  # first non-whitespace position not yet inside a chunk
    while True:
        window_end = start + max_chars
        if window_end >= text_end:
            end = text_end
        else:
            floor = max(start + max_chars // 2, uncovered)
            cut = boundaries.last_cut(floor, window_end)
            if cut is None:
                cut = _back_off(body, window_end, floor)
            end = _trim_end(body, cut)
        text = body[start:end]
        chunks.append(
            Chunk(
                text=text,
                start=start,
                end=end,
                byte_start=byte_offsets.at(start),
                byte_end=byte_offsets.at(end),
                chunk_hash=hashlib.sha256(text.encode()).hexdigest(),
            )
        )
        if end >= text_end:
            return chunks
        uncovered = _skip_space(body, end)
        start = _next_start(body, boundaries, start, end, overlap, least=start + min_advance(max_chars))
        if start + max_chars <= uncovered:
            # A whitespace gap wider than the window: overlapping would not reach new text.
            start = uncovered


class _Boundaries:
    """Sorted cut positions of one body, per boundary class, best class first."""

    def __init__(self, body: str) -> None:
        clause_or_space = sorted([m.end() for m in _CLAUSE.finditer(body)] + [m.start() for m in _SPACE.finditer(body)])
        self._classes: tuple[list[int], ...] = (
            [m.start() for m in _PARAGRAPH.finditer(body)],
            [m.end() for m in _SENTENCE.finditer(body)],
            [m.start() for m in _LINE.finditer(body)],
            clause_or_space,
        )

    def last_cut(self, floor: int, ceiling: int) -> int | None:
        """The last cut in ``(floor, ceiling]`` of the best class that has one, else ``None``."""
        for cuts in self._classes:
            index = bisect_right(cuts, ceiling) - 1
            if index >= 0 and cuts[index] > floor:
                return cuts[index]
        return None

    def nearest_cut(self, target: int, low: int, high: int) -> int | None:
        """The cut in ``[low, high]`` nearest to ``target``, of the best class that has one, else ``None``."""
        for cuts in self._classes:
            index = bisect_left(cuts, target)
            near = [cuts[i] for i in (index - 1, index) if 0 <= i < len(cuts) and low <= cuts[i] <= high]
            if near:
                return min(near, key=lambda cut: abs(cut - target))
        return None


class _ByteOffsets:
    """UTF-8 byte offset of a code point offset, moving a cursor so each call costs the distance moved."""

    def __init__(self, body: str) -> None:
        self._body = body
        self._ascii = body.isascii()
        self._index = 0
        self._byte = 0

    def at(self, index: int) -> int:
        """UTF-8 byte offset of code point offset ``index``."""
        if self._ascii:
            return index
        if index >= self._index:
            self._byte += len(self._body[self._index : index].encode())
        else:
            self._byte -= len(self._body[index : self._index].encode())
        self._index = index
        return self._byte


def _next_start(body: str, boundaries: _Boundaries, start: int, end: int, overlap: int, least: int) -> int:
    """Where the chunk after ``body[start:end]`` begins: near ``end - overlap``, after ``start``, and not before
    ``least`` unless the chunk ends first (then at its end: the text after it is new)."""
    target = end - overlap
    slack = overlap // 4
    low, high = max(start + 1, target - slack), min(end, target + slack)
    cut = boundaries.nearest_cut(target, low, high) if low <= high else None
    if cut is None:
        cut = _back_off(body, max(target, start + 1), start)
    return _skip_space(body, max(cut, min(least, end)))


def _back_off(body: str, index: int, floor: int) -> int:
    """Move a hard cut left (not to ``floor`` or below, nor more than :data:`MAX_CLUSTER` code points) until it falls
    between two characters that may part; where none is that near, the cut stays at ``index``: a run of combining
    marks or joined characters longer than any real character has no place to part, and backing off over it made
    about one chunk per character (issue 29, item 10)."""
    moved = index
    while moved - 1 > floor and moved < len(body) and _continues(body, moved):
        if index - moved >= MAX_CLUSTER:
            return index
        moved -= 1
    return moved


def _continues(body: str, index: int) -> bool:
    """Whether ``body[index]`` belongs to the character before it (combining mark, joiner, modifier)."""
    char = body[index]
    return char in _CONTINUATIONS or body[index - 1] == _JOINER or unicodedata.combining(char) != 0


def _skip_space(body: str, index: int) -> int:
    """The first non-whitespace position at or after ``index`` (``len(body)`` if none)."""
    match = _NON_SPACE.search(body, index)
    return match.start() if match else len(body)


def _trim_end(body: str, end: int) -> int:
    """``end`` moved left over trailing whitespace."""
    while end > 0 and body[end - 1].isspace():
        end -= 1
    return end

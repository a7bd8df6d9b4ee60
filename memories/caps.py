"""The size cap of every MCP tool result, and how results are cut to fit it.

An AI client pastes a tool result into its model's context, so a result must stay small whatever the vault holds
(a 300 KB note, 500 matching notes). Every result of ``memory_search``, ``memory_read`` and ``memory_retrieve``
stays under both:

- :data:`MAX_RESULT_TOKENS` = 8,000 **estimated tokens**: one per CJK character (Han, kana, Hangul, CJK and
  full-width punctuation: tokenizers give Chinese text about one token per character) and one per four other
  characters (the usual figure for English and JSON). 8,000 keeps a result below Claude Code's warning for a large
  MCP result (10,000 tokens; its hard default is 25,000) with room for the client's own framing.
- :data:`MAX_RESULT_CHARS` = 24,000 **characters** of the JSON document, which bounds Latin text (about 6,000
  tokens) and clients that count characters rather than tokens.

Searches keep whole hits in rank order until the next one would not fit, then say ``"truncated": true`` and how
many hits were ``omitted``; ``memory_read`` cuts the body into pages on code point boundaries and gives the
``next_offset`` (UTF-8 bytes) of the rest.

The answer of ``rag ask`` has a cap of its own, the same for the CLI and ``memory_ask`` (:func:`cut_answer`, applied
once, in the daemon): half the result cap, :data:`MAX_ANSWER_TOKENS` = 4,000 estimated tokens and
:data:`MAX_ANSWER_CHARS` = 12,000 characters, so an answer always leaves the other half of a ``memory_ask`` result
to its citations. It is far above what the default ``[rag.generation] max_output_tokens`` (1,024) lets a service
write; only a raised ``max_output_tokens`` or a service that ignores it reaches it, and then the answer is cut and
says so (``answer_truncated``) rather than flooding a terminal or a client's context.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeVar

import msgspec

MAX_RESULT_TOKENS = 8_000
MAX_RESULT_CHARS = 24_000
MAX_ANSWER_TOKENS = MAX_RESULT_TOKENS // 2
MAX_ANSWER_CHARS = MAX_RESULT_CHARS // 2

T = TypeVar("T")

_CJK_RANGES = (
    (0x2E80, 0x9FFF),  # CJK radicals, punctuation, kana, Bopomofo, Hangul compatibility, CJK unified ideographs
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),  # Hangul syllables
    (0xF900, 0xFAFF),  # CJK compatibility ideographs
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFFEF),  # full-width forms
    (0x20000, 0x3FFFF),  # CJK extensions B and later
)


def is_cjk(char: str) -> bool:
    """The character counts as one token on its own (see the module docstring)."""
    code = ord(char)
    return any(low <= code <= high for low, high in _CJK_RANGES)


class Cost(msgspec.Struct, frozen=True):
    """What a piece of a JSON document costs: ``cjk`` characters, ``other`` characters (JSON escapes included)."""

    cjk: int = 0
    other: int = 0

    def __add__(self, more: Cost) -> Cost:
        return Cost(self.cjk + more.cjk, self.other + more.other)

    @property
    def tokens(self) -> int:
        return self.cjk + math.ceil(self.other / 4)

    @property
    def chars(self) -> int:
        return self.cjk + self.other

    def fits(self, tokens: int = MAX_RESULT_TOKENS, chars: int = MAX_RESULT_CHARS) -> bool:
        """Within ``tokens`` estimated tokens and ``chars`` characters (default: the result cap)."""
        return self.tokens <= tokens and self.chars <= chars


def cost_of(value: object) -> Cost:
    """The cost of ``value`` encoded as JSON (UTF-8, non-ASCII kept as characters), as the client will see it."""
    text = msgspec.json.encode(value).decode("utf-8")
    cjk = sum(1 for char in text if char >= "\u2e80" and is_cjk(char))
    return Cost(cjk, len(text) - cjk)


def _char_cost(char: str) -> Cost:
    if char >= "\u2e80" and is_cjk(char):
        return Cost(1, 0)
    if char in '"\\\n\r\t\b\f':
        return Cost(0, 2)
    if char < " ":
        return Cost(0, 6)  # \u00XX
    return Cost(0, 1)


def fit_hits(hits: Sequence[T], overhead: Cost) -> tuple[list[T], int]:
    """The longest prefix of ``hits`` (rank order) whose JSON, with ``overhead`` for the rest of the document,
    fits the cap; and how many hits were left out."""
    total = overhead
    kept: list[T] = []
    for hit in hits:
        total = total + cost_of(hit) + Cost(0, 1)  # the comma between items
        if not total.fits():
            break
        kept.append(hit)
    return kept, len(hits) - len(kept)


def page(
    body: str, start_char: int, overhead: Cost, tokens: int = MAX_RESULT_TOKENS, chars: int = MAX_RESULT_CHARS
) -> int:
    """The end (a code point index, exclusive) of the page of ``body`` that starts at ``start_char`` and fits the
    cap (``tokens``, ``chars``; default the result cap) with ``overhead`` for the rest of the document; at least one
    character when any is left."""
    total = overhead
    end = start_char
    while end < len(body):
        total = total + _char_cost(body[end])
        if not total.fits(tokens, chars) and end > start_char:
            break
        end += 1
    return end


def cut_answer(answer: str) -> tuple[str, bool]:
    """``answer`` within the answer cap (:data:`MAX_ANSWER_TOKENS`, :data:`MAX_ANSWER_CHARS`, as a JSON string),
    cut at a code point boundary and ending with an ellipsis when it was longer; and whether it was cut.

    >>> cut_answer("Nightly, at two [S1].")
    ('Nightly, at two [S1].', False)
    >>> text, cut = cut_answer("农" * 5_000)
    >>> len(text), text[-2:], cut
    (4000, '农…', True)
    """
    if cost_of(answer).fits(MAX_ANSWER_TOKENS, MAX_ANSWER_CHARS):
        return answer, False
    quotes_and_ellipsis = Cost(0, 3)
    end = page(answer, 0, quotes_and_ellipsis, MAX_ANSWER_TOKENS, MAX_ANSWER_CHARS)
    return cut_text(answer, end), True


SNIPPET_STEPS = (512, 256, 128, 64, 0)
"""Characters each citation's text is cut to, in turn, until an answer fits the cap."""


def cut_text(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters with an ellipsis (unchanged when it is no longer)."""
    return text if len(text) <= limit else text[:limit] + "…"

"""Citation-like forms in a generated answer, read however a model writes them (R-43; issue 29, item 14).

A generated answer may cite a source in any of the forms models write, and every one is read, so that no label
that was not sent slips past the check in :func:`memories.rag.answers.parse_answer`:

- the text is first normalized by NFKC and case folding: full-width ``［Ｓ７］`` and ``（Ｓ７）`` read as ``[s7]`` and
  ``(s7)``, full-width and other Unicode digits as digits, ``S`` in any case, and the Cyrillic ``Ѕ`` that looks
  like it, as ``s``;
- a citation is a bracket (``[]``, ``()``, ``{}``, ``【】``, ``〔〕``, ``〖〗``, in any pairing) that holds labels and
  nothing else: ``[S7]``, ``(S7)``, ``[s7]``, ``[S 7]``, ``[S#7]``, ``[S07]``, ``[Source 7]``;
- several labels: ``[S1, S3]``, ``[S1; S3]``, ``【S1、S3】``, ``[S1 S3]``, ``[S1 and S3]``, ``[S1/S3]``;
- ranges: ``[S1-S7]``, ``[S1–7]``, ``[S1 to S7]``, ``[S1~S7]``, ``【S1至S7】``, which cite every label in them.

A bracket that holds anything else cites nothing (``[Section 4]``, ``[S3 bucket]``), nor does a label outside
brackets (``Amazon S3``, ``Galaxy S7``): those are words, not citations. Each entry of the reply's
``citations`` list is read by the same rules, with or without its brackets.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

MAX_GROUP_CHARS = 120
"""Longest text inside one bracket read as a citation (after normalization): more is prose."""

RANGE_LISTED = 50
"""A range over more labels than this, or than were sent, is named as the range when it does not resolve; a
shorter one names each label it holds that was not sent."""

_OPEN = "[({【〔〖"
_CLOSE = "])}】〕〗"
_GROUP = re.compile(f"[{re.escape(_OPEN)}]([^{re.escape(_OPEN + _CLOSE)}]{{1,{MAX_GROUP_CHARS}}})[{re.escape(_CLOSE)}]")

_NUMBER = r"(\d{1,9})"
_LABEL = rf"(?:sources?|[sѕ])\s*#?\s*{_NUMBER}"
_ITEM = rf"{_LABEL}(?:\s*(?:-|‐|‑|–|—|~|〜|\.\.|to|至|到)\s*(?:{_LABEL}|{_NUMBER}))?"
_SEPARATOR = r"\s*(?:,|;|、|/|&|\+|and|和|与|與|及)?\s*"
_CITATION = re.compile(rf"{_ITEM}(?:{_SEPARATOR}{_ITEM})*")
_ITEMS = re.compile(_ITEM)


@dataclass(frozen=True)
class Cited:
    """One cited label or range: ``first`` … ``last`` (equal for a single label), as written by the model."""

    first: int
    last: int

    def labels(self, sent: int) -> list[str] | None:
        """``S<first>`` … ``S<last>``, or ``None`` when the range spans more than ``sent`` labels and
        :data:`RANGE_LISTED` (so it cannot resolve, and is not spelled out)."""
        if self.last - self.first + 1 > max(sent, RANGE_LISTED):
            return None
        return [f"S{n}" for n in range(self.first, self.last + 1)]

    def __str__(self) -> str:
        return f"S{self.first}" if self.first == self.last else f"S{self.first}-S{self.last}"


def normalized(text: str) -> str:
    """``text`` as the forms are matched: NFKC, case folded.

    >>> normalized("［Ｓ７］ and 【S1】")
    '[s7] and 【s1】'
    """
    return unicodedata.normalize("NFKC", text).casefold()


def _read_group(inner: str) -> list[Cited] | None:
    """The labels of one bracket's text (normalized), or ``None`` when it is not a citation."""
    inner = inner.strip()
    if not _CITATION.fullmatch(inner):
        return None
    found = []
    for match in _ITEMS.finditer(inner):
        first = int(match.group(1))
        last = match.group(2) or match.group(3)
        end = int(last) if last else first
        found.append(Cited(min(first, end), max(first, end)))
    return found


def inline_citations(answer: str) -> list[Cited]:
    """Every label or range cited in the answer's text, in order; linear in the text's length.

    >>> [str(c) for c in inline_citations("A [S2] and (s1, S3); 甲【Ｓ４、S5】 [S6–S8] ([Section 4], Amazon S3)")]
    ['S2', 'S1', 'S3', 'S4', 'S5', 'S6-S8']
    """
    found: list[Cited] = []
    for match in _GROUP.finditer(normalized(answer)):
        group = _read_group(match.group(1))
        if group:
            found.extend(group)
    return found


def listed_citation(entry: str) -> list[Cited] | None:
    """The labels of one entry of the reply's ``citations`` list (``"S1"``, ``"s1"``, ``"[S1]"``, ``"S1-S3"``), or
    ``None`` when the entry is not a label.

    >>> [str(c) for c in listed_citation(" [Ｓ1] ")], listed_citation("the first note")
    (['S1'], None)
    """
    text = normalized(entry).strip()
    if len(text) >= 2 and text[0] in _OPEN and text[-1] in _CLOSE:
        text = text[1:-1]
    if len(text) > MAX_GROUP_CHARS:
        return None
    return _read_group(text)

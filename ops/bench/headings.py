"""The heading check: section headings of the sample corpus as queries, for the quality benchmark (issue 11).

``queries.md`` holds 15 hand-written checks, too few to tell one fusion rule from another (one rank of one
query moves the whole set by about 0.004). The corpus's own section headings give hundreds more of the same
shape: a short query in one language or script whose note should come first, with the note's translations in
the corpus (the other script, English) also relevant, as ``queries.md`` grades them.

- **Queries.** Each note's ATX headings of levels 2 to 4 outside fenced code, with links, HTML tags, emphasis,
  backticks, ``{#anchors}`` and a leading section number removed; kept when 4 to 40 code points long, with two
  letters in a row, and no other note of the corpus has the same heading (compared after
  :func:`memories.rag.analysis.normalize`, so ``範例`` or ``Summary`` are never queries). At most
  :data:`PER_TRANSLATED_NOTE` per note that has translations and :data:`PER_NOTE` per other note, drawn with a
  fixed seed, so the set is the same on every run.
- **Relevance.** The heading's note 2; its translations 1: the notes whose paths are equal once language marks
  are left out (:func:`translation_key`).
- **Subsets.** ``T``, ``S``, ``E`` by the note's language (``MANIFEST.tsv``'s ``lang``: ``zh-Hant``,
  ``zh-Hans``, ``en``) for notes with translations, ``N`` for notes without.

Headings are verbatim text of their note, so BM25 finds most of them whole: the check favours rules that trust a
complete lexical match, and says little about questions that a note answers in other words. Read it beside the
development sets.
"""

from __future__ import annotations

import random
import re
from collections import defaultdict
from pathlib import Path
from typing import NamedTuple

from memories.rag.analysis import normalize
from memories.rag.notes import unfenced_lines
from ops.corpus import CORPUS, load_notes

PER_TRANSLATED_NOTE = 6
"""Most heading queries drawn from a note that has translations in the corpus."""
PER_NOTE = 2
"""Most heading queries drawn from a note without translations."""
SEED = 11
"""Seed of the draw: the same headings on every run."""
LANGUAGE_MARKS = frozenset({"en", "zh", "cn", "tw", "hans", "hant", "translation"})
"""Path words that name a language or mark a translation (``zh-cn/``, ``_en.md``, ``edge-translation/``)."""

_HEADING = re.compile(r"^ {0,3}#{2,4}[ \t]+(.+?)[ \t#]*$")
_LINK = re.compile(r"!?\[([^\]]*)\]\([^)]*\)")
_MARKUP = re.compile(r"<[^>]+>|\{#[^}]*\}|[`*_]")
_NUMBER = re.compile(r"^[\d.\s]+")
_TWO_LETTERS = re.compile(r"[^\W\d_]{2}")
_LETTER_LANGUAGE = {"zh-Hant": "T", "zh-Hans": "S", "en": "E"}


class HeadingQuery(NamedTuple):
    """One query of the check: ``id`` is the subset letter and a number (``T12``); ``relevance`` maps corpus
    paths (``source``) to 2 (the heading's note) or 1 (its translations)."""

    id: str
    text: str
    relevance: dict[str, int]


def translation_key(path: str) -> str:
    """What a note's path and its translations' share: the path's words, language marks left out.

    >>> translation_key("rust-book/zh-tw/ch04-01-what-is-ownership.md")
    'rust/book/ch04/01/what/is/ownership'
    >>> translation_key("guides/edge-translation/association-basics-zh_TW.md") == translation_key(
    ...     "guides/edge/association_basics.md"
    ... )
    True
    """
    words = re.split(r"[/_.\-\s]+", path.lower().removesuffix(".md"))
    return "/".join(word for word in words if word and word not in LANGUAGE_MARKS)


def headings(body: str) -> list[str]:
    """The note's level 2-4 ATX headings outside fenced code, cleaned as the module docstring says, in order.

    >>> headings("# Title\\n## 1.2 The `all` [mode](x.md)\\n```\\n## not this\\n```\\n### Ownership *rules*\\n")
    ['The all mode', 'Ownership rules']
    """
    found: list[str] = []
    for line in unfenced_lines(body):
        heading = _HEADING.match(line) if line is not None else None
        if heading:
            text = _NUMBER.sub("", _MARKUP.sub("", _LINK.sub(r"\1", heading.group(1))))
            found.append(" ".join(text.split()))
    return found


def heading_queries(root: Path = CORPUS) -> list[HeadingQuery]:
    """The check's queries over the corpus at ``root`` (``MANIFEST.tsv`` with ``path`` and ``lang`` columns), in
    manifest order of their notes.

    Raises:
        ValueError: the manifest lacks one of those columns.
    """
    lines = (root / "MANIFEST.tsv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split("\t")
    if not {"path", "lang"} <= set(header):
        raise ValueError(f"{root / 'MANIFEST.tsv'} needs the columns path and lang")
    rows = [line.split("\t") for line in lines[1:] if line]
    language = {cells[header.index("path")]: cells[header.index("lang")] for cells in rows}
    notes = load_notes(root)
    family: dict[str, list[str]] = defaultdict(list)
    for note in notes:
        family[translation_key(note.id)].append(note.id)
    texts = {note.id: headings(note.body) for note in notes}
    owners: dict[str, set[str]] = defaultdict(set)
    for path, found in texts.items():
        for text in found:
            owners[normalize(text).text].add(path)
    draw = random.Random(SEED)
    queries: list[HeadingQuery] = []
    for note in notes:
        translations = [path for path in family[translation_key(note.id)] if path != note.id]
        letter = _LETTER_LANGUAGE.get(language[note.id], "N") if translations else "N"
        chosen = [
            text
            for text in dict.fromkeys(texts[note.id])
            if owners[normalize(text).text] == {note.id} and 4 <= len(text) <= 40 and _TWO_LETTERS.search(text)
        ]
        draw.shuffle(chosen)
        for text in chosen[: PER_TRANSLATED_NOTE if translations else PER_NOTE]:
            relevance = {note.id: 2, **dict.fromkeys(translations, 1)}
            queries.append(HeadingQuery(f"{letter}{len(queries) + 1}", text, relevance))
    return queries

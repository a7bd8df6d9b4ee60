"""What a Markdown note says about itself: its title, its front-matter tags and where its front matter ends.

Light (regular expressions and PyYAML), so the index worker, the benchmarks and the tests read notes the same way.
Only the index worker runs it for the daemon (:func:`parse_notes`, asked by the ingest job): a note is hostile
input, and no parse of one may hold the supervisor's event loop (Python's ``re`` holds the GIL while it matches).
Every pattern here is linear in the length of the text it scans (possessive quantifiers, lookbehind guards or a
plain scan; ``tests/unit/test_hostile_text.py`` gives each 1 MiB of its worst input), a heading test looks at most
at :data:`HEADING_CHARS` code points of a line, and YAML is parsed only for front matter of at most
:data:`MAX_FRONT_MATTER_CHARS`.

>>> note_title("---\\ntitle: From the front matter\\n---\\n# A heading\\n")
'From the front matter'
>>> note_title("```\\n# not this\\n```\\n## Ownership rules\\n")
'Ownership rules'
>>> note_title("Setext title\\n============\\n\\nbody")
'Setext title'
>>> front_matter_tags("---\\ntags: [rust, 所有權]\\n---\\nbody")
['rust', '所有權']
>>> front_matter_end("---\\ntags: [a]\\n---\\nbody")
18
"""

from __future__ import annotations

import datetime
import logging
import re
from collections.abc import Iterator

import yaml

from memories.dates import note_date
from memories.limits import MAX_META_VALUE_BYTES, MAX_TITLE_BYTES
from memories.logs import log_failure
from memories.rag.chunking import Chunk, chunk_text
from memories.worker_protocol import ParsedNote

log = logging.getLogger("memories.notes")

HEADING_CHARS = 2 * MAX_TITLE_BYTES
"""Code points of a line a heading test looks at: more than a title can keep (4,096 bytes), so a heading line
longer than this gives a title that is cut anyway, and no test of a line costs more than this."""

MAX_FRONT_MATTER_CHARS = 64 * 1024
"""Largest front matter, in code points, whose YAML is read for ``title`` and ``tags``: real ones are a few hundred;
PyYAML needs about a second per 100 KiB of flow lists (libyaml a tenth of that), and a note is hostile input. A
larger block still ends where its closing line is (it is not cut into chunks); it only gives no title or tags."""

# Each pattern below is anchored at the start of the text it is given (a line), and no quantifier of one gives
# back what it took: a failed attempt costs at most the length of what it scanned, once.
_ATX_OPEN = re.compile(r"^ {0,3}#{1,6}+[ \t]")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?:=++|-++)[ \t]*+$")
_NOT_PARAGRAPH = re.compile(r"^ {0,3}(?:[-*+>]|\d{1,9}+[.)])(?:[ \t]|$)|^(?: {4}|\t)")  # list, quote, indented code
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
# The block may be empty: Jekyll marks a page without variables with two ``---`` lines. The lazy ``.*?`` tries the
# closing line once at each line end, and that try is possessive.
_FRONT_MATTER = re.compile(r"\A---[ \t]*+\r?\n(?:(.*?)\r?\n)?(?:---|\.\.\.)[ \t]*+(?:\r?\n|\Z)", re.DOTALL)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader (the same constructors as ``yaml.SafeLoader``, about ten times faster) when PyYAML was
built with it, as its wheels are."""


def parse_notes(texts: list[str]) -> list[ParsedNote]:
    """What :func:`parse_note` finds in each text, in order: the index worker's answer to the ingest job, a batch of
    files' texts parsed off the supervisor.

    A parse that fails unexpectedly (a bug no test has met yet) is that note's ``failure`` (the exception's type,
    logged by type only), never the batch's.
    """
    parsed = []
    for text in texts:
        try:
            parsed.append(parse_note(text))
        except Exception as exc:
            log_failure(log, "parsing a note failed", exc)  # its type only: a message could quote the note
            parsed.append(ParsedNote(title=None, tags=[], failure=type(exc).__name__))
    return parsed


def parse_note(text: str) -> ParsedNote:
    """The note's title (:func:`note_title`, cut to 4,096 UTF-8 bytes by :func:`truncate_utf8`; ``None`` without
    one), its front-matter tags (:func:`front_matter_tags`) and date (:func:`front_matter_date`)."""
    title = note_title(text)
    return ParsedNote(
        title=truncate_utf8(title, MAX_TITLE_BYTES) if title is not None else None,
        tags=front_matter_tags(text),
        date=front_matter_date(text),
    )


def front_matter_date(text: str) -> str | None:
    """The front matter's ``date``, else its ``created`` (Obsidian's and Jekyll's keys), as ISO 8601
    (:func:`memories.dates.note_date`: a YAML date or time, or a string in ISO 8601); ``None`` when absent, malformed
    or not a date.

    >>> front_matter_date("---\\ndate: 2025-03-01\\n---\\n# t\\n")
    '2025-03-01'
    >>> front_matter_date("---\\ncreated: 2025-03-01 09:30\\n---\\n")
    '2025-03-01T09:30:00'
    """
    matter = _front_matter(text)
    for key in ("date", "created"):
        found = note_date(matter.get(key))
        if found is not None:
            return found
    return None


def note_title(text: str) -> str | None:
    """The note's title: the front matter's ``title`` (a non-empty string), else the first heading outside front
    matter and fenced code (ATX ``# Title`` or Setext ``Title`` underlined with ``===`` or ``---``), with runs of
    whitespace made one space; ``None`` when there is neither. Callers cap its length
    (:func:`truncate_utf8`)."""
    title = _front_matter(text).get("title")
    if isinstance(title, str | int | float) and not isinstance(title, bool) and str(title).strip():
        return " ".join(str(title).split())
    heading = _first_heading(text[front_matter_end(text) :])
    return " ".join(heading.split()) if heading else None


def unfenced_lines(text: str) -> Iterator[str | None]:
    """The lines of ``text`` (no line ends), with ``None`` for each line of a fenced code block (```` ``` ```` or
    ``~~~``, fences included), so headings and paragraphs are only looked for outside code.

    >>> list(unfenced_lines("a\\n```\\n# no\\n```\\nb"))
    ['a', None, None, None, 'b']
    """
    fence: str | None = None
    for line in text.splitlines():
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else (fence or marker.group(1))
            yield None
        else:
            yield None if fence is not None else line


def _first_heading(text: str) -> str | None:
    paragraph: list[str] = []  # lines of the paragraph a Setext underline would make a heading
    for whole in unfenced_lines(text):
        if whole is None:
            paragraph = []
            continue
        line = whole[:HEADING_CHARS]
        heading = _atx_heading(line)
        if heading:
            return heading
        if paragraph and _SETEXT_UNDERLINE.match(line):
            return " ".join(part.strip() for part in paragraph)
        if not line.strip() or (not paragraph and _NOT_PARAGRAPH.match(line)):
            paragraph = []
        else:
            paragraph.append(line)
    return None


def _atx_heading(line: str) -> str | None:
    """The text of an ATX heading line (``## Title``, ``# Title #``; CommonMark: at most 3 spaces, 1 to 6 ``#``,
    a space or tab, the text, an optional closing run of ``#`` after a space or tab), stripped; ``None`` when the
    line is no such heading or its text is empty. A scan of the line, not a pattern over its whole length: the
    pattern this replaces tried every end of the text against every run of spaces after it (quadratic)."""
    opening = _ATX_OPEN.match(line)
    if not opening:
        return None
    content = line[opening.end() :].rstrip(" \t")
    unclosed = content.rstrip("#")
    if unclosed != content and (not unclosed or unclosed[-1] in " \t"):
        content = unclosed
    return content.strip() or None


def truncate_utf8(text: str, max_bytes: int) -> str:
    """``text`` if its UTF-8 form fits in ``max_bytes``, else its longest prefix that fits with an ellipsis
    (``…``, 3 bytes) appended, cut at a character boundary (never inside a code point; a combining mark may be
    left without its base's company, which is still valid text)."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[: max_bytes - 3].decode("utf-8", "ignore").rstrip() + "…"


def note_chunks(text: str) -> list[Chunk]:
    """The chunks the index cuts a record body into: :func:`~memories.rag.chunking.chunk_text` of the text after
    its front matter (spans still count from the start of ``text``)."""
    return chunk_text(text, begin=front_matter_end(text))


def front_matter_end(text: str) -> int:
    """The code point offset where the text after YAML front matter (``---`` … ``---`` or ``...`` at the very
    start, possibly with nothing between) begins; 0 without front matter."""
    match = _FRONT_MATTER.match(text)
    return match.end() if match else 0


def _front_matter(text: str) -> dict:
    """The front matter as a mapping; ``{}`` when absent, malformed, not a mapping or over
    :data:`MAX_FRONT_MATTER_CHARS`.

    Malformed is any failure of the parser, not only :class:`yaml.YAMLError`: PyYAML's constructors let Python's
    own errors through (an impossible date such as ``date: 2001-02-30`` is a ``ValueError``, ``!!timestamp x`` an
    ``AttributeError``, ``!!int "_"`` an ``IndexError``), and nesting too deep for its recursion is a
    ``RecursionError``. One typo in a note's header must not fail an ingest.
    """
    match = _FRONT_MATTER.match(text)
    if not match or match.group(1) is None or len(match.group(1)) > MAX_FRONT_MATTER_CHARS:
        return {}
    try:
        data = yaml.load(match.group(1), Loader=_YAML_LOADER)
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def front_matter_tags(text: str) -> list[str]:
    """``tags`` of YAML front matter (a list or a comma-separated string); ``[]`` when absent or malformed.

    Only scalar list items (text, numbers, dates) are tags: a nested list is left out, never turned into text,
    because YAML aliases let a few hundred bytes nest lists whose text form has billions of characters.
    """
    tags = _front_matter(text).get("tags")
    if isinstance(tags, str):
        return _fitting([tag.strip() for tag in tags.split(",") if tag.strip()])
    if isinstance(tags, list):
        scalars = [str(t).strip() for t in tags if isinstance(t, str | int | float | datetime.date)]
        return _fitting([tag for tag in scalars if tag and "," not in tag])
    return []


def _fitting(tags: list[str]) -> list[str]:
    """The first of ``tags`` whose metadata value (joined by ``", "``) fits :data:`MAX_META_VALUE_BYTES` of UTF-8:
    the rest are left out, as a long derived title is cut, so that a note with a thousand tags is kept and searched
    (its ``tags`` value over the limit refused the whole note, ``invalid_argument``)."""
    size = 0
    for count, tag in enumerate(tags):
        size += len(tag.encode("utf-8", "surrogatepass")) + (2 if count else 0)
        if size > MAX_META_VALUE_BYTES:
            return tags[:count]
    return tags

"""What a Markdown note says about itself: its title, its front-matter tags and where its front matter ends.

Light (regular expressions and PyYAML), so the ingest job, the index worker, the benchmarks and the tests read
notes the same way.

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
import re
from collections.abc import Iterator

import yaml

from memories.rag.chunking import Chunk, chunk_text

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(?:=+|-+)[ \t]*$")
_NOT_PARAGRAPH = re.compile(r"^ {0,3}(?:[-*+>]|\d{1,9}[.)])(?:[ \t]|$)|^(?: {4}|\t)")  # list, quote, indented code
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
# The block may be empty: Jekyll marks a page without variables with two ``---`` lines.
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(?:(.*?)\r?\n)?(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


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
    for line in unfenced_lines(text):
        if line is None:
            paragraph = []
            continue
        heading = _HEADING.match(line)
        if heading and heading.group(1).strip():
            return heading.group(1).strip()
        if paragraph and _SETEXT_UNDERLINE.match(line):
            return " ".join(part.strip() for part in paragraph)
        if not line.strip() or (not paragraph and _NOT_PARAGRAPH.match(line)):
            paragraph = []
        else:
            paragraph.append(line)
    return None


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
    """The front matter as a mapping; ``{}`` when absent, malformed or not a mapping.

    Malformed is any failure of the parser, not only :class:`yaml.YAMLError`: PyYAML's constructors let Python's
    own errors through (an impossible date such as ``date: 2001-02-30`` is a ``ValueError``, ``!!timestamp x`` an
    ``AttributeError``, ``!!int "_"`` an ``IndexError``), and nesting too deep for its recursion is a
    ``RecursionError``. One typo in a note's header must not fail an ingest.
    """
    match = _FRONT_MATTER.match(text)
    if not match or match.group(1) is None:
        return {}
    try:
        data = yaml.safe_load(match.group(1))
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
        return [tag.strip() for tag in tags.split(",") if tag.strip()]
    if isinstance(tags, list):
        scalars = [str(t).strip() for t in tags if isinstance(t, str | int | float | datetime.date)]
        return [tag for tag in scalars if tag and "," not in tag]
    return []

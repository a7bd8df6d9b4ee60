"""Search filters over records: which records a search, a listing or an answer may use, decided before any ranking.

A filter (:class:`memories.worker_protocol.SearchFilter`) admits a record when every part given holds: its date is
within ``since``/``until`` (Unix seconds, both inclusive), it has every tag of ``tags`` (or a tag nested under it:
``project/alpha`` has ``project``), its kind is ``kind``, its ``source`` matches the glob ``source``
(:func:`source_matches`) and its metadata holds every pair of ``meta`` exactly. Filter values are data: tags and
metadata are compared as strings, the glob is matched by :func:`source_matches` (no regular expression, no file
system), and nothing of a filter reaches SQL but the row ids it admits. Tags compare as :func:`tag_key` makes them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from typing import NamedTuple

from memories.worker_protocol import SearchFilter


class RecordFacts(NamedTuple):
    """What a filter looks at: a record's kind, date (Unix seconds, ``None``: unknown), tags, ``source`` (``None``:
    not imported from a file) and metadata."""

    kind: str
    date: float | None
    tags: Sequence[str]
    source: str | None
    meta: dict[str, str]


def admits(search: SearchFilter, record: RecordFacts) -> bool:
    """Whether ``record`` passes every part of ``search`` (a record of unknown date passes no date bound).

    >>> facts = RecordFacts("card", 100.0, ["rust", "notes"], "daily/2025-03-01.md", {"lang": "en"})
    >>> admits(SearchFilter(since=50.0, tags=["rust"], kind="card", source="daily/**", meta={"lang": "en"}), facts)
    True
    >>> admits(SearchFilter(until=99.0), facts), admits(SearchFilter(tags=["rust", "go"]), facts)
    (False, False)
    """
    if search.since is not None and (record.date is None or record.date < search.since):
        return False
    if search.until is not None and (record.date is None or record.date > search.until):
        return False
    if search.kind is not None and record.kind != search.kind:
        return False
    if search.tags and not _has_tags(record.tags, search.tags):
        return False
    if search.source is not None and (record.source is None or not source_matches(search.source, record.source)):
        return False
    return all(record.meta.get(key) == value for key, value in search.meta.items())


def tag_key(tag: str) -> str:
    """A tag as filters compare it: without a leading ``#`` (Obsidian writes tags so in the text), case-folded
    (Obsidian's tags are case-insensitive).

    >>> tag_key(" #Rust ")
    'rust'
    """
    return tag.strip().removeprefix("#").casefold()


def _has_tags(tags: Sequence[str], wanted: Sequence[str]) -> bool:
    """Whether ``tags`` hold every tag of ``wanted`` or a tag nested under it: ``project/alpha`` is also ``project``,
    so ``--tag project`` finds it, as Obsidian's tag search does (``--tag project/alpha`` does not find ``project``).
    Time: ``len(wanted) * len(tags)`` comparisons, however deep a tag is nested.

    >>> _has_tags(["#Project/Alpha/v2", "rust"], ["project", "RUST"]), _has_tags(["project/alpha"], ["proj"])
    (True, False)
    """
    have = [tag_key(tag) for tag in tags]
    return all(any(key == want or key.startswith(want + "/") for key in have) for want in map(tag_key, wanted))


def source_matches(pattern: str, source: str) -> bool:
    """Whether the ``/``-separated path ``source`` matches the glob ``pattern``: ``*`` and ``?`` and ``[...]`` within
    one path segment (``fnmatch``, case-sensitive), ``**`` as a whole segment for any number of segments (none
    too). A pattern without ``/`` matches the file name at any depth, as ``--exclude`` does. Dynamic programming over
    (pattern segment, path segment): time is the product of their counts, whatever the pattern.

    >>> source_matches("daily/**", "daily/2025/03/01.md"), source_matches("*.md", "projects/a.md")
    (True, True)
    >>> source_matches("daily/*.md", "daily/2025/03.md"), source_matches("**/b/*.md", "a/b/c.md")
    (False, True)
    """
    parts = [part for part in pattern.split("/") if part]
    if len(parts) == 1 and parts[0] != "**" and "/" not in pattern:
        parts = ["**", parts[0]]
    path = source.split("/")
    # reach[j]: the pattern's first i segments match the path's first j segments.
    reach = [True] + [False] * len(path)
    for part in parts:
        if part == "**":
            seen = False
            reach = [seen := seen or ok for ok in reach]
        else:
            reach = [False] + [reach[j] and fnmatch.fnmatchcase(path[j], part) for j in range(len(path))]
    return reach[-1]

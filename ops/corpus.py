"""The sample corpus (``tests/corpus``), read the way ``rag ingest`` reads notes: one loader for benchmarks and tests.

``MANIFEST.tsv`` lists the notes (tab-separated, a header row, the path relative to the corpus folder first);
``queries.md`` holds a Markdown table of search checks, ``| id | query | expected top | also relevant | why |``.

>>> notes = load_notes()
>>> len(notes), notes[0].source, notes[0].title
(311, 'chinese-copywriting-guidelines/README.en.md', 'Chinese Copywriting Guidelines')
>>> load_queries()[0].expected
'cloudywing-hackmd-notes/docs/backend/臺灣證號檢核.md'
>>> load_queries()[2].also_relevant
('chinese-copywriting-guidelines/README.zh-Hans.md', 'chinese-copywriting-guidelines/README.en.md')
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from memories.rag.notes import parse_note
from memories.worker_protocol import IndexRecord

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"
"""The sample notes; ``tests/corpus/SOURCES.md`` gives their sources and licences."""

_BOM = b"\xef\xbb\xbf"
_QUERY_ID = re.compile(r"[A-Z]\d+")


class Query(NamedTuple):
    """One row of the table in ``queries.md``; a tuple, so ``for query_id, query, expected, also in ...`` works."""

    id: str
    """The row id: a letter for the language of the query (T, S, E, M) and a number, e.g. ``T1``."""
    query: str
    """The search text, as a user types it."""
    expected: str
    """The note that should rank first: its path relative to the corpus folder, as in ``MANIFEST.tsv``."""
    also_relevant: tuple[str, ...]
    """The notes of the "also relevant" cell, resolved to manifest paths (see :func:`resolve_also_relevant`)."""


def note_paths(root: Path = CORPUS) -> list[str]:
    """The notes listed in ``root/MANIFEST.tsv``: paths relative to ``root``, ``/``-separated, in manifest order.

    Raises:
        ValueError: the file does not start with the ``path`` header column.
    """
    manifest = root / "MANIFEST.tsv"
    lines = manifest.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].split("\t", 1)[0] != "path":
        raise ValueError(f"{manifest} does not start with a 'path' column header")
    return [line.split("\t", 1)[0] for line in lines[1:] if line]


def load_notes(root: Path = CORPUS) -> list[IndexRecord]:
    """Every note of :func:`note_paths` as the card ``rag ingest`` would store, in manifest order.

    As the ingest job reads a file: UTF-8 with a leading BOM removed (strict, so an invalid file raises
    ``UnicodeDecodeError``); title and tags from :func:`~memories.rag.notes.parse_note` (the index worker's parse),
    else the file name as title. ``id`` and ``source`` are the relative path, ``revision`` 1.
    """
    notes = []
    for path in note_paths(root):
        body = (root / path).read_bytes().removeprefix(_BOM).decode("utf-8")
        parsed = parse_note(body)
        notes.append(
            IndexRecord(
                id=path,
                revision=1,
                kind="card",
                title=parsed.title or PurePosixPath(path).name,
                body=body,
                source=path,
                tags=parsed.tags,
            )
        )
    return notes


def load_queries(root: Path = CORPUS) -> list[Query]:
    """The rows of the search-check table in ``root/queries.md`` (those whose first cell is an id like ``T1``).

    Raises:
        ValueError: the file has no such row.
    """
    path = root / "queries.md"
    notes = note_paths(root)
    queries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and _QUERY_ID.fullmatch(cells[0]):
            also = resolve_also_relevant(cells[3], cells[2], notes)
            queries.append(Query(id=cells[0], query=cells[1], expected=cells[2], also_relevant=also))
    if not queries:
        raise ValueError(f"{path} has no table of search checks")
    return queries


def resolve_also_relevant(cell: str, expected: str, notes: list[str]) -> tuple[str, ...]:
    """The manifest paths an "also relevant" cell names, in the cell's order.

    The cell is written for people: ``—`` for none; items separated by ``,`` or ``;``; remarks in parentheses;
    shorthands ``zh-hans/ and zh-hant/code-of-conduct.md`` and ``zh-cn and zh-tw ch16-01-threads.md`` (two
    folders, one file name); ``name…`` for a path that starts so; ``…/name`` for one that ends so. An item names
    the notes whose path is the item or ends with ``/`` + the item; of those, the one sharing most leading folders
    with ``expected`` (then the shortest path) is meant.

    Raises:
        ValueError: an item that names no note, or two notes equally well.
    """
    cell = re.sub(r"\([^)]*\)", "", cell).strip()
    if cell in ("", "—"):
        return ()
    items = []
    for part in re.split(r"[,;]", cell):
        part = part.strip().removeprefix("…/")
        pair = re.fullmatch(r"(\S+?)/? and (\S+?)[/ ](\S+)", part)
        items.extend([f"{pair[1]}/{pair[3]}", f"{pair[2]}/{pair[3]}"] if pair else [part])
    return tuple(_resolve_item(item, expected, notes) for item in items)


def _resolve_item(item: str, expected: str, notes: list[str]) -> str:
    prefix = item.endswith("…")
    stem = item.removesuffix("…")

    def names(path: str) -> bool:
        if not prefix:
            return path == stem or path.endswith("/" + stem)
        start = 0 if path.startswith(stem) else path.find("/" + stem) + 1
        return (start > 0 or path.startswith(stem)) and "/" not in path[start + len(stem) :]

    def closeness(path: str) -> tuple[int, int]:
        shared = 0
        for mine, theirs in zip(path.split("/")[:-1], expected.split("/")[:-1], strict=False):
            if mine != theirs:
                break
            shared += 1
        return shared, -path.count("/")

    candidates = sorted((path for path in notes if names(path) and path != expected), key=closeness, reverse=True)
    if not candidates or (len(candidates) > 1 and closeness(candidates[0]) == closeness(candidates[1])):
        raise ValueError(f"queries.md: {item!r} (beside {expected}) names {len(candidates)} notes, not one")
    return candidates[0]

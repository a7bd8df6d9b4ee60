"""The sample corpus (``tests/corpus``), read the way ``rag ingest`` reads notes: one loader for benchmarks and tests.

``MANIFEST.tsv`` lists the notes (tab-separated, a header row, the path relative to the corpus folder first);
``queries.md`` holds a Markdown table of search checks, ``| id | query | expected top | also relevant | why |``.

>>> notes = load_notes()
>>> len(notes), notes[0].source, notes[0].title
(311, 'chinese-copywriting-guidelines/README.en.md', 'Chinese Copywriting Guidelines')
>>> load_queries()[0]
Query(id='T1', query='臺灣身分證字號檢核', expected='cloudywing-hackmd-notes/docs/backend/臺灣證號檢核.md')
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
from typing import NamedTuple

from memories.protocol import IndexRecord
from memories.rag.notes import first_heading, front_matter_tags

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"
"""The sample notes; ``tests/corpus/SOURCES.md`` gives their sources and licences."""

_BOM = b"\xef\xbb\xbf"
_QUERY_ID = re.compile(r"[A-Z]\d+")


class Query(NamedTuple):
    """One row of the table in ``queries.md``; a tuple, so ``for query_id, query, expected in ...`` works."""

    id: str
    """The row id: a letter for the language of the query (T, S, E, M) and a number, e.g. ``T1``."""
    query: str
    """The search text, as a user types it."""
    expected: str
    """The note that should rank first: its path relative to the corpus folder, as in ``MANIFEST.tsv``."""


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
    ``UnicodeDecodeError``); title = :func:`~memories.rag.notes.first_heading`, else the file name; tags =
    :func:`~memories.rag.notes.front_matter_tags`. ``id`` and ``source`` are the relative path, ``revision`` 1.
    """
    notes = []
    for path in note_paths(root):
        body = (root / path).read_bytes().removeprefix(_BOM).decode("utf-8")
        notes.append(
            IndexRecord(
                id=path,
                revision=1,
                kind="card",
                title=first_heading(body) or PurePosixPath(path).name,
                body=body,
                source=path,
                tags=front_matter_tags(body),
            )
        )
    return notes


def load_queries(root: Path = CORPUS) -> list[Query]:
    """The rows of the search-check table in ``root/queries.md`` (those whose first cell is an id like ``T1``).

    Raises:
        ValueError: the file has no such row.
    """
    path = root / "queries.md"
    queries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and _QUERY_ID.fullmatch(cells[0]):
            queries.append(Query(id=cells[0], query=cells[1], expected=cells[2]))
    if not queries:
        raise ValueError(f"{path} has no table of search checks")
    return queries

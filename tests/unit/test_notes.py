"""Issue 12, titles: front-matter ``title``, Setext and ATX headings; long titles cut; front matter not chunked."""

from __future__ import annotations

import doctest

import pytest

from memories.limits import MAX_META_VALUE_BYTES
from memories.rag import notes
from memories.rag.chunking import chunk_text
from memories.rag.notes import front_matter_end, front_matter_tags, note_chunks, note_title, truncate_utf8
from memories.rag.vault_index import VaultIndex
from memories.vault.rules import check_meta
from memories.worker_protocol import IndexRecord


def test_doctests() -> None:
    assert doctest.testmod(notes).failed == 0


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("# ATX\n\nbody", "ATX"),
        ("Setext one\n==========\n\nbody", "Setext one"),
        ("Setext two\n---\n\nbody", "Setext two"),
        ("A paragraph\nover two lines\n=====\n", "A paragraph over two lines"),
        ("---\ntitle: Front matter wins\n---\n# Heading\n", "Front matter wins"),
        ("---\ntitle: 2024\n---\nbody", "2024"),
        ("---\ntitle: ''\n---\nSetext after empty title\n===\n", "Setext after empty title"),
        ("---\ntitle: [not, a, string]\n---\n# Heading\n", "Heading"),
        ("---\ntags: [a]\n---\n# After front matter\n", "After front matter"),
        ("---\n---\n# After empty front matter\n", "After empty front matter"),  # Jekyll's page without variables
        ("---\r\n---\r\n\r\nNo heading\r\n", None),
        ("text\n\n---\n\n# After a rule\n", "After a rule"),  # a rule after a blank line is no Setext underline
        ("- item\n---\n# Real\n", "Real"),  # a list item is not a paragraph
        ("```\nfenced\n===\n# not this\n```\nOutside\n=======\n", "Outside"),
        ("#   Spaced    out   #\n", "Spaced out"),
        ("no heading at all\n", None),
        ("", None),
    ],
)
def test_note_title(text: str, title: str | None) -> None:
    assert note_title(text) == title


def test_empty_front_matter_is_front_matter() -> None:
    """Jekyll marks a page without variables with ``---`` twice: neither a snippet nor a Setext heading ``---``."""
    body = "---\n---\n\nThe page."
    assert front_matter_end(body) == len("---\n---\n")
    assert [chunk.text for chunk in note_chunks(body)] == ["The page."]
    assert front_matter_tags(body) == []


def test_truncate_utf8_cuts_at_a_character_boundary() -> None:
    assert truncate_utf8("short", 10) == "short"
    cut = truncate_utf8("資" * 2000, 4096)  # 6,000 bytes
    assert len(cut.encode()) <= 4096 and cut.endswith("…") and set(cut[:-1]) == {"資"}
    assert truncate_utf8("ab😀cd", 7) == "ab…"  # the 4-byte emoji does not fit in the 4 bytes before the ellipsis


def test_front_matter_is_not_chunked_but_spans_count_from_the_body_start() -> None:
    body = "---\ntitle: T\ntags: [x]\n---\n\nThe first real paragraph."
    start = front_matter_end(body)
    assert body[start:].lstrip().startswith("The first")
    [chunk] = chunk_text(body, begin=start)
    assert chunk.text == "The first real paragraph."
    assert body.encode()[chunk.byte_start : chunk.byte_end].decode() == chunk.text
    index = VaultIndex("v")
    record = IndexRecord(id="r", revision=1, kind="card", title="T", body=body, source="n.md", tags=["x"])
    index.apply([record], [])
    assert [row.chunk.text for row in index.rows()] == ["The first real paragraph."]
    only_front_matter = IndexRecord(id="f", revision=1, kind="card", title="F", body="---\na: 1\n---\n", tags=[])
    index.apply([only_front_matter], [])  # found by its title, like an empty body
    assert len(list(index.rows())) == 2


def test_front_matter_tags_are_scalars_and_nested_aliases_are_never_expanded() -> None:
    levels = ['a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for previous, name in zip("abcdefgh", "bcdefghi", strict=True):
        levels.append(f"{name}: &{name} [{', '.join(['*' + previous] * 9)}]")
    bomb = "---\n" + "\n".join(levels) + "\ntags: [kept, 2024, 2024-01-31, *i, {k: v}, null, 'a,b']\n---\nbody\n"
    assert front_matter_tags(bomb) == ["kept", "2024", "2024-01-31"]
    assert front_matter_tags("---\ntags: one, two\n---\n") == ["one", "two"]


def test_front_matter_nested_too_deep_is_malformed_not_a_failure() -> None:
    deep = "---\ntitle: T\ntags: " + "[" * 50_000 + "]" * 50_000 + "\n---\n# Heading\nbody\n"
    assert front_matter_tags(deep) == [] and note_title(deep) == "Heading"


@pytest.mark.parametrize(
    "header", ["date: 2001-02-30", "date: 2024-13-01", "when: 2001-02-03 25:00:00", "n: !!int 12x", "t: !!timestamp x"]
)
def test_front_matter_the_yaml_constructors_reject_is_malformed_not_a_failure(header: str) -> None:
    """PyYAML raises ValueError, AttributeError or IndexError (not YAMLError) for these; the note still has its
    heading as title and no tags."""
    note = f"---\n{header}\ntags: [a, b]\n---\n# Heading\nbody\n"
    assert front_matter_tags(note) == [] and note_title(note) == "Heading"


def test_tags_beyond_a_metadata_values_size_are_left_out_and_the_note_kept() -> None:
    """A note with a thousand front-matter tags was refused whole (``invalid_argument``), its text lost to search."""
    many = [f"t{number}" for number in range(1_000)]
    kept = front_matter_tags("---\ntags: [" + ", ".join(many) + "]\n---\nbody\n")
    joined = ", ".join(kept)
    assert kept == many[: len(kept)] and len(kept) > 500
    assert len(joined.encode()) <= MAX_META_VALUE_BYTES < len(", ".join(many[: len(kept) + 1]).encode())
    check_meta({"tags": joined})  # what the store checks: the note is kept

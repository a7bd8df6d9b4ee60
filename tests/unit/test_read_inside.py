"""Issue 29, item 9: a note is read inside the folder that was walked, without following any symbolic link
(:func:`memories.files.read_inside` through :func:`memories.daemon.ingest.note_files.read_note`). Each swap is made
between the walk and the read, where a race would put it (the race itself: tests/middle/test_link_swaps.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pathspec
import pytest

from memories.daemon.ingest.note_files import Candidate, named_file, read_note, walk_folder
from memories.errors import MemoriesError

SECRET = "zqx secret key\n"


def walked(folder: Path) -> dict[str, Candidate]:
    found = walk_folder(folder, pathspec.PathSpec([]), recursive=True)
    return {item.source: item for item in found if isinstance(item, Candidate)}


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "note.md").write_text(SECRET)
    return secrets


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "note.md").write_text("# Note\n\nplain\n")
    (folder / "sub" / "note.md").write_text("# Deep\n\nplain\n")
    return folder


def refused(candidate: Candidate) -> str:
    with pytest.raises(MemoriesError) as caught:
        read_note(candidate)
    assert caught.value.code == "invalid_argument"
    return caught.value.message


def test_a_note_swapped_for_a_link_after_the_walk_is_refused(folder: Path, outside: Path) -> None:
    candidate = walked(folder)["note.md"]
    (folder / "note.md").unlink()
    (folder / "note.md").symlink_to(outside / "note.md")
    assert "a symbolic link (or another folder) took its place" in refused(candidate)


def test_a_subfolder_swapped_for_a_link_after_the_walk_is_refused(folder: Path, outside: Path) -> None:
    candidate = walked(folder)["sub/note.md"]
    os.rename(folder / "sub", folder / "gone")
    (folder / "sub").symlink_to(outside)
    refused(candidate)


def test_a_folder_replaced_after_the_walk_is_refused(folder: Path, outside: Path) -> None:
    candidate = walked(folder)["note.md"]
    os.rename(folder, folder.with_name("away"))
    folder.mkdir()
    (folder / "note.md").write_text(SECRET)
    refused(candidate)


def test_a_fifo_swapped_in_is_refused_without_blocking(folder: Path) -> None:
    candidate = walked(folder)["note.md"]
    (folder / "note.md").unlink()
    os.mkfifo(folder / "note.md")
    with pytest.raises(MemoriesError) as caught:
        read_note(candidate)
    assert caught.value.code == "unsupported_file"


def test_a_note_saved_again_by_an_editor_is_read_as_it_is_now(folder: Path) -> None:
    """An editor writes a new file and renames it over the note (a new inode): still the folder's note."""
    candidate = walked(folder)["note.md"]
    (folder / ".note.md.swp").write_text("# Note\n\nsaved again\n")
    os.replace(folder / ".note.md.swp", folder / "note.md")
    path, text, _ = read_note(candidate)
    assert (path, text) == (str(folder / "note.md"), "# Note\n\nsaved again\n")


def test_a_link_to_another_note_of_the_folder_is_read_where_it_pointed(folder: Path, outside: Path) -> None:
    (folder / "link.md").symlink_to("sub/note.md")
    candidate = walked(folder)["link.md"]
    (folder / "link.md").unlink()
    (folder / "link.md").symlink_to(outside / "note.md")  # retargeted after the walk: not followed
    path, text, _ = read_note(candidate)
    assert (path, text) == (str(folder / "sub" / "note.md"), "# Deep\n\nplain\n")


def test_a_file_named_on_the_command_line_swapped_for_a_link_is_refused(folder: Path, outside: Path) -> None:
    candidate = named_file(folder / "note.md")
    (folder / "note.md").unlink()
    (folder / "note.md").symlink_to(outside / "note.md")
    refused(candidate)


def test_a_file_named_through_a_link_is_read_where_the_link_pointed_when_named(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "named.md").symlink_to(folder / "note.md")
    path, text, _ = read_note(named_file(tmp_path / "named.md"))
    assert (path, text) == (str(folder / "note.md"), "# Note\n\nplain\n")

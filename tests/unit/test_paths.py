"""Folders Memories makes for itself: explicit modes, and the repair of model folders an older release left
without their search bit."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from memories.errors import MemoriesError
from memories.paths import ensure_private_dir, make_folders, repair_model_folders, resolve_home


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_make_folders_sets_the_mode_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o177)
    try:
        make_folders(str(tmp_path / "a" / "b" / "c"))
    finally:
        os.umask(old)
    assert [_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [0o700] * 3


def test_model_folders_without_their_search_bit_are_repaired(tmp_path: Path) -> None:
    home = resolve_home(str(tmp_path / "home"), None)
    onnx = Path(home.default_model_dir, "onnx")
    onnx.mkdir(parents=True)
    mine = Path(home.models_dir, "mine")  # the user's own local_model_dir, inside models/
    mine.mkdir()
    other = tmp_path / "elsewhere"
    other.mkdir()
    linked = Path(home.default_model_dir, "linked")
    linked.symlink_to(other)
    for folder in (other, mine, onnx, onnx.parent, onnx.parent.parent):  # deepest first, or chmod cannot reach
        folder.chmod(0o600)

    repaired = repair_model_folders(home, str(mine))

    assert sorted(repaired) == sorted([home.models_dir, home.default_model_dir, str(onnx)])
    assert [_mode(p) for p in (Path(home.models_dir), Path(home.default_model_dir), onnx)] == [0o700] * 3
    assert _mode(mine) == 0o600  # a user's local_model_dir is never touched
    assert _mode(other) == 0o600  # nor a folder reached through a link
    assert repair_model_folders(home, str(mine)) == []


def test_nothing_to_repair_in_a_home_without_models(tmp_path: Path) -> None:
    assert repair_model_folders(resolve_home(str(tmp_path), None), None) == []


def test_a_home_under_a_file_names_the_file(tmp_path: Path) -> None:
    """``--home FILE/sub``: the message names the file in the way, not the folder that does not exist."""
    blocker = tmp_path / "notes.txt"
    blocker.write_text("x")
    with pytest.raises(MemoriesError) as raised:
        ensure_private_dir(str(blocker / "home"))
    assert raised.value.code == "invalid_argument"
    assert raised.value.message == f"cannot create {blocker / 'home'}: {blocker} is not a folder"
    with pytest.raises(MemoriesError) as raised:
        ensure_private_dir(str(blocker))
    assert raised.value.message == f"{blocker} exists and is not a folder"


def test_a_config_file_named_must_exist_the_default_need_not(tmp_path: Path) -> None:
    assert resolve_home(str(tmp_path), None).config_path == str(tmp_path.resolve() / "config.toml")
    with pytest.raises(MemoriesError) as error:
        resolve_home(str(tmp_path), str(tmp_path / "confg.toml"))
    assert error.value.code == "invalid_config" and "confg.toml, which does not exist" in str(error.value)
    (tmp_path / "config.toml").write_text("")
    assert resolve_home(str(tmp_path), str(tmp_path / "config.toml")).config_path == str(tmp_path / "config.toml")

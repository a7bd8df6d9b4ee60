"""Folders Memories makes for itself: explicit modes, and the repair of model folders an older release left
without their search bit."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from memories.errors import MemoriesError
from memories.launcher import start_daemon
from memories.paths import (
    Home,
    ensure_private_dir,
    ensure_socket_folder,
    make_folders,
    repair_model_folders,
    resolve_home,
)


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


@pytest.fixture
def runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A short ``XDG_RUNTIME_DIR`` (under 48 bytes, as :func:`memories.paths._runtime_dir` asks), removed after."""
    folder = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(folder))
    yield folder
    shutil.rmtree(folder)


def _long_home(tmp_path: Path, runtime: Path) -> tuple[Home, Path]:
    """A home whose socket path is too long for ``<home>/run``, and the short runtime folder its socket goes to."""
    root = tmp_path / ("h" * 110)
    home = Home(str(root), str(root / "config.toml"))
    assert Path(home.socket_path).parent == runtime / "memories"
    return home, runtime / "memories"


def test_the_shared_socket_folder_is_made_owner_only(tmp_path: Path, runtime: Path) -> None:
    home, folder = _long_home(tmp_path, runtime)
    previous = os.umask(0o077)
    try:
        ensure_socket_folder(home)
        ensure_socket_folder(home)  # ours, 0700: accepted as it is
    finally:
        os.umask(previous)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700


@pytest.mark.parametrize("kind", ["open to all", "a link", "a file"])
def test_a_shared_socket_folder_that_is_not_ours_and_0700_is_refused(tmp_path: Path, runtime: Path, kind: str) -> None:
    """Issue 29, item 15: another account can make ``/tmp/memories-<uid>`` first; one not this user's own folder with
    mode 0700 is refused, not taken over with a chmod (a link or a file was refused as ``invalid_argument``)."""
    home, folder = _long_home(tmp_path, runtime)
    if kind == "open to all":
        folder.mkdir()
        folder.chmod(0o777)
    elif kind == "a link":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        folder.symlink_to(tmp_path / "elsewhere")
    else:
        folder.write_text("")
    with pytest.raises(MemoriesError) as refused:
        ensure_socket_folder(home)
    assert refused.value.code == "socket_folder_unsafe" and str(folder) in refused.value.message
    assert kind != "open to all" or stat.S_IMODE(folder.stat().st_mode) == 0o777  # nothing taken over


@pytest.mark.skipif(os.getuid() != 0, reason="making a folder of another user needs root")
def test_daemon_start_refuses_a_socket_folder_another_user_made(tmp_path: Path, runtime: Path) -> None:
    """``daemon start`` says ``socket_folder_unsafe`` before it connects or starts anything (the daemon refused it as
    ``invalid_argument``, after ``daemon start`` had connected to whatever socket was there)."""
    home, folder = _long_home(tmp_path, runtime)
    folder.mkdir(mode=0o700)
    os.chown(folder, 54321, 54321)
    with pytest.raises(MemoriesError) as refused:
        start_daemon(home)
    assert refused.value.code == "socket_folder_unsafe" and "uid 54321" in refused.value.message
    assert not os.path.exists(home.root)

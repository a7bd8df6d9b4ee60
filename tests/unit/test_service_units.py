"""The service definitions in ``ops/`` run ``memories daemon run``, restart it on failure only, log where the
guide says, and the guide (docs/guide/service.md) shows how to enable them."""

from __future__ import annotations

import configparser
import os
import plistlib
import shutil
import subprocess
from pathlib import Path

import pytest
from platformdirs.macos import MacOS

from tests.fixtures.daemon import memories_executable


def _unit(repo_root: Path, name: str = "memories.service") -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, comment_prefixes=("#",), strict=True)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # systemd keys are case-sensitive
    parser.read(repo_root / "ops" / "systemd" / name)
    return parser


def test_the_systemd_user_unit_runs_and_restarts_the_daemon(repo_root: Path) -> None:
    unit = _unit(repo_root)
    assert unit["Service"]["ExecStart"] == "__MEMORIES__ daemon run"
    assert unit["Service"]["Restart"] == "on-failure"
    assert (unit["Service"]["UMask"], unit["Service"]["LimitCORE"]) == ("0077", "0")
    assert unit["Install"]["WantedBy"] == "default.target"
    assert "StandardError" not in unit["Service"]  # the journal, as the guide says


def test_the_systemd_user_unit_of_the_mcp_endpoint_serves_loopback_http(repo_root: Path) -> None:
    unit = _unit(repo_root, "memories-mcp.service")
    assert unit["Service"]["ExecStart"] == "__MEMORIES__ mcp serve --http 8765"
    assert unit["Service"]["Restart"] == "on-failure" and unit["Unit"]["After"] == "memories.service"
    assert (unit["Service"]["UMask"], unit["Service"]["LimitCORE"]) == ("0077", "0")
    assert "Environment" not in unit["Service"]  # no token: each request brings its own


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed")
@pytest.mark.parametrize("name", ["memories.service", "memories-mcp.service"])
def test_systemd_accepts_the_unit(repo_root: Path, tmp_path: Path, name: str) -> None:
    text = (repo_root / "ops" / "systemd" / name).read_text()
    unit = tmp_path / name
    unit.write_text(text.replace("__MEMORIES__", memories_executable()))
    done = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_the_launchd_agent_runs_and_restarts_the_daemon(repo_root: Path) -> None:
    with open(repo_root / "ops" / "launchd" / "org.memories.daemon.plist", "rb") as file:
        agent = plistlib.load(file)
    assert agent["ProgramArguments"] == ["__MEMORIES__", "daemon", "run"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    # The default home on macOS is platformdirs' user data folder; the guide says the log is its logs/daemon.log.
    home = MacOS("memories").user_data_dir.replace(os.path.expanduser("~"), "__HOME__", 1)
    assert agent["StandardOutPath"] == agent["StandardErrorPath"] == f"{home}/logs/daemon.log"
    assert agent["Umask"] == 0o077 and agent["HardResourceLimits"] == {"Core": 0}


def test_the_launchd_agent_of_the_mcp_endpoint_serves_loopback_http(repo_root: Path) -> None:
    with open(repo_root / "ops" / "launchd" / "org.memories.mcp.plist", "rb") as file:
        agent = plistlib.load(file)
    assert agent["ProgramArguments"] == ["__MEMORIES__", "mcp", "serve", "--http", "8765"]
    assert agent["RunAtLoad"] is True and agent["KeepAlive"] == {"SuccessfulExit": False}
    assert "EnvironmentVariables" not in agent and agent["HardResourceLimits"] == {"Core": 0}


def test_the_guide_shows_how_to_enable_them_and_that_the_daemon_starts_locked(repo_root: Path) -> None:
    guide = (repo_root / "docs" / "guide" / "service.md").read_text()
    for step in (
        "ops/systemd/memories.service > ~/.config/systemd/user/memories.service",
        "systemctl --user enable --now memories",
        "journalctl --user -u memories",
        "ops/launchd/org.memories.daemon.plist",
        "launchctl bootstrap gui/$(id -u) ~/Library/LaunchAgents/org.memories.daemon.plist",
        "**The daemon always starts locked**",
        "ops/systemd/memories-mcp.service > ~/.config/systemd/user/memories-mcp.service",
        "systemctl --user enable --now memories-mcp",
        "ops/launchd/org.memories.mcp.plist",
    ):
        assert step in guide, step

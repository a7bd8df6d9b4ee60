"""What people read: help texts, error codes and messages cite no requirement ids such as ``(R-17)`` (the docs
may), and numbers and sizes read plainly."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import click
import msgspec
import pytest

from memories import protocol as p
from memories.cli import COMMANDS, cli, render
from memories.cli.output import mebibytes, plain_decimal, relative_scores
from memories.errors import CODES

REQUIREMENT_ID = re.compile(r"\bR-\d+")


def _commands(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    yield path, command
    if isinstance(command, click.Group):
        context = click.Context(command, info_name=path[-1])
        for name in command.list_commands(context):
            sub = command.get_command(context, name)
            assert sub is not None, name
            yield from _commands(sub, (*path, name))


def test_help_texts_cite_no_requirement_ids() -> None:
    found = list(_commands(cli, ("memories",)))
    assert {path[1] for path, _ in found if len(path) > 1} == set(COMMANDS)
    for path, command in found:
        with click.Context(command, info_name=" ".join(path)) as context:
            text = command.get_help(context)
        assert not REQUIREMENT_ID.search(text), (path, REQUIREMENT_ID.findall(text))


def test_error_codes_and_messages_cite_no_requirement_ids(repo_root: Path) -> None:
    assert not [code for code, meaning in CODES.items() if REQUIREMENT_ID.search(meaning)]
    # Every string literal of the product that is not a docstring may reach a person (a message, a warning).
    cited = []
    for path in [*(repo_root / "memories").rglob("*.py"), *(repo_root / "workers").rglob("*.py")]:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        }
        cited += [
            f"{path.relative_to(repo_root)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in docstrings
            and REQUIREMENT_ID.search(node.value)
        ]
    assert cited == []


def test_scores_print_as_plain_decimals() -> None:
    assert plain_decimal(3.75e-06) == "0.00000375"
    assert plain_decimal(2 / 61) == "0.03279"
    assert plain_decimal(12.3456) == "12.35"
    assert plain_decimal(-0.5) == "-0.5"
    assert plain_decimal(0.0) == "0"
    assert "e" not in plain_decimal(1e-30)


def test_sizes_print_in_mebibytes() -> None:
    assert mebibytes(210 * 2**20) == "210 MiB"
    assert mebibytes(4321) == "0.00412 MiB"


def _record(conflict: p.Conflict | None, revision_id: str) -> p.RecordView:
    view = p.RecordView(
        id="0f3a9c2e", revision=2, revision_id=revision_id, kind="memory", sensitivity="general", title="Trip",
        body="Sunday, edited on b", meta={}, created=0.0, updated=0.0, conflict=conflict,
    )  # fmt: skip
    return view


def test_a_record_in_conflict_says_so_in_text(capsys: pytest.CaptureFixture[str]) -> None:
    """A sync conflict is visible without --json: `memory read` says which version it shows and how to read the
    other one (which may be this device's own edit), `memory list` marks the record."""
    shown, other = "a1" * 32, "b2" * 32
    render.record(_record(p.Conflict(revisions=[shown, other], deleted=False), shown), "my notes")
    text = capsys.readouterr().out
    assert "conflict: 2 versions, made on different devices; `memory update` resolves it" in text
    assert f"  {shown[:16]}  shown here\n" in text
    assert f"  {other[:16]}  memories memory read 'my notes' 0f3a9c2e --revision {other[:16]}\n" in text
    assert text.index("conflict:") < text.index("Sunday, edited on b")

    render.record(_record(p.Conflict(revisions=[other, shown], deleted=True), shown), "notes")
    assert f"  {other[:16]}  deletes the record\n" in capsys.readouterr().out
    render.record(_record(p.Conflict(revisions=[other, shown], deleted=True), "c3" * 32), "notes")  # --revision 1
    assert "  one of them deletes the record\n" in capsys.readouterr().out
    render.record(_record(None, shown), "notes")
    assert "conflict" not in capsys.readouterr().out

    summary = p.RecordSummary(id="0f3a9c2e", revision=2, kind="memory", sensitivity="general", title="Trip")
    render.record_listing(p.RecordListing(records=[msgspec.structs.replace(summary, conflict=True), summary]))
    rows = capsys.readouterr().out.splitlines()
    assert rows[1].endswith("  CONFLICT Trip") and rows[2].endswith("  Trip") and "CONFLICT" not in rows[2]


def test_daemon_status_shows_a_dash_for_a_worker_with_no_process_yet(capsys: pytest.CaptureFixture[str]) -> None:
    """A worker still starting (as `daemon start` often shows them) has no pid yet: a dash, not `None`."""
    status = p.DaemonStatus(
        pid=4242, uptime=0.3, home="/h", config="/h/config.toml", config_digest="ab" * 32, restart_needed=False,
        initialized=True, locked=True, queued_jobs=0, running_jobs=0, dropped_replies=0, dropped_results=0,
        test_hooks=False, dumpable=False,
        workers=[
            p.WorkerInfo(name="index", pid=4243, state="ready", restarts=0, dumpable=False),
            p.WorkerInfo(name="embedding", pid=None, state="starting", restarts=0),
        ],
    )  # fmt: skip
    render.daemon_status(status)
    rows = capsys.readouterr().out.splitlines()
    assert "None" not in "\n".join(rows)
    assert rows[-1].split() == ["embedding", "-", "starting", "0", "?"]
    assert rows[-2].split() == ["index", "4243", "ready", "0", "off"]


def test_result_scores_print_as_shares_of_the_best() -> None:
    """Issue 29, item 8: ``0.000001856`` in a result list read as noise; its share of the top result's does not."""
    assert relative_scores([1.856e-06, 1.6e-06, 2e-09]) == ["100%", "86%", "<1%"]
    assert relative_scores([0.5, 0.5, 0.4999]) == ["100%", "100%", "99%"]
    assert relative_scores([]) == [] and relative_scores([0.0]) == ["0"]

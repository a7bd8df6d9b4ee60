"""What people read: help texts, error codes and messages cite no requirement ids such as ``(R-17)`` (the docs
may), and numbers and sizes read plainly."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import click

from memories.cli import COMMANDS, cli
from memories.cli.output import mebibytes, plain_decimal
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

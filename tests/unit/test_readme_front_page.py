"""The README is a short front page: at most 15 KB, its two commands exactly as `.ci/run`, `tests/run` and the
fresh-install test rely on them, its tour between the markers the docs site includes, and its links resolving."""

from __future__ import annotations

import re

from tests.conftest import REPO

README = REPO / "README.md"

COMMANDS = (
    "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/python ops/demo.py",
    "python3 -m venv .venv && .venv/bin/pip install -q -e '.[test]' && tests/run",
)
"""The README's first command (install, run the demo) and second (install with the test extras, run the tests)."""

MAX_BYTES = 15_000


def test_the_readme_is_a_front_page_of_at_most_15_kb() -> None:
    assert len(README.read_bytes()) <= MAX_BYTES


def test_the_two_commands_open_the_readme_unchanged() -> None:
    text = README.read_text(encoding="utf-8")
    [block] = re.findall(r"```sh\n(.*?)```", text, flags=re.S)[:1]
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert tuple(commands) == COMMANDS


def test_the_tour_is_marked_for_the_site_home_page() -> None:
    text = README.read_text(encoding="utf-8")
    start, end = "<!-- --8<-- [start:tour] -->", "<!-- --8<-- [end:tour] -->"
    assert text.count(start) == text.count(end) == 1 and text.index(start) < text.index(end)
    assert '--8<-- "README.md:tour"' in (REPO / "docs" / "index.md").read_text(encoding="utf-8")


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (REPO / link).exists(), link

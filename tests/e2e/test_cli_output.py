"""Issue 12, what a careful user notices in the human output: escaped file names, plain scores, jobs that read
right."""

from __future__ import annotations

import re
from pathlib import Path

from tests.fixtures.daemon import HomeDir

EXPONENT = re.compile(r"\de[-+]\d")


def test_control_characters_in_file_names_are_shown_escaped(vault: HomeDir, tmp_path: Path) -> None:
    note = tmp_path / "evil\nname\x1b[31m.md"
    note.write_text("# Escapes\n\nthe escapeword appears here\n")
    vault.ok("rag", "ingest", "notes", str(note))
    for command in (("rag", "search", "notes", "escapeword"), ("rag", "ingest", "notes", str(note))):
        human = vault.run(*command, json_output=False)
        assert human.code == 0, human.stderr
        assert "\x1b" not in human.stdout and "evil\\x0aname\\x1b[31m.md" in human.stdout
    missing = vault.run("rag", "ingest", "notes", str(tmp_path / "gone\x1b]0;owned\x07"), json_output=False)
    assert missing.code != 0 and "\x1b" not in missing.stderr and "\x07" not in missing.stderr


def test_scores_are_plain_decimals(vault: HomeDir) -> None:
    for title in ("one", "two", "three"):  # a term in every record: BM25 scores very close to zero
        vault.ok("memory", "add", "notes", "--title", title, "--body", "commonword here")
    for command in ("memory", "rag"):
        human = vault.run(command, "search", "notes", "commonword", json_output=False)
        assert human.code == 0 and human.stdout.strip(), human.stderr
        assert not EXPONENT.search(human.stdout), human.stdout


def test_jobs_show_a_finished_search_as_done(vault: HomeDir) -> None:
    vault.ok("memory", "add", "notes", "--title", "t", "--body", "jobword")
    vault.ok("rag", "search", "notes", "jobword")
    human = vault.run("jobs", json_output=False)
    row = next(line for line in human.stdout.splitlines() if " search " in line)
    assert " done " in row and "0/?" not in row

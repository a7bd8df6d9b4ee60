"""Issue 21, item 1: no pattern that runs on note, query or answer text is quadratic.

Each test gives 1 MiB of the worst input we could build (runs of spaces, dots, ``#``, ``*``, backticks, CJK
punctuation, front-matter fences...) and must finish under a **ceiling** of 30 s. That is not a timing assertion of
speed: linear code needs milliseconds, the quadratic patterns these replace needed hours on 1 MiB (a heading line of
30,000 spaces froze the daemon for 40 s). The ceiling is a ``SIGALRM``, which interrupts Python's ``re`` too.

Every compiled pattern of the modules that read such text is found by walking their globals, so a pattern added
later is tested the same way without anyone listing it here.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import memories.rag
from memories.errors import MemoriesError
from memories.rag.answers import parse_answer
from memories.rag.chunking import chunk_text
from memories.rag.notes import MAX_FRONT_MATTER_CHARS, front_matter_end, note_chunks, parse_notes

MIB = 1024 * 1024
CEILING_SECONDS = 30


class CeilingExceeded(BaseException):
    """The work ran past the ceiling: it is not linear. Not an ``Exception``, so no broad handler of the code under
    test (a note's malformed front matter is caught whatever it raises) can swallow it."""


@contextmanager
def ceiling(what: str) -> Iterator[None]:
    """Fail the test if the block runs longer than :data:`CEILING_SECONDS` (a hang, never a slow machine)."""

    def interrupt(signum: int, frame: object) -> None:
        raise CeilingExceeded(f"{what} ran past the {CEILING_SECONDS} s ceiling on 1 MiB: it is not linear")

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, CEILING_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def mib(prefix: str, run: str, suffix: str = "x") -> str:
    """``prefix``, then ``run`` repeated to 1 MiB of code points, then ``suffix`` (what makes a match fail late)."""
    return prefix + run * ((MIB - len(prefix) - len(suffix)) // len(run)) + suffix


RUNS = [
    " ",
    "\t",
    ".",
    "!?",
    "。",
    "…",
    "，、；：",
    "”",
    "#",
    "*",
    "`",
    "-",
    "=",
    "~",
    "\n",
    " \n",
    ".\n",
    '."',
    "[S1, ",
]
"""Single runs: each character class a pattern here repeats, and the separators around them."""

NOTES = {
    "heading of spaces": mib("# a", " "),  # the reported one: `# a` + 30,000 spaces + `x` took 40 s
    "heading of tabs and hashes": mib("# a", " \t#"),
    "heading closed by hashes": mib("## a ", "#", " #"),
    "hashes": mib("", "#"),
    "hash lines": mib("", "# \n", ""),
    "setext underline of = then spaces": "a\n" + mib("", "=", "") + mib("", " "),
    "dots": mib("", "."),  # 16,000 dots took 14 s in the chunker
    "dots and quotes": mib("", '."'),
    "CJK sentence ends": mib("", "。！？"),
    "CJK clause marks": mib("", "，、；："),
    "ellipses then a letter": mib("", "…"),
    "emphasis stars": mib("", "*"),
    "backticks": mib("", "`"),
    "fence lines": mib("", "```\n"),
    "unclosed front matter": mib("---\n", "a: b\n"),
    "front matter of fence-like lines": mib("---\n", "--- x\n", "\n---\n"),
    "front matter of spaced fences": mib("---\n", "---" + " " * 200 + "x\n", "\n---\n"),
    "front matter of a long flow list": mib("---\ntags: [", "a, ", "]\n---\n"),
    "largest parsed front matter": "---\ntags: [" + "a, " * (MAX_FRONT_MATTER_CHARS // 3 - 10) + "]\n---\n# T\n",
    "blank lines of spaces": mib("", "\n" + " " * 100),
    "list markers": mib("", "- "),
    "indented lines": mib("", "    x\n"),
}


def _text_patterns() -> list[tuple[str, re.Pattern[str]]]:
    """Every compiled pattern of ``memories.rag.*`` (note, chunk, query and answer text)."""
    found = []
    for module_info in pkgutil.iter_modules(memories.rag.__path__, "memories.rag."):
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                found.append((f"{module_info.name}.{name}", value))
    return found


PATTERNS = _text_patterns()


def test_the_walk_finds_the_patterns_of_notes_and_chunks() -> None:
    names = {name for name, _ in PATTERNS}
    assert {"memories.rag.chunking._SENTENCE", "memories.rag.notes._FRONT_MATTER"} <= names


@pytest.mark.parametrize(("name", "pattern"), PATTERNS, ids=[name for name, _ in PATTERNS])
def test_every_pattern_is_linear_on_runs_of_what_it_repeats(name: str, pattern: re.Pattern[str]) -> None:
    """Searching from each start position (as ``finditer`` and ``sub`` do; ``subn`` loops in C) and matching at the
    start."""
    for run in RUNS:
        text = mib("", run)
        with ceiling(f"{name} on a run of {run!r}"):
            pattern.subn("", text)
            pattern.match(text)


@pytest.mark.parametrize("kind", list(NOTES))
def test_parsing_a_hostile_note_is_linear(kind: str) -> None:
    """What the index worker runs for an ingest (title, tags) and for the index (front matter end, chunks)."""
    text = NOTES[kind]
    with ceiling(f"parsing {kind}"):
        [parsed] = parse_notes([text])
        front_matter_end(text)
        chunks = note_chunks(text)
    assert parsed.failure is None
    assert chunks or not text[front_matter_end(text) :].strip()


@pytest.mark.parametrize("run", RUNS)
def test_chunking_runs_of_punctuation_is_linear(run: str) -> None:
    text = mib("", run)
    with ceiling(f"chunking a run of {run!r}"):
        chunk_text(text)


def test_headings_keep_their_meaning() -> None:
    """The scan that replaced the heading pattern reads headings as CommonMark does (and as the pattern did)."""
    [title] = parse_notes(["# a" + " " * 8_000 + "x\n"])
    assert title.title == "a x"
    [capped] = parse_notes(["# a" + " " * 30_000 + "x\n"])  # only the first 8,192 code points of a line are read
    assert capped.title == "a"
    cases = {"## Title ##": "Title", "# Title#": "Title#", "# #": None, "#Title": None, "####### seven": None}
    for line, expected in cases.items():
        assert parse_notes([line])[0].title == expected, line


@pytest.mark.parametrize(
    "reply",
    [
        mib("```", " "),
        mib("```json", "\n "),
        mib("<think>", " "),
        mib("[S1", ", S1"),
        mib('{"answer": "', "[S1] "),
        mib("", "<think></think>"),
        mib("", "</think>x<think>"),
        mib("", '{"a":'),
        mib("", '{"a'),
        mib("", "{"),
        mib("", '{"answer": "x"}'),
        mib("", '{"b": 1}{"c": 2}'),
    ],
    ids=[
        "fence of spaces",
        "fence of blank lines",
        "unclosed thought",
        "unclosed citation list",
        "unclosed answer",
        "thought blocks",
        "closing and opening tags",
        "nested objects",
        "unclosed strings",
        "braces",
        "one answer many times",
        "different objects",
    ],
)
def test_parsing_a_hostile_model_reply_is_linear(reply: str) -> None:
    """A model's reply is read in the supervisor (``rag ask``), and a remote model or a note it quotes can make it
    anything: an opening fence and 1 MiB of spaces took hours."""
    with ceiling("parsing a model reply"), pytest.raises(MemoriesError) as failed:
        parse_answer(reply, ["S1"])
    assert failed.value.code == "invalid_model_output"


def test_the_daemon_does_not_load_the_note_parser() -> None:
    """Structural: the supervisor's process has no note parser to run (PyYAML and :mod:`memories.rag.notes` load
    only in the index worker), so no pattern written later can hold its event loop either."""
    code = "import sys, memories.daemon.main; print([m for m in ('memories.rag.notes', 'yaml') if m in sys.modules])"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.strip() == "[]"

"""The main job on the sample notes, in a throwaway home: start, init, ingest 311 notes, search, stop.

Run from the repository after installing it (the README's first command)::

    .venv/bin/python ops/demo.py [--keep]

Every step is a real ``memories`` command against a real daemon; the home is deleted at the end unless
``--keep`` is given (then it is printed, with the daemon stopped).
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "corpus"
"""The sample notes shipped with the project (``tests/corpus/SOURCES.md`` gives their sources and licences)."""
PASSPHRASE = "demo passphrase, not a secret"

SEARCHES = [
    ("Traditional Chinese", ["臺灣身分證字號檢核"]),
    ("Traditional query, Simplified and Traditional notes", ["資料庫 遷移 回滾"]),
    ("Simplified Chinese, single-character terms", ["所有权 栈 堆"]),
    ("English", ["split a subdirectory with git subtree and push changes back"]),
    ("mixed Chinese and code terms", ["Elasticsearch bool query must should 用法"]),
    ("phrase match", ["中英文之間需要增加空格", "--match-mode", "phrase"]),
]


def memories(home: Path, *args: str, stdin: str | None = None, show: bool = True, check: bool = True) -> str:
    """Run one ``memories`` command with this home, echo it and its output; stop the demo if it fails."""
    executable = Path(sys.executable).with_name("memories")
    command = [str(executable if executable.exists() else "memories"), *args]
    if show:
        print(f"\n$ memories {' '.join(shlex.quote(a) for a in args)}", flush=True)
    done = subprocess.run(
        command, input=stdin, text=True, capture_output=True, env={**os.environ, "MEMORIES_HOME": str(home)}
    )
    if show and done.stdout:
        print(done.stdout.rstrip())
    if done.returncode != 0 and check:
        print(done.stderr.rstrip(), file=sys.stderr)
        raise SystemExit(f"demo step failed: memories {' '.join(args)}")
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the throwaway home afterwards")
    options = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memories-demo-"))
    print(f"throwaway home: {home}")
    try:
        memories(home, "daemon", "start")
        memories(home, "init", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        memories(home, "vault", "create", "notes")
        ingested = memories(
            home,
            "rag",
            "ingest",
            "notes",
            str(CORPUS),
            "--recursive",
            "--exclude",
            "SOURCES.md",
            "--exclude",
            "queries.md",
            show=False,
        )
        print(f"\n$ memories rag ingest notes {CORPUS} --recursive --exclude SOURCES.md --exclude queries.md")
        print(ingested.rstrip().splitlines()[-1])
        for label, query in SEARCHES:
            print(f"\n# {label}")
            memories(home, "rag", "search", "notes", *query, "--limit", "3")
        memories(home, "memory", "search", "notes", "git rebase", "--limit", "3")
        memories(home, "rag", "status", "notes")
    finally:
        memories(home, "daemon", "stop", show=False, check=False)
        if options.keep:
            print(f"\nkept the home {home} (MEMORIES_HOME={home} memories daemon start)")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

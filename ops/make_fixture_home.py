"""Build a small test home with the installed release: a fast KDF, two vaults, ingested cards and memories.

Tests copy such a home, unlock it with newer code and check that what an older release wrote still reads,
searches, re-ingests and syncs. Run it with the release you want a home of installed beside the interpreter::

    .venv/bin/python ops/make_fixture_home.py tests/fixtures/homes/NAME

It writes ``NAME/home`` (``memories.db`` and ``config.toml``; the daemon's ``run/`` and ``logs/`` are removed),
``NAME/notes`` (the files that were ingested, as they are after the last ingest) and ``NAME/manifest.json``
(the release's commit, the passphrase, every vault and record with its id, kind, sensitivity, title, source and
latest revision). What it makes, in order:

- vault ``notes``: ``rag ingest notes NOTES --recursive`` of four notes (``README.md``, ``guide/README.md``,
  ``guide/setup.md``, ``changed.md``), then ``changed.md`` edited and the folder ingested again (revision 2), then
  ``direct/single.md`` named directly (its source is the file name); a general memory updated once with
  ``--meta`` (revision 2); a private memory;
- vault ``work``: one general memory.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

PASSPHRASE = "fixture home passphrase"
FAST_KDF = "[crypto]\nkdf_memory_kib = 256\nkdf_iterations = 1\nkdf_lanes = 1\n"
"""Argon2id at its cheapest, as in the tests (``tests/fixtures/daemon.py``)."""

NOTES = {
    "README.md": "# Fixture notes\n\nThe top-level README of the fixture folder, about sourdough bread.\n",
    "guide/README.md": "# Guide\n\nA second README with the same file name, about alpine hiking routes.\n",
    "guide/setup.md": "---\ntags: [setup, 設定]\n---\n# Setup\n\n安裝步驟：先建立資料庫，再執行遷移。\n",
    "changed.md": "# Changed later\n\nThe first version of this note mentions lighthouses.\n",
}
CHANGED = ("changed.md", "# Changed later\n\nThe second version of this note mentions windmills instead.\n")
DIRECT = ("direct/single.md", "# Named directly\n\nA note ingested by naming the file, about tide pools.\n")


def memories(home: Path, *args: str, stdin: str | None = None) -> Any:
    """Run ``memories ARGS --json`` with this home; its JSON document (stops the script on failure)."""
    executable = Path(sys.executable).with_name("memories")
    done = subprocess.run(
        [str(executable), *args, "--json"],
        input=stdin,
        text=True,
        capture_output=True,
        env={**os.environ, "MEMORIES_HOME": str(home)},
    )
    if done.returncode != 0:
        raise SystemExit(f"memories {' '.join(args)} exited {done.returncode}: {done.stdout} {done.stderr}")
    return json.loads(done.stdout)


def write(root: Path, relative: str, text: str) -> Path:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def build(out: Path) -> dict[str, Any]:
    """Make ``out/home`` and ``out/notes``; returns the manifest."""
    home, notes = out / "home", out / "notes"
    home.mkdir(mode=0o700, parents=True)
    (home / "config.toml").write_text(FAST_KDF)
    for relative, text in NOTES.items():
        write(notes, relative, text)
    memories(home, "daemon", "start")
    try:
        memories(home, "init", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
        for name in ("notes", "work"):
            memories(home, "vault", "create", name)
        memories(home, "rag", "ingest", "notes", str(notes), "--recursive")
        write(notes, *CHANGED)
        memories(home, "rag", "ingest", "notes", str(notes), "--recursive")
        memories(home, "rag", "ingest", "notes", str(write(notes, *DIRECT)))
        ref = memories(home, "memory", "add", "notes", "--title", "Call mum", "--body", "Sunday, about the trip")
        memories(home, "memory", "update", "notes", ref["id"], "--meta", "topic=family")
        memories(home, "memory", "add", "notes", "--title", "Door code", "--body", "4711", "--sensitivity", "private")
        memories(home, "memory", "add", "work", "--title", "Standup", "--body", "Daily at nine, room 3")
        manifest: dict[str, Any] = {"passphrase": PASSPHRASE, "commit": _commit(), "vaults": []}
        for vault in memories(home, "vault", "list")["vaults"]:
            records = []
            for summary in memories(home, "memory", "list", vault["id"])["records"]:
                record = memories(home, "memory", "read", vault["id"], summary["id"])
                records.append(
                    {key: record[key] for key in ("id", "revision", "kind", "sensitivity", "title")}
                    | {"source": record["meta"].get("source")}
                )
            manifest["vaults"].append({"id": vault["id"], "name": vault["name"], "records": records})
    finally:
        memories(home, "daemon", "stop")
    for transient in ("run", "logs"):
        shutil.rmtree(home / transient, ignore_errors=True)
    leftovers = [p.name for p in home.iterdir() if p.name not in ("memories.db", "config.toml")]
    if leftovers:
        raise SystemExit(f"unexpected files left in the home: {leftovers}")
    return manifest


def _commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to create (must not exist)")
    options = parser.parse_args()
    if options.out.exists():
        raise SystemExit(f"{options.out} already exists")
    manifest = build(options.out)
    (options.out / "manifest.json").write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()

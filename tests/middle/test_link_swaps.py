"""Issue 29, item 9: a note swapped for a symbolic link between the walk that lists it and the read is never
followed, by ``rag ingest`` or by a watched folder's scans. A thread swaps one note of the folder, in a loop, for a
link to a secret outside it and back (each swap one ``rename``, as an attacker would make it atomic), while the
daemon's middle ingests or scans the folder again and again; no card may ever hold the secret."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memories import protocol as p
from memories.daemon.core.context import RequestContext
from tests.fixtures.middle import Middle

SECRET = "-----BEGIN OPENSSH PRIVATE KEY----- zqxsecretmarker"
ROUNDS = 60
"""Ingests (or scans) while the note is swapped: about one in four met a link in the read before the fix."""


@contextmanager
def swapping(note: Path, secret: Path) -> Iterator[None]:
    """Swap ``note`` for a link to ``secret`` and back, as fast as a thread can, until the block ends."""
    stop = threading.Event()
    link, plain = note.with_name(".swap-link"), note.with_name(".swap-plain")  # hidden: never walked

    def swap() -> None:
        count = 0
        while not stop.is_set():
            count += 1
            link.unlink(missing_ok=True)
            link.symlink_to(secret)
            os.replace(link, note)
            plain.write_text(f"# Note\n\nan ordinary note, version {count}\n")
            os.replace(plain, note)

    thread = threading.Thread(target=swap, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def folder_with_secret(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A folder of two notes (one to swap) and a secret outside it: ``(folder, note, secret)``."""
    secret = tmp_path / "dot-ssh" / "id_rsa.md"
    secret.parent.mkdir()
    secret.write_text(SECRET + "\n")
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "other.md").write_text("# Other\n\nnever swapped\n")
    note = folder / "note.md"
    note.write_text("# Note\n\nan ordinary note\n")
    return folder, note, secret


async def bodies(middle: Middle) -> list[str]:
    """The latest body of every record of ``notes``."""
    listed = await middle.ok(p.MemoryList(vault="notes"))
    return [(await middle.ok(p.MemoryRead(vault="notes", id=record.id))).body for record in listed.records]


async def test_ingest_never_follows_a_link_swapped_in_after_the_walk(middle: Middle, tmp_path: Path) -> None:
    folder, note, secret = folder_with_secret(tmp_path)
    with swapping(note, secret):
        for _ in range(ROUNDS):
            report = await middle.ok(p.RagIngest(vault="notes", paths=[str(folder)]))
            for result in report.results:
                assert result.status in ("added", "updated", "unchanged", "skipped", "refused"), result
                if result.status == "refused":
                    assert result.error is not None and result.error.code == "invalid_argument", result.error
    assert not any(SECRET in body for body in await bodies(middle))


async def test_a_watch_never_follows_a_link_swapped_in_after_its_scan(middle: Middle, tmp_path: Path) -> None:
    folder, note, secret = folder_with_secret(tmp_path)
    await middle.ok(p.RagWatch(vault="notes", folder=str(folder)))
    folders = middle.daemon.folders
    folders.watchers.stop_all()  # the test runs the scans itself, as the watcher would
    vault = await middle.daemon.store.resolve_unlocked("notes")
    [watch] = await middle.daemon.store.watches(vault)
    with swapping(note, secret):
        for _ in range(ROUNDS):
            report, _ = await folders.scan(vault, watch.id, RequestContext())
            for result in report.results:
                assert result.status in ("updated", "unchanged", "refused"), result
                if result.status == "refused":
                    assert result.error is not None and result.error.code == "invalid_argument", result.error
    assert (await middle.daemon.store.watches(vault))[0].paused is None
    assert not any(SECRET in body for body in await bodies(middle))

"""The watchers of watched folders: what wakes a watch's scans, from the moment the home is unlocked until it is
locked, the watch is paused or unregistered.

Each running watch has one task: a scan at once (the catch-up at unlock), then one per burst of file system events
from watchfiles (inotify, FSEvents, ReadDirectoryChangesW through the Rust ``notify`` crate, debounced there: a
burst ends after :data:`STEP_MS` without an event, or after :data:`DEBOUNCE_MS`), a follow-up scan while a file's
absence awaits its confirmation, and a scan every :data:`QUIET_SCAN_SECONDS` anyway. watchfiles is a well-kept
library (used by uvicorn's reloader) with native backends for the three systems and a polling fallback; it is the
only part of the daemon that imports it. A watcher that cannot start (the inotify watch limit, a network file
system, which sends no events for changes made on other machines) falls back to a scan every
:data:`POLL_SECONDS`, and says why and how to raise the limit (:attr:`Watchers.state`, shown by ``rag status``).
What a scan does is not this module's business: it calls the scan it is given.
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from memories.daemon.core.context import StartSoon
from memories.daemon.ingest.folder_scan import CONFIRM_SECONDS
from memories.daemon.ingest.note_files import TEXT_SUFFIXES, is_temporary
from memories.logs import without_folder
from memories.vault.store import VaultRow
from memories.vault.watches import Watch

log = logging.getLogger("memories.watch")

POLL_SECONDS = 30.0
"""How often a watch without a working watcher scans its folder."""

QUIET_SCAN_SECONDS = 300.0
"""How often a watch with a working watcher scans anyway: it catches a folder renamed away and replaced (whose
events stop) and events a full kernel queue dropped. No deletion ever happens before a scan has checked the folder
itself."""

DEBOUNCE_MS, STEP_MS = 1600, 50
"""watchfiles' debounce: a burst of events ends after ``STEP_MS`` without one, or after ``DEBOUNCE_MS``."""

NETWORK_FILE_SYSTEMS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "afs", "fuse.sshfs", "fuse.rclone"})
"""File systems on which another machine's changes send no event (``/proc/self/mountinfo`` type)."""

Scan = Callable[[VaultRow, str], Awaitable[bool | None]]
"""One scan of a watch (vault, watch id): whether a follow-up scan should confirm an absence, or ``None`` when the
watch ends (paused, unregistered, the vault gone, the home locked)."""


@dataclass
class _Runner:
    """One running watch: its cancel scope, what wakes its scans, and how it learns of changes."""

    watch_id: str
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    wake: trio.Event = field(default_factory=trio.Event)
    mode: str = "watching"
    note: str | None = None


class Watchers:
    """The running watches.

    Args:
        scan: runs one scan; start_soon: starts a task in the daemon's nursery.

    Attributes:
        watcher_error: test hooks: every watcher fails to start with this message (``ENOSPC``, the inotify limit);
            ``None``: they start.
    """

    def __init__(self, scan: Scan, start_soon: StartSoon) -> None:
        self._scan = scan
        self._start_soon = start_soon
        self._runners: dict[str, _Runner] = {}
        self.watcher_error: str | None = None

    def start(self, vault: VaultRow, watch: Watch) -> None:
        """Run ``watch`` (again, when it runs: a new registration or a resume): a scan at once, then as events come."""
        self.stop(watch.id)
        runner = self._runners[watch.id] = _Runner(watch.id)
        self._start_soon(self._run, vault, watch, runner)

    def stop(self, watch_id: str) -> None:
        """Stop one watch (unregistered, or about to be scanned by a request)."""
        runner = self._runners.pop(watch_id, None)
        if runner is not None:
            runner.scope.cancel()

    def stop_all(self) -> None:
        """Stop every watch (lock)."""
        for runner in list(self._runners.values()):
            runner.scope.cancel()
        self._runners.clear()

    def state(self, watch_id: str) -> tuple[str, str | None] | None:
        """``(mode, note)`` of a running watch — ``watching`` (events) or ``scanning`` (periodic scans, ``note``
        says why) — or ``None`` when it does not run."""
        runner = self._runners.get(watch_id)
        return None if runner is None else (runner.mode, runner.note)

    async def _run(self, vault: VaultRow, watch: Watch, runner: _Runner) -> None:
        with runner.scope:
            try:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._events, watch, runner)
                    delay = 0.0
                    while True:
                        with trio.move_on_after(delay):
                            await runner.wake.wait()
                        runner.wake = trio.Event()
                        follow_up = await self._scan(vault, watch.id)
                        if follow_up is None:
                            nursery.cancel_scope.cancel()
                            return
                        if follow_up:
                            delay = CONFIRM_SECONDS + 0.5
                        else:
                            delay = POLL_SECONDS if runner.mode == "scanning" else QUIET_SCAN_SECONDS
            finally:
                if self._runners.get(runner.watch_id) is runner:
                    del self._runners[runner.watch_id]

    async def _events(self, watch: Watch, runner: _Runner) -> None:
        """Wake ``runner`` for each burst of events about notes; when no watcher can start, fall back to periodic
        scans and say why."""
        from watchfiles._rust_notify import RustNotify  # the daemon's only user; kept off the clients' path

        problem = await trio.to_thread.run_sync(_no_events_here, watch.folder)
        notify = None
        if problem is None:
            try:
                if self.watcher_error is not None:
                    raise OSError(errno.ENOSPC, self.watcher_error)
                notify = RustNotify([watch.folder], False, False, 300, watch.recursive, True)
            except Exception as exc:
                problem = _watcher_failed(exc)
        if notify is None:
            runner.mode, runner.note = "scanning", problem
            log.warning("watch %s: %s", watch.id, without_folder(problem or "", watch.folder))
            return
        stop = threading.Event()
        with notify:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_stop_on_cancel, stop)
                try:
                    while True:
                        raw = await trio.to_thread.run_sync(notify.watch, DEBOUNCE_MS, STEP_MS, 60_000, stop)
                        if raw == "stop":
                            return
                        if isinstance(raw, set) and any(_about_notes(watch.folder, path) for _, path in raw):
                            runner.wake.set()
                except Exception as exc:  # the watcher broke: scan on a timer from now on
                    runner.mode, runner.note = "scanning", _watcher_failed(exc)
                    log.warning("watch %s: %s", watch.id, without_folder(runner.note, watch.folder))
                finally:
                    nursery.cancel_scope.cancel()


def within(folder: str, parent: str) -> bool:
    return folder == parent or folder.startswith(parent.rstrip(os.path.sep) + os.path.sep)


def _about_notes(folder: str, path: str) -> bool:
    """An event's path that can change what the folder's notes are: the folder itself (renamed away or deleted: the
    scan pauses the watch at once), a note (a ``.md``, ``.markdown`` or ``.txt`` file), or what may be a folder (a
    name without a suffix, a folder, a path gone: a folder named ``2025.03`` moved in or out sends one event, for
    itself), outside dot folders (``.git``, ``.obsidian``) and not a temporary file. A database, a log or a sync
    payload written is none: the Memories home inside a watched folder (``~`` watched, the home in it) must not wake
    a scan with every write of the scan's own state."""
    if path == folder:
        return True
    parts = os.path.relpath(path, folder).split(os.sep)
    if any(part.startswith(".") for part in parts) or is_temporary(parts[-1]):
        return False
    suffix = os.path.splitext(parts[-1])[1].lower()
    if suffix in TEXT_SUFFIXES or not suffix:
        return True
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:  # gone (or unreachable): it may have been a folder of notes
        return True


async def _stop_on_cancel(stop: threading.Event) -> None:
    """Set ``stop`` when cancelled, so the watcher thread returns (within ``STEP_MS``)."""
    try:
        await trio.sleep_forever()
    finally:
        stop.set()


def _no_events_here(folder: str) -> str | None:
    """Why file system events will not do for ``folder`` (a network file system), or ``None``."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as mounts:
            best, kind = "", ""
            for line in mounts:
                fields = line.split()
                if " - " not in line or len(fields) < 5:
                    continue
                point = fields[4].replace("\\040", " ")
                if within(folder, point) and len(point) >= len(best):
                    best, kind = point, line.split(" - ", 1)[1].split()[0]
    except OSError:  # not Linux: trust the watcher
        return None
    if kind in NETWORK_FILE_SYSTEMS:
        return (
            f"{folder} is on a network file system ({kind}), where changes made on other machines send no events; "
            f"scanning it every {POLL_SECONDS:g} s instead"
        )
    return None


def _watcher_failed(exc: BaseException) -> str:
    """The message of a watcher that could not start or broke, naming the limit and how to raise it."""
    text = str(exc) or type(exc).__name__
    limit = (isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EMFILE)) or "limit" in text.lower()
    message = f"the file watcher could not run ({text}); scanning every {POLL_SECONDS:g} s instead"
    if limit:
        current = _read_limit("/proc/sys/fs/inotify/max_user_watches")
        message += (
            f". The inotify watch limit (fs.inotify.max_user_watches{f' = {current}' if current else ''}) is "
            "reached: raise it with `sudo sysctl fs.inotify.max_user_watches=524288 "
            "fs.inotify.max_user_instances=1024` (and a file in /etc/sysctl.d/ to keep it), then restart the daemon"
        )
    return message


def _read_limit(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as file:
            return file.read().strip() or None
    except OSError:
        return None

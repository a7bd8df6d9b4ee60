"""``memories daemon start`` and ``stop`` from the client side: detach a daemon and wait until it answers.

The daemon is ``python -m memories daemon run`` in a new session (so closing the terminal does not stop it), with
standard input from ``/dev/null`` and output appended to ``<home>/logs/daemon.log``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import signal
import subprocess
import sys
import time

import msgspec

from memories import protocol as p
from memories.client import Client
from memories.errors import CODES, MemoriesError
from memories.paths import Home, ensure_private_dir, ensure_socket_folder, storage_error

START_TIMEOUT = 60.0
"""Seconds ``daemon start`` waits for the socket to answer."""

STOP_TIMEOUT = 30.0
"""Seconds ``daemon stop`` waits for the daemon process to exit before killing it."""

_POLL = 0.05
_ERROR_LINE = re.compile(r"^error: ([a-z_]+): (.*)$")
_FULL_BYTES = 64 * 1024
"""Free bytes below which a daemon that left no error line is taken to have met a full disk: less than SQLite
needs to create a store (a few pages and a write-ahead log) or the log its line."""


def daemon_status(client: Client) -> p.DaemonStatus | None:
    """The running daemon's status, or ``None`` when none answers.

    Raises:
        MemoriesError: ``daemon_unresponsive`` when a daemon accepts the connection but does not answer.
    """
    try:
        reply = client.request(p.Status())
    except MemoriesError as exc:
        if exc.code == "daemon_not_running":
            return None
        raise
    return reply.result


class Started(p.DaemonStatus, kw_only=True):
    """What ``daemon start`` found: the daemon's status, and whether it was already running (then nothing was
    started: scripts and service units may call ``daemon start`` blindly). Its ``--json`` document is the status's
    with ``already_running``."""

    already_running: bool


def _started(status: p.DaemonStatus, already_running: bool) -> Started:
    return Started(**msgspec.structs.asdict(status), already_running=already_running)


def start_daemon(home: Home) -> Started:
    """Start a detached daemon for ``home`` unless one already serves it with the same config file.

    Raises:
        MemoriesError: ``home_mismatch`` when the running daemon uses another config file;
            ``daemon_unresponsive`` when a daemon holds the home but does not answer; the daemon's own start-up
            error (``invalid_config``...); ``daemon_start_failed`` when it neither answers nor says why within
            :data:`START_TIMEOUT` seconds; ``socket_folder_unsafe`` (:func:`memories.paths.ensure_runtime_dir`).
    """
    ensure_socket_folder(home)  # first: a socket folder another account made is never connected to, nor used
    client = Client(home)
    running = _running(home, client)
    if running is not None:
        return _started(running, already_running=True)
    stuck = lock_holder(home)
    if stuck is not None:
        raise MemoriesError(
            "daemon_unresponsive",
            f"a daemon (pid {stuck}) holds the lock of {home.root} but does not answer; "
            "stop it with `memories daemon stop`",
        )
    for folder in (home.root, home.log_dir):
        ensure_private_dir(folder)
    with open(home.log_path, "ab") as log:
        os.chmod(home.log_path, 0o600)
        offset = log.tell()
        process = subprocess.Popen(
            [
                sys.executable,
                "-P",  # never import from the working folder
                "-m",
                "memories",
                "daemon",
                "run",
                "--home",
                home.root,
                *(["--config", home.config_path] if home.config_path != home.default_config_path else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            cwd=home.root,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            error = _start_error(home, offset)
            if error.code == "daemon_already_running":  # another `daemon start` won the race: fine if it answers
                running = _running(home, client)
                if running is not None:
                    return _started(running, already_running=True)
            raise error
        status = daemon_status(client)
        if status is not None:
            return _started(status, already_running=False)
        time.sleep(_POLL)
    process.kill()
    raise MemoriesError(
        "daemon_start_failed", f"the daemon did not answer within {START_TIMEOUT:g} s; see {home.log_path}"
    )


def _running(home: Home, client: Client) -> p.DaemonStatus | None:
    """The status of the daemon already serving ``home`` with the same config file, or ``None`` when none runs.

    Raises:
        MemoriesError: ``home_mismatch`` (another config file), ``daemon_unresponsive``.
    """
    status = daemon_status(client)
    if status is not None and status.config != home.config_path:
        raise MemoriesError(
            "home_mismatch",
            f"a daemon already serves {home.root} with the config {status.config}, not {home.config_path}; "
            "stop it first (`memories daemon stop`) to start one with this config",
            {"daemon_config": status.config, "client_config": home.config_path},
        )
    return status


class Stopped:
    """What ``daemon stop`` did: whether no daemon was running (then nothing was stopped: like ``daemon start``,
    scripts may call it blindly, as ``systemctl stop`` of a stopped unit succeeds), and warnings for the user."""

    __slots__ = ("already_stopped", "warnings")

    def __init__(self, already_stopped: bool, warnings: list[str]) -> None:
        self.already_stopped = already_stopped
        self.warnings = warnings


def stop_daemon(home: Home) -> Stopped:
    """Ask the daemon to stop and wait until its process is gone; no daemon at all is success too.

    A daemon still alive :data:`STOP_TIMEOUT` seconds later (something kept it from finishing) is killed
    (SIGKILL): the store is crash-safe, and a daemon that holds the home's lock but no longer answers would block
    every later start.
    """
    client = Client(home)
    try:
        status = daemon_status(client)
    except MemoriesError as exc:
        if exc.code != "daemon_unresponsive":
            raise
        status = None
    if status is None:
        stuck = lock_holder(home)
        if stuck is None:
            return Stopped(already_stopped=True, warnings=[])
        _kill_group(stuck)  # it holds the home's lock but does not answer: nothing else can end it
        return Stopped(False, [f"the daemon (pid {stuck}) held the home's lock without answering and was killed"])
    with contextlib.suppress(MemoriesError):  # it may be gone before it answers; its pid tells
        client.request(p.Stop())
    deadline = time.monotonic() + STOP_TIMEOUT
    while time.monotonic() < deadline and _alive(status.pid):
        time.sleep(_POLL)
    if not _alive(status.pid):
        return Stopped(False, [])
    _kill_group(status.pid)
    return Stopped(False, [f"the daemon (pid {status.pid}) did not exit within {STOP_TIMEOUT:g} s and was killed"])


def lock_holder(home: Home) -> int | None:
    """The pid written in the home's lock file while a daemon process holds the lock, else ``None``."""
    try:
        descriptor = os.open(home.lock_path, os.O_RDONLY)
    except OSError:  # no lock file (no daemon ever ran here), or the home is not a folder
        return None
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.read(descriptor, 32).decode("ascii", "replace").strip()
            return int(text) if text.isdigit() else None
        fcntl.flock(descriptor, fcntl.LOCK_UN)
        return None
    finally:
        os.close(descriptor)


def _kill_group(pid: int) -> None:
    """SIGKILL a detached daemon and its workers (``daemon start`` made it a session and group leader)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (a detached daemon is reaped by init, not by us)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _start_error(home: Home, offset: int) -> MemoriesError:
    """The ``error: CODE: message`` line the failed daemon wrote to its log, as an error; ``disk_full`` naming the
    home when there is none and the home's disk has less than :data:`_FULL_BYTES` free (the daemon could not write
    its log either: "see the log" would point at nothing)."""
    with open(home.log_path, "rb") as log:
        log.seek(offset)
        lines = log.read().decode("utf-8", "replace").splitlines()
    for line in reversed(lines):
        match = _ERROR_LINE.match(line)
        if match and match.group(1) in CODES:
            return MemoriesError(match.group(1), match.group(2))
    disk = os.statvfs(home.root)
    if disk.f_bavail * disk.f_frsize < _FULL_BYTES:
        full = storage_error(errno.ENOSPC, home.root)
        assert full is not None
        return full
    return MemoriesError("daemon_start_failed", f"the daemon exited at start; see {home.log_path}")

"""``memories daemon start`` and ``stop`` from the client side: detach a daemon and wait until it answers.

The daemon is ``python -m memories daemon run`` in a new session (so closing the terminal does not stop it), with
standard input from ``/dev/null`` and output appended to ``<home>/logs/daemon.log``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

from memories import protocol as p
from memories.client import Client
from memories.errors import CODES, MemoriesError
from memories.paths import Home, ensure_private_dir

START_TIMEOUT = 60.0
"""Seconds ``daemon start`` waits for the socket to answer."""

_POLL = 0.05
_ERROR_LINE = re.compile(r"^error: ([a-z_]+): (.*)$")


def daemon_status(client: Client) -> p.DaemonStatus | None:
    """The running daemon's status, or ``None`` when none answers."""
    try:
        reply = client.request(p.Status())
    except MemoriesError as exc:
        if exc.code == "daemon_not_running":
            return None
        raise
    assert isinstance(reply.result, p.DaemonStatus)
    return reply.result


def start_daemon(home: Home) -> p.DaemonStatus:
    """Start a detached daemon for ``home`` and return its first status.

    Raises:
        MemoriesError: ``daemon_already_running``; the daemon's own start-up error (``invalid_config``...);
            ``daemon_start_failed`` when it neither answers nor says why within :data:`START_TIMEOUT` seconds.
    """
    client = Client(home)
    if daemon_status(client) is not None:
        raise MemoriesError("daemon_already_running", f"a daemon already serves {home.root}")
    for folder in (home.root, home.log_dir):
        ensure_private_dir(folder)
    with open(home.log_path, "ab") as log:
        os.chmod(home.log_path, 0o600)
        offset = log.tell()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "memories",
                "daemon",
                "run",
                "--home",
                home.root,
                "--config",
                home.config_path,
            ],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise _start_error(home, offset)
        status = daemon_status(client)
        if status is not None:
            return status
        time.sleep(_POLL)
    process.kill()
    raise MemoriesError(
        "daemon_start_failed", f"the daemon did not answer within {START_TIMEOUT:g} s; see {home.log_path}"
    )


def stop_daemon(home: Home) -> None:
    """Ask the daemon to stop and wait until its socket stops answering (at most 30 s)."""
    client = Client(home)
    client.request(p.Stop())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and daemon_status(client) is not None:
        time.sleep(_POLL)


def _start_error(home: Home, offset: int) -> MemoriesError:
    """The ``error: CODE: message`` line the failed daemon wrote to its log, as an error."""
    with open(home.log_path, "rb") as log:
        log.seek(offset)
        lines = log.read().decode("utf-8", "replace").splitlines()
    for line in reversed(lines):
        match = _ERROR_LINE.match(line)
        if match and match.group(1) in CODES:
            return MemoriesError(match.group(1), match.group(2))
    return MemoriesError("daemon_start_failed", f"the daemon exited at start; see {home.log_path}")

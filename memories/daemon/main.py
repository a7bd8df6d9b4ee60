"""``memories daemon run``: take the home's lock, load config and hooks, serve until stopped.

The lock (``flock`` on ``<home>/run/daemon.lock``) makes a second daemon for the same home fail with
``daemon_already_running`` instead of stealing the socket; since the running daemon holds it, any socket file
found at start is a leftover of a dead daemon and is replaced.
"""

from __future__ import annotations

import fcntl
import logging
import os
import sys
from pathlib import Path

import msgspec
import trio

from memories.config import load_config
from memories.daemon.supervisor import Daemon
from memories.errors import MemoriesError
from memories.paths import Home, ensure_private_dir
from memories.testing import HOOKS_ENV, load_hooks


def run_daemon(home: Home) -> None:
    """Serve ``home`` in the foreground; logs go to stderr (``daemon start`` points it at the log file).

    Raises:
        MemoriesError: ``daemon_already_running``, ``invalid_config``.
    """
    for folder in (home.root, home.run_dir, home.log_dir):
        ensure_private_dir(folder)
    lock_fd = os.open(home.lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
        raise MemoriesError("daemon_already_running", f"a daemon already serves {home.root}") from None
    os.ftruncate(lock_fd, 0)
    os.write(lock_fd, f"{os.getpid()}\n".encode())  # so `daemon stop` can find a daemon that stopped answering
    os.chdir(home.root)  # never keep the folder it was started from busy, nor resolve anything against it
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s daemon[%(process)d] %(name)s %(levelname)s %(message)s",
    )
    config = load_config(Path(home.config_path))
    try:
        hooks = load_hooks()
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MemoriesError("invalid_argument", f"{HOOKS_ENV} is malformed: {exc}") from None
    if hooks is not None:
        logging.getLogger("memories.daemon").warning("test hooks are active (%s is set)", HOOKS_ENV)
    daemon = Daemon(home, config, hooks, sys.stderr)
    try:
        trio.run(daemon.serve)
    finally:
        os.close(lock_fd)

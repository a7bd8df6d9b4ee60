"""Test hooks: deliberate faults and swaps that exist only when the test suite sets ``MEMORIES_TEST_HOOKS``.

The variable holds a JSON object decoded into :class:`TestHooks`; without it :func:`load_hooks` returns ``None``
and no hook is reachable from any command, config key or MCP call. The daemon passes the variable to its
workers (they inherit its environment) and reports ``test_hooks: true`` in ``daemon status``.

Example: ``MEMORIES_TEST_HOOKS='{"step_delay_seconds": {"IndexQuery": 3}}'`` makes the index worker sleep
3 s before answering each search step.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import msgspec

HOOKS_ENV = "MEMORIES_TEST_HOOKS"


class HoldStep(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One worker step held until the worker is killed: a known point for a fault test to strike at.

    A worker answers ``after`` requests of type ``kind``, then holds the next one forever, first creating the
    file ``marker`` (the test waits for it, so its kill lands while that step is in the worker). The marker also
    makes the hold happen once per test: while it exists no worker holds, so the restarted worker runs normally.

    Attributes:
        kind: worker request type name (``EmbedBatch``...).
        after: how many such requests a worker process answers before it holds one.
        marker: path of the file created when the hold begins (its folder must exist).
    """

    kind: str
    after: int = 0
    marker: str


class TestHooks(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Every hook, all off by default.

    Attributes:
        step_delay_seconds: worker request type name (``IndexQuery``, ``EmbedBatch``...) -> seconds a worker
            sleeps before handling such a request: a deliberately slow step.
        cut_after_batches: an embedding round ends with ``budget_exceeded`` after this many batches, as if its
            budget ran out there.
        model_manifest: path of a manifest JSON that replaces the pinned one (a tiny generated model).
        clock_offset_file: path of a file holding a number of seconds added to the daemon's clock for grant
            expiry, read at every check (a test moves time forward by writing it, instead of sleeping).
        hold_step: one worker step held until the worker is killed (:class:`HoldStep`).
        kill_after_payloads: the daemon kills itself (SIGKILL) after writing this many sync payloads: a crash
            between the writes of a push.
        unreadable_folders_file: path of a file listing folders (one absolute path a line) that watched-folder scans
            treat as unreadable (``EACCES``), read at every scan: root ignores ``chmod``, so CI cannot make one.
        watcher_error: every watched folder's file watcher fails to start with this message (``ENOSPC``, as when
            the inotify watch limit is reached), so watches fall back to periodic scans.
    """

    step_delay_seconds: dict[str, float] = {}
    cut_after_batches: int | None = None
    model_manifest: str | None = None
    clock_offset_file: str | None = None
    hold_step: HoldStep | None = None
    kill_after_payloads: int | None = None
    unreadable_folders_file: str | None = None
    watcher_error: str | None = None


def load_hooks() -> TestHooks | None:
    """The hooks from the environment, or ``None`` when the variable is unset or empty.

    Raises:
        msgspec.ValidationError / msgspec.DecodeError: the variable is set but malformed (the daemon refuses to
            start rather than run with half-understood hooks).
    """
    raw = os.environ.get(HOOKS_ENV)
    if not raw:
        return None
    return msgspec.json.decode(raw, type=TestHooks)


def grant_clock(hooks: TestHooks | None) -> Callable[[], float]:
    """The clock grant expiry is judged by: ``time.time``, shifted by ``clock_offset_file`` under test hooks."""
    if hooks is None or hooks.clock_offset_file is None:
        return time.time
    path = hooks.clock_offset_file

    def shifted() -> float:
        try:
            with open(path) as handle:
                offset = float(handle.read().strip() or 0)
        except (OSError, ValueError):
            offset = 0.0
        return time.time() + offset

    return shifted


def unreadable_folders(hooks: TestHooks | None) -> Callable[[str], bool]:
    """Whether a watched folder is to be treated as unreadable: never, except under ``unreadable_folders_file``."""
    if hooks is None or hooks.unreadable_folders_file is None:
        return lambda folder: False
    path = hooks.unreadable_folders_file

    def listed(folder: str) -> bool:
        try:
            with open(path, encoding="utf-8") as handle:
                return folder in {line.strip() for line in handle}
        except OSError:
            return False

    return listed

"""The supervisor's side of the worker processes: spawn, route replies by request id, detect crashes, restart.

Each :class:`WorkerHandle` keeps one child process (``python -m workers.<name> IN_FD OUT_FD``) alive for the life
of the daemon. Calls carry a fresh request id; the reply (or failure) is matched by id. A reply whose id is no
longer pending — its job was cancelled, timed out or locked away — is dropped here and counted, so it can never
reach a client. When the process dies every pending call fails with ``worker_crashed`` and the process is
restarted after a backoff (0.1 s doubling to 5 s, reset after 30 s of healthy running).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import msgspec
import trio

from memories import protocol as p
from memories.errors import MemoriesError
from memories.framing import MAX_WORKER_FRAME, FrameStream

log = logging.getLogger("memories.workers")

ProgressCallback = Callable[[p.WorkerProgress], None]

_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_HEALTHY_AFTER = 30.0


class _Pending:
    def __init__(self, kind: str, on_progress: ProgressCallback | None) -> None:
        self.kind = kind
        self.done = trio.Event()
        self.on_progress = on_progress
        self.outcome: p.WorkerResult | p.WorkerFailure | MemoriesError | None = None


class WorkerHandle:
    """One long-lived worker process.

    Args:
        name: ``index``, ``embedding`` or ``remote`` (the module is ``workers.<name>``).
        env: the child's full environment.
        log_file: an open file the child's stdout and stderr go to.
        on_drop: called for every reply that arrives for a request nobody waits for any more.
        cwd: the child's working folder (the home).
    """

    def __init__(self, name: str, env: dict[str, str], log_file: Any, on_drop: Callable[[], None], cwd: str) -> None:
        self.name = name
        self._cwd = cwd
        self.pid: int | None = None
        self.state = "starting"
        self.restarts = 0
        self.completed: dict[str, int] = {}
        self._env = env
        self._log_file = log_file
        self._on_drop = on_drop
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._frames: FrameStream | None = None
        self._up = trio.Event()
        self._send_lock = trio.Lock()
        self._process: trio.Process | None = None
        self._stopping = False
        self._encoder = msgspec.msgpack.Encoder()

    def info(self) -> p.WorkerInfo:
        return p.WorkerInfo(
            name=self.name, pid=self.pid, state=self.state, restarts=self.restarts, completed=dict(self.completed)
        )

    async def supervise(self) -> None:
        """Run the process, restarting it whenever it exits, until :meth:`stop`."""
        backoff = _BACKOFF_FIRST
        while not self._stopping:
            started = trio.current_time()
            reason = await self._run_once()
            self._fail_pending(reason)
            if self._stopping:
                break
            if trio.current_time() - started > _HEALTHY_AFTER:
                backoff = _BACKOFF_FIRST
            self.restarts += 1
            self.state = "restarting"
            log.warning("worker %s %s; restarting in %.1f s", self.name, reason, backoff)
            await trio.sleep(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)
        self.state = "stopped"

    async def call(self, body: p.WorkerRequest, on_progress: ProgressCallback | None = None) -> p.WorkerReplyBody:
        """Send one request and wait for its reply.

        Cancelling the caller (job cancel, budget, lock) abandons the request: the worker is told to stop it at its
        next check, and its late reply is dropped.

        Raises:
            MemoriesError: the worker's failure code, or ``worker_crashed`` when the process died meanwhile.
        """
        while self._frames is None:
            await self._up.wait()
        frames = self._frames
        request_id = next(self._ids)
        pending = _Pending(type(body).__name__, on_progress)
        self._pending[request_id] = pending
        try:
            await self._send(frames, p.WorkerCall(id=request_id, body=body))
            await pending.done.wait()
        finally:
            if self._pending.pop(request_id, None) is not None and self._frames is frames:
                # Best effort: a worker that died meanwhile (lock kills it) needs no notice, and an error here
                # must not replace the cancellation that brought us here.
                with trio.CancelScope(shield=True), contextlib.suppress(MemoriesError):
                    await self._send(frames, p.WorkerCancel(id=request_id))
        outcome = pending.outcome
        if isinstance(outcome, MemoriesError):
            raise outcome
        if isinstance(outcome, p.WorkerFailure):
            raise MemoriesError(outcome.code, outcome.message, dict(outcome.details))
        assert isinstance(outcome, p.WorkerResult)
        return outcome.body

    async def _send(self, frames: FrameStream, message: p.WorkerInbound) -> None:
        """Write one whole frame. Shielded: a frame cut by a cancellation would leave the worker waiting for the
        rest of it forever (its reader thread always drains the pipe, so the write completes). A dead worker's
        pipe is ``worker_crashed``.

        Raises:
            MemoriesError: ``worker_crashed``.
        """
        payload = self._encoder.encode(message)
        with trio.CancelScope(shield=True):
            try:
                async with self._send_lock:
                    await frames.send(payload)
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                raise MemoriesError("worker_crashed", f"the {self.name} worker closed its pipe") from None

    def kill(self) -> None:
        """SIGKILL the current process; :meth:`supervise` starts a fresh one (used by lock: plaintext goes away)."""
        if self._process is not None and self._process.returncode is None:
            self._process.kill()

    def stop(self) -> None:
        """Kill the process for good (daemon shutdown)."""
        self._stopping = True
        self.kill()

    async def _run_once(self) -> str:
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                # -P: never import from the working folder; cwd: the home, not wherever the daemon started
                [sys.executable, "-P", "-m", f"workers.{self.name}", str(in_read), str(out_write)],
                pass_fds=(in_read, out_write),
                stdin=subprocess.DEVNULL,
                stdout=self._log_file,
                stderr=self._log_file,
                env=self._env,
                cwd=self._cwd,
            )
        finally:
            os.close(in_read)
            os.close(out_write)
        self._process = process
        self.pid = process.pid
        frames = FrameStream(trio.lowlevel.FdStream(out_read), trio.lowlevel.FdStream(in_write), MAX_WORKER_FRAME)
        decoder = msgspec.msgpack.Decoder(p.WorkerOutbound)
        reason = "closed its pipe"
        try:
            while (frame := await frames.receive()) is not None:
                message = decoder.decode(frame)
                if isinstance(message, p.WorkerHello):
                    self._frames = frames
                    self.state = "ready"
                    self._up.set()
                elif isinstance(message, p.WorkerProgress):
                    pending = self._pending.get(message.id)
                    if pending is not None and pending.on_progress is not None:
                        pending.on_progress(message)
                else:
                    self._deliver(message)
        except (MemoriesError, msgspec.DecodeError, trio.BrokenResourceError) as exc:
            reason = f"sent a bad frame ({exc})"
            process.kill()
        finally:
            self._frames = None
            self._up = trio.Event()
            self.state = "restarting"
            if process.returncode is None:
                process.kill()  # we stop reading it (daemon shutdown, a bad frame): it must not linger
            with trio.CancelScope(shield=True):
                code = await process.wait()
                await frames.aclose()
        self._process = None
        if code < 0:
            return f"was killed by signal {-code}"
        return f"exited with status {code}" if code else reason

    def _deliver(self, message: p.WorkerResult | p.WorkerFailure) -> None:
        pending = self._pending.pop(message.id, None)
        if pending is None:
            log.info("dropped a late reply from %s for request %s", self.name, message.id)
            self._on_drop()
            return
        self.completed[pending.kind] = self.completed.get(pending.kind, 0) + 1
        pending.outcome = message
        pending.done.set()

    def _fail_pending(self, reason: str) -> None:
        for pending in self._pending.values():
            pending.outcome = MemoriesError("worker_crashed", f"the {self.name} worker {reason}")
            pending.done.set()
        self._pending.clear()

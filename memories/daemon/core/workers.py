"""The supervisor's side of the worker processes: spawn, route replies by request id, detect crashes, restart.

Each :class:`WorkerHandle` keeps one worker alive for the life of the daemon; :func:`process_spawner` starts it as
a child process (``python -m workers.<name> IN_FD OUT_FD``), and the tests swap in an in-process fake worker
through the same seam. The worker's first frame is its :class:`~memories.worker_protocol.WorkerHello`: a worker
of another install (another worker protocol or package version) is refused with a log line, and every call to it
fails with ``restart_needed`` until the daemon is restarted. Calls carry a fresh request id; the reply (or
failure) is matched by id and checked against the reply types the request declares. A reply whose id is no longer
pending — its job was cancelled, timed out or locked away — is dropped here and counted, so it can never reach a
client. When the process dies every pending call fails with ``worker_crashed`` and the process is restarted after
a backoff (0.1 s doubling to 5 s, reset after 30 s of healthy running).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

import msgspec
import trio

from memories import protocol as p
from memories import worker_protocol as w
from memories.errors import MemoriesError
from memories.framing import MAX_WORKER_FRAME, FrameStream

log = logging.getLogger("memories.workers")

R = TypeVar("R")

ProgressCallback = Callable[[w.WorkerProgress], None]

_BACKOFF_FIRST = 0.1
_BACKOFF_MAX = 5.0
_HEALTHY_AFTER = 30.0


class Spawned(Protocol):
    """A started worker as :class:`WorkerHandle` drives it: its frames, and a way to kill it and wait for it."""

    pid: int | None
    frames: FrameStream

    def kill(self) -> None:
        """Kill the worker now (a no-op once it has exited)."""

    async def wait(self) -> int:
        """Wait for the worker to end; its exit status (negative: the signal that killed it)."""


Spawn = Callable[[str], Awaitable[Spawned]]
"""Start the worker of the given name."""


class _Process:
    """A worker child process and the daemon's ends of its two pipes."""

    def __init__(self, process: trio.Process, frames: FrameStream) -> None:
        self._process = process
        self.pid: int | None = process.pid
        self.frames = frames

    def kill(self) -> None:
        if self._process.returncode is None:
            self._process.kill()

    async def wait(self) -> int:
        return await self._process.wait()


def process_spawner(environments: dict[str, dict[str, str]], log_file: Any, cwd: str) -> Spawn:
    """Start workers as ``python -P -m workers.<name> IN_FD OUT_FD`` with only their two pipe ends inherited.

    Args:
        environments: worker name -> the child's full environment.
        log_file: an open file the child's stdout and stderr go to.
        cwd: the child's working folder (the home).
    """

    async def spawn(name: str) -> Spawned:
        in_read, in_write = os.pipe()
        out_read, out_write = os.pipe()
        try:
            process = await trio.lowlevel.open_process(
                # -P: never import from the working folder; cwd: the home, not wherever the daemon started
                [sys.executable, "-P", "-m", f"workers.{name}", str(in_read), str(out_write)],
                pass_fds=(in_read, out_write),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
                env=environments[name],
                cwd=cwd,
            )
        except BaseException:
            os.close(out_read)
            os.close(in_write)
            raise
        finally:
            os.close(in_read)
            os.close(out_write)
        frames = FrameStream(trio.lowlevel.FdStream(out_read), trio.lowlevel.FdStream(in_write), MAX_WORKER_FRAME)
        return _Process(process, frames)

    return spawn


class _Pending:
    def __init__(self, kind: str, on_progress: ProgressCallback | None) -> None:
        self.kind = kind
        self.done = trio.Event()
        self.on_progress = on_progress
        self.outcome: w.WorkerResult | w.WorkerFailure | MemoriesError | None = None


class WorkerHandle:
    """One long-lived worker.

    Args:
        name: ``index``, ``embedding`` or ``remote`` (the module is ``workers.<name>``).
        spawn: starts the worker (:func:`process_spawner`, or a fake in tests).
        on_drop: called for every reply that arrives for a request nobody waits for any more.
    """

    def __init__(self, name: str, spawn: Spawn, on_drop: Callable[[], None]) -> None:
        self.name = name
        self.pid: int | None = None
        self.state = "starting"
        self.restarts = 0
        self.dumpable: bool | None = None  # as the current process reported in its hello
        self.completed: dict[str, int] = {}
        self.refusal: str | None = None
        """Why the worker was refused (it comes from another install), or ``None``."""
        self.holds_vault_text = False
        """Vault text was handed to this worker since it last restarted on lock (:meth:`handed_vault_text`)."""
        self.lock_restarts = 0
        """Times lock restarted this worker (a model download it cut resumes, :meth:`Models.install`)."""
        self.generation = 0
        """Worker processes of this handle that said hello so far: what one process loaded (the embedding model)
        is known loaded while the generation is the same (:class:`~memories.daemon.index.models.Models`)."""
        self.on_ready: Callable[[], None] = lambda: None
        """Called each time a worker process has said hello and is ready for calls (first start, and every restart
        after a crash or a lock); it must not block (start a task)."""
        self._spawn = spawn
        self._on_drop = on_drop
        self._ids = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._frames: FrameStream | None = None
        self._up = trio.Event()
        self._send_lock = trio.Lock()
        self._worker: Spawned | None = None
        self._stopping = False
        self._encoder = msgspec.msgpack.Encoder()

    def handed_vault_text(self) -> None:
        """Called before vault text goes to this worker: from then on lock restarts it (R-44)."""
        self.holds_vault_text = True

    def info(self) -> p.WorkerInfo:
        return p.WorkerInfo(
            name=self.name,
            pid=self.pid,
            state=self.state,
            restarts=self.restarts,
            completed=dict(self.completed),
            dumpable=self.dumpable,
        )

    async def supervise(self) -> None:
        """Run the worker, restarting it whenever it exits, until :meth:`stop` or a refusal."""
        backoff = _BACKOFF_FIRST
        while not self._stopping:
            started = trio.current_time()
            reason = await self._run_once()
            if self.refusal is not None:
                self._fail_pending(self._refused())
                return
            self._fail_pending(MemoriesError("worker_crashed", f"the {self.name} worker {reason}"))
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

    async def ready(self) -> int:
        """Wait until a worker process is up; its :attr:`generation` (a :meth:`call` made right after, with no
        await between, goes to that process).

        Raises:
            MemoriesError: ``restart_needed`` when the worker was refused.
        """
        while self._frames is None:
            if self.refusal is not None:
                raise self._refused()
            await self._up.wait()
        return self.generation

    async def call(self, body: w.WorkerRequest[R], on_progress: ProgressCallback | None = None) -> R:
        """Send one request and wait for its reply, which is checked against ``body``'s declared reply types.

        Cancelling the caller (job cancel, budget, lock) abandons the request: the worker is told to stop it at its
        next check, and its late reply is dropped.

        Raises:
            MemoriesError: the worker's failure code; ``worker_crashed`` when the process died meanwhile;
                ``restart_needed`` when the worker was refused; ``protocol_error`` for a reply of another type.
        """
        await self.ready()
        frames = self._frames
        assert frames is not None  # ready() returned with a worker up, and nothing awaited since
        request_id = next(self._ids)
        kind = type(body).__name__
        pending = _Pending(kind, on_progress)
        self._pending[request_id] = pending
        try:
            await self._send(frames, w.WorkerCall(id=request_id, body=cast(w.WorkerRequestBody, body)))
            await pending.done.wait()
        finally:
            if self._pending.pop(request_id, None) is not None and self._frames is frames:
                # Best effort: a worker that died meanwhile (lock kills it) needs no notice, and an error here
                # must not replace the cancellation that brought us here.
                with trio.CancelScope(shield=True), contextlib.suppress(MemoriesError):
                    await self._send(frames, w.WorkerCancel(id=request_id))
        outcome = pending.outcome
        if isinstance(outcome, MemoriesError):
            raise outcome
        if isinstance(outcome, w.WorkerFailure):
            raise MemoriesError(outcome.code, outcome.message, dict(outcome.details))
        assert outcome is not None  # set before ``done``
        if not isinstance(outcome.body, body.reply_types):
            expected = " or ".join(t.__name__ for t in body.reply_types)
            raise MemoriesError(
                "protocol_error",
                f"the {self.name} worker answered {kind} with {type(outcome.body).__name__}, not {expected}",
            )
        return cast(R, outcome.body)

    async def _send(self, frames: FrameStream, message: w.WorkerInbound) -> None:
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
        """Kill the current worker; :meth:`supervise` starts a fresh one (used by lock: plaintext goes away)."""
        if self._worker is not None:
            self._worker.kill()

    def stop(self) -> None:
        """Kill the worker for good (daemon shutdown)."""
        self._stopping = True
        self.kill()

    async def _run_once(self) -> str:
        worker = await self._spawn(self.name)
        self._worker = worker
        self.pid = worker.pid
        self.dumpable = None  # until this process says hello
        frames = worker.frames
        decoder = msgspec.msgpack.Decoder(w.WorkerOutbound)
        reason = "closed its pipe"
        try:
            hello = await frames.receive()
            if hello is not None:
                self.refusal = _refusal(hello)
                if self.refusal is not None:
                    log.error("refused the %s worker: %s; restart the daemon", self.name, self.refusal)
                    return "was refused"
                self.dumpable = msgspec.msgpack.decode(hello, type=w.WorkerHello).dumpable
                self._frames = frames
                self.generation += 1
                self.state = "ready"
                self._up.set()
                self.on_ready()
            while hello is not None and (frame := await frames.receive()) is not None:
                message = decoder.decode(frame)
                if isinstance(message, w.WorkerProgress):
                    pending = self._pending.get(message.id)
                    if pending is not None and pending.on_progress is not None:
                        pending.on_progress(message)
                else:
                    self._deliver(message)
        except (MemoriesError, msgspec.DecodeError, trio.BrokenResourceError) as exc:
            reason = f"sent a bad frame ({exc})"
        finally:
            self._frames = None
            self._up.set()  # wake callers still waiting for this worker: they wait for the next one, or fail
            self._up = trio.Event()
            self.state = "refused" if self.refusal is not None else "restarting"
            worker.kill()  # we stop reading it (a refusal, daemon shutdown, a bad frame): it must not linger
            with trio.CancelScope(shield=True):
                code = await worker.wait()
                await frames.aclose()
        self._worker = None
        if code < 0:
            return f"was killed by signal {-code}"
        return f"exited with status {code}" if code else reason

    def _deliver(self, message: w.WorkerResult | w.WorkerFailure) -> None:
        pending = self._pending.pop(message.id, None)
        if pending is None:
            log.info("dropped a late reply from %s for request %s", self.name, message.id)
            self._on_drop()
            return
        self.completed[pending.kind] = self.completed.get(pending.kind, 0) + 1
        pending.outcome = message
        pending.done.set()

    def _fail_pending(self, error: MemoriesError) -> None:
        for pending in self._pending.values():
            pending.outcome = error
            pending.done.set()
        self._pending.clear()

    def _refused(self) -> MemoriesError:
        return MemoriesError(
            "restart_needed", f"the {self.name} worker comes from another install ({self.refusal}); restart the daemon"
        )


def _refusal(frame: bytes) -> str | None:
    """Why a worker's first frame not a hello of this install, or ``None`` when it is.

    Read leniently (a plain map), so a worker of another version, whatever its messages look like, is named in the
    log instead of failing to decode.
    """
    try:
        hello = msgspec.msgpack.decode(frame)
    except msgspec.DecodeError:
        return "its first frame is not MessagePack"
    if not isinstance(hello, dict) or hello.get(p.TAG_FIELD) != "WorkerHello":
        return "its first frame is not a hello"
    protocol, install = hello.get("protocol"), hello.get("install")
    if protocol != w.WORKER_PROTOCOL_VERSION or install != w.INSTALL:
        return (
            f"it speaks worker protocol {protocol} of version {install}, "
            f"the daemon protocol {w.WORKER_PROTOCOL_VERSION} of version {w.INSTALL}"
        )
    return None


WORKER_NAMES = ("index", "embedding", "remote")
"""The daemon's workers, one process each (``workers.<name>``)."""


class WorkerSet:
    """The daemon's three workers. ``dropped`` counts late replies nobody waited for (``dropped_replies`` of
    ``daemon status``).

    Args:
        spawn: starts each worker (:func:`process_spawner`, or a fake in tests).
    """

    PLAINTEXT = ("index", "embedding")
    """Workers that are always handed record text, and restarted on lock. ``remote`` joins them once it has been
    handed vault text (remote embedding, rerank, generation: :meth:`WorkerHandle.handed_vault_text`)."""

    def __init__(self, spawn: Spawn) -> None:
        self.dropped = 0
        self.index = WorkerHandle("index", spawn, self._drop)
        self.embedding = WorkerHandle("embedding", spawn, self._drop)
        self.remote = WorkerHandle("remote", spawn, self._drop)

    def all(self) -> list[WorkerHandle]:
        return [self.index, self.embedding, self.remote]

    def kill_plaintext(self) -> None:
        """Restart the workers that saw plaintext (lock: Python cannot wipe their memory, so the process goes)."""
        for worker in self.all():
            if worker.name in self.PLAINTEXT or worker.holds_vault_text:
                worker.holds_vault_text = False
                worker.lock_restarts += 1
                worker.kill()

    def refusals(self) -> list[str]:
        """One note per worker refused as coming from another install."""
        return [
            f"the {worker.name} worker comes from another install ({worker.refusal}); restart the daemon"
            for worker in self.all()
            if worker.refusal is not None
        ]

    def _drop(self) -> None:
        self.dropped += 1

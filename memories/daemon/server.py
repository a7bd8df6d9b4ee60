"""The client socket: accept connections, decode one :class:`~memories.protocol.Envelope`, stream the answer.

A connection is served only if its peer runs as the daemon's own user (``SO_PEERCRED``, as the client checks the
daemon's): the socket's mode already keeps other users out, and this holds even if it did not. A connection must
send its complete request within :data:`FIRST_REQUEST_SECONDS` of connecting, or it is closed; beyond
:data:`MAX_CONNECTIONS` open at once a new one is answered ``daemon_busy``. Neither cuts a request in progress: a
long search or index build has no deadline here once its request has arrived (its job has a budget).

Each connection carries one request. While its job runs, progress events go out as they happen (a bounded queue;
progress is lossy, the reply is not), a :class:`~memories.protocol.Heartbeat` goes out every
:data:`~memories.protocol.HEARTBEAT_SECONDS` (so the client can tell a long job from a stopped daemon), and a
client that hangs up cancels its foreground job. Every reply and failure carries the daemon's current warnings
(such as "restart needed", R-09).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path

import msgspec
import trio

from memories import protocol as p
from memories.daemon.core.context import RequestContext
from memories.daemon.core.jobs import Job
from memories.errors import MemoriesError
from memories.framing import MAX_CLIENT_FRAME, FrameStream
from memories.logs import log_failure

log = logging.getLogger("memories.server")

_PROGRESS_QUEUE = 64

FIRST_REQUEST_SECONDS = 30.0
"""A connection that has not sent a complete request this long after connecting is closed: an idle or trickling
client must not hold a connection (and a file descriptor) forever."""

MAX_CONNECTIONS = 100
"""Connections served at once; one more is answered ``daemon_busy`` and closed (the CLI and MCP clients use one per
request and close it)."""

BACKLOG = 1024
"""Connections the kernel queues before the daemon accepts them (``listen``; Linux caps it at
``net.core.somaxconn``, 4096 by default). With 64, a burst of 300 parallel MCP calls filled it and the clients'
connects failed with ``EAGAIN`` (issue 29); a client still meeting a full queue retries, then says ``daemon_busy``."""

_PEER_CREDENTIALS = struct.Struct("3i")  # struct ucred: pid, uid, gid (Linux)


class Answering:
    """The connections whose client waits for a job's answer. A stopping daemon cancels their jobs and waits here
    until those answers (``cancelled: the daemon is stopping``) are out: cancelling the connections together with
    the daemon would cut them off without a word."""

    def __init__(self) -> None:
        self._connections: set[Connection] = set()
        self._changed = trio.Event()

    def add(self, conn: Connection) -> None:
        self._connections.add(conn)

    def discard(self, conn: Connection) -> None:
        if conn in self._connections:
            self._connections.discard(conn)
            self._changed.set()
            self._changed = trio.Event()

    async def wait_answered(self) -> None:
        """Wait until every connection with a job has sent its last frame."""
        while self._connections:
            await self._changed.wait()


class Connection:
    """One client connection: the jobs it started and a way to stream their progress."""

    def __init__(self, frames: FrameStream, answering: Answering) -> None:
        self._answering = answering
        self._frames = frames
        self._encoder = msgspec.msgpack.Encoder()
        self._send_progress, self._progress = trio.open_memory_channel[p.Progress](_PROGRESS_QUEUE)
        self._send_lock = trio.Lock()  # progress, heartbeats and the reply come from different tasks
        self.jobs: list[Job] = []
        self.context = RequestContext(self.attach)
        """What the request's handler gets: its warnings go into the reply, its jobs are attached here."""

    def attach(self, job: Job) -> None:
        """Stream ``job``'s progress to this client and cancel it if the client hangs up."""
        self._answering.add(self)
        self.jobs.append(job)
        job.listeners.append(self._queue_progress)

    def cancel_jobs(self) -> None:
        """The client hung up: its foreground jobs have nobody to answer."""
        for job in self.jobs:
            job.cancel("cancelled")

    def _queue_progress(self, event: p.Progress) -> None:
        with contextlib.suppress(trio.WouldBlock):  # a slow reader misses events, never the reply
            self._send_progress.send_nowait(event)

    async def send(self, frame: p.ServerFrame) -> None:
        """Write one whole frame; shielded, so a cancellation never leaves half a progress event before the reply."""
        payload = self._encoder.encode(frame)
        with trio.CancelScope(shield=True):
            async with self._send_lock:
                await self._frames.send(payload)

    async def beat(self) -> None:
        """Send a heartbeat every :data:`~memories.protocol.HEARTBEAT_SECONDS` until cancelled."""
        heartbeat = p.Heartbeat()
        while True:
            await trio.sleep(p.HEARTBEAT_SECONDS)
            await self.send(heartbeat)

    async def pump_progress(self) -> None:
        async for event in self._progress:
            await self.send(event)

    async def flush_progress(self) -> None:
        while True:
            try:
                event = self._progress.receive_nowait()
            except trio.WouldBlock:
                return
            await self.send(event)

    async def watch_hangup(self, on_hangup: Callable[[], None]) -> None:
        """Wait for the client to close its end; then call ``on_hangup``."""
        with contextlib.suppress(MemoriesError, trio.BrokenResourceError, OSError):
            await self._frames.receive()
        on_hangup()


Handler = Callable[[p.Envelope, Connection], Awaitable[p.Result]]


async def serve_socket(
    path: Path,
    handle: Handler,
    warnings: Callable[[], list[str]],
    answering: Answering | None = None,
    owner_uid: int | None = None,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Listen on the unix socket ``path`` (mode 0600 inside an owner-only folder) and serve forever.

    ``answering`` (a fresh one when not given) tracks the connections waiting for a job's answer. ``owner_uid``
    (default: this process's user) is the only user whose connections are served.

    Raises:
        MemoriesError: ``daemon_start_failed`` when something other than an old socket occupies ``path``.
    """
    answering = answering or Answering()
    _clear_socket_path(path)
    sock = trio.socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # The folder is owner-only and the process umask (0o077, memories.hardening) is never changed around the
    # bind: the umask is process-wide, and workers spawned meanwhile would inherit a narrower one.
    await sock.bind(os.fspath(path))
    os.chmod(path, 0o600)
    sock.listen(BACKLOG)
    listener = trio.SocketListener(sock)
    owner = os.getuid() if owner_uid is None else owner_uid
    task_status.started()
    open_connections = 0

    async def serve_one(stream: trio.SocketStream) -> None:
        nonlocal open_connections
        if not _peer_is(stream, owner):
            await stream.aclose()
            return
        if open_connections >= MAX_CONNECTIONS:
            await _refuse_busy(stream)
            return
        open_connections += 1
        try:
            await _serve_one(stream, handle, warnings, answering)
        finally:
            open_connections -= 1

    try:
        await trio.serve_listeners(serve_one, [listener])
    finally:
        path.unlink(missing_ok=True)


def _peer_is(stream: trio.SocketStream, uid: int) -> bool:
    """Whether the process at the other end of ``stream`` runs as ``uid`` (``SO_PEERCRED``; where the platform has
    no such option the socket's mode is the only check). A refusal is logged with the peer's pid and uid."""
    if not hasattr(socket, "SO_PEERCRED"):
        return True
    raw = stream.socket.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _PEER_CREDENTIALS.size)
    pid, peer_uid, _ = _PEER_CREDENTIALS.unpack(raw)
    if peer_uid == uid:
        return True
    log.warning("refused a connection from process %d of another user (uid %d)", pid, peer_uid)
    return False


async def _refuse_busy(stream: trio.SocketStream) -> None:
    """Answer ``daemon_busy`` without reading the request (one small frame: it fits the socket's buffer), close."""
    failure = p.Failure(
        code="daemon_busy",
        message=f"the daemon is running but busy (serving {MAX_CONNECTIONS} connections at once); this is "
        "temporary: try again in a moment",
    )
    with trio.move_on_after(1), contextlib.suppress(*_HANGUP, OSError):
        await FrameStream(stream, stream, MAX_CLIENT_FRAME).send(msgspec.msgpack.encode(failure))
    await stream.aclose()


def _clear_socket_path(path: Path) -> None:
    """Remove what a dead daemon left at the socket path (the running daemon holds the home's lock, so nobody
    listens there); refuse anything that is not a socket or a link, naming it.

    Raises:
        MemoriesError: ``daemon_start_failed`` when a folder or a file occupies the path.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not (stat.S_ISSOCK(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        what = "a folder" if stat.S_ISDIR(info.st_mode) else "a file that is not a socket"
        raise MemoriesError(
            "daemon_start_failed",
            f"{path} is {what}, where the daemon's socket belongs; move it away and start the daemon again",
            {"path": str(path)},
        )
    path.unlink()


async def _serve_one(
    stream: trio.SocketStream, handle: Handler, warnings: Callable[[], list[str]], answering: Answering
) -> None:
    frames = FrameStream(stream, stream, MAX_CLIENT_FRAME)
    conn = Connection(frames, answering)
    try:
        try:
            raw: bytes | None = None
            with trio.move_on_after(FIRST_REQUEST_SECONDS) as first:
                raw = await frames.receive()
            if first.cancelled_caught:  # no whole request in time: closed without a word (no client does this)
                log.info("a connection sent no complete request within %g s; closed it", FIRST_REQUEST_SECONDS)
                return
            if raw is None:
                return
            envelope = _decode(raw)
            outcome: p.Result | MemoriesError
            async with trio.open_nursery() as nursery:
                nursery.start_soon(conn.pump_progress)
                nursery.start_soon(conn.beat)
                nursery.start_soon(conn.watch_hangup, conn.cancel_jobs)
                try:
                    outcome = await handle(envelope, conn)
                except MemoriesError as exc:
                    outcome = exc  # raised below, outside the nursery (which would wrap it in a group)
                finally:
                    nursery.cancel_scope.cancel()
            if isinstance(outcome, MemoriesError):
                raise outcome
            await conn.flush_progress()
            await conn.send(p.Reply(result=outcome, warnings=warnings() + conn.context.warnings))
        except MemoriesError as exc:
            notes = warnings() + conn.context.warnings
            await conn.send(p.Failure(code=exc.code, message=exc.message, details=exc.details, warnings=notes))
        except Exception as exc:
            if _hung_up(exc):
                log.debug("the client hung up before its answer; its jobs are cancelled")
                return
            log_failure(log, "a request failed", exc)
            await conn.send(p.Failure(code="internal_error", message="the daemon failed; see its log"))
    except (*_HANGUP, OSError):
        pass  # the client went away before its answer
    except Exception as exc:  # last resort: one connection's trouble must never reach the daemon's nursery
        log_failure(log, "answering a request failed", exc)
    finally:
        answering.discard(conn)
        await stream.aclose()


_HANGUP = (trio.BrokenResourceError, trio.ClosedResourceError)
"""What writing to a client that closed its end raises (a heartbeat or a progress frame sent after it left);
trio's socket stream turns the ``EPIPE``/``ECONNRESET`` ``OSError`` into ``BrokenResourceError``."""


def _hung_up(exc: BaseException) -> bool:
    """Whether ``exc`` is only the client having gone away: one of :data:`_HANGUP`, or a group of nothing else
    (the request's nursery wraps its tasks' errors)."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_hung_up(inner) for inner in exc.exceptions)
    return isinstance(exc, _HANGUP)


_OUT_OF_BOUNDS = re.compile(r"^(?P<rule>Expected `\w+` (?:of length )?[<>]=? ?\S+) - at `\$\.request\.(?P<field>.+)`$")
"""msgspec's words for a request field whose value has the right type but breaks the field's ``Meta`` bounds
(``Expected `str` of length >= 1 - at `$.request.tags[0]```): an empty ``--tag`` or a metadata value over 1,024
code points is ``invalid_argument`` naming the field, as the daemon's own checks are, not ``protocol_error``, which
says the client and the daemon disagree on the wire format (a value of the wrong type, a missing field)."""


def _decode(raw: bytes) -> p.Envelope:
    try:
        return msgspec.msgpack.decode(raw, type=p.Envelope)
    except msgspec.ValidationError as exc:
        version = _peek_version(raw)
        if version is not None and version != p.PROTOCOL_VERSION:
            raise MemoriesError(
                "protocol_mismatch",
                f"the client speaks protocol {version}, the daemon {p.PROTOCOL_VERSION}; restart the daemon",
            ) from None
        bound = _OUT_OF_BOUNDS.match(str(exc))
        if bound is not None:  # a value of the right type beyond a field's bounds: the argument's fault
            raise MemoriesError("invalid_argument", f"{bound['field']}: {bound['rule']}") from None
        raise MemoriesError("protocol_error", f"bad request: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MemoriesError("protocol_error", f"bad request: {exc}") from None


def _peek_version(raw: bytes) -> int | None:
    try:
        return msgspec.msgpack.decode(raw, type=dict).get("protocol")
    except msgspec.DecodeError:
        return None

"""The loop every worker process runs: typed frames on dedicated pipes, one request at a time (or, for
``workers.remote``, up to ``threads`` at once: its requests wait on the network, not the CPU).

A worker is started by the supervisor as ``python -m workers.<name> IN_FD OUT_FD``: it reads
:class:`~memories.worker_protocol.WorkerInbound` frames from ``IN_FD`` and writes
:class:`~memories.worker_protocol.WorkerOutbound` frames to ``OUT_FD`` (never stdout, where a stray print from a library
would corrupt the stream; stdout and stderr go to the daemon log).

A reader thread owns ``IN_FD``: calls go to a queue, :class:`~memories.worker_protocol.WorkerCancel` marks a request as
cancelled for the handler's next :meth:`Context.check_cancelled`, and end of stream — the supervisor is gone, for
whatever reason, even while a handler is busy — ends the process at once with ``os._exit``. (Linux's
``PR_SET_PDEATHSIG`` is not used: it fires when the parent *thread* exits, and trio starts children from a
short-lived worker thread.) A write that finds the supervisor gone (a daemon killed while this worker was still
starting) logs one line and exits too.

:func:`run_worker` first turns core dumps off (:mod:`memories.hardening`): the flag does not survive ``execve``.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from memories import worker_protocol as w
from memories.errors import MemoriesError
from memories.framing import read_frame_fd, write_frame_fd
from memories.hardening import dumpable, harden_process
from memories.logs import configure_worker_logging, log_failure
from memories.testing import HoldStep, load_hooks

Handler = Callable[[Any, "Context"], Any]


class Context:
    """What a handler may do besides returning: report progress and notice cancellation."""

    def __init__(self, worker: _Worker, request_id: int) -> None:
        self._worker = worker
        self.request_id = request_id

    def progress(self, done: int, total: int | None, unit: str, note: str | None = None) -> None:
        """Send a progress event for this request; ``note`` says what is happening besides (a retry)."""
        self._worker.send(w.WorkerProgress(id=self.request_id, done=done, total=total, unit=unit, note=note))

    def cancelled(self) -> bool:
        return self.request_id in self._worker.cancelled

    def check_cancelled(self) -> None:
        """Raises ``MemoriesError("cancelled")`` once the supervisor cancelled this request."""
        if self.cancelled():
            raise MemoriesError("cancelled", "the job was cancelled")


class _Worker:
    def __init__(self, name: str, in_fd: int, out_fd: int, handlers: dict[type, Handler]) -> None:
        self.name = name
        self.in_fd = in_fd
        self.out_fd = out_fd
        self.handlers = handlers
        self.calls: queue.SimpleQueue[w.WorkerCall] = queue.SimpleQueue()
        self.pending: set[int] = set()  # ids queued or running: a cancel for any other id is ignored
        self.cancelled: set[int] = set()
        self._write_lock = threading.Lock()
        self._encoder = msgspec.msgpack.Encoder()
        hooks = load_hooks()
        self.delays = hooks.step_delay_seconds if hooks else {}
        self.hold = hooks.hold_step if hooks else None
        self.held_kind_seen = 0  # requests of the hold hook's kind handled so far

    def send(self, message: w.WorkerOutbound | w.WorkerHello) -> None:
        payload = self._encoder.encode(message)
        with self._write_lock:
            try:
                write_frame_fd(self.out_fd, payload)
            except BrokenPipeError:  # the supervisor died (even before our hello): one line, not a traceback
                logging.getLogger(self.name).warning("the daemon closed the pipe; exiting")
                os._exit(0)

    def read_forever(self) -> None:
        decoder = msgspec.msgpack.Decoder(w.WorkerInbound)
        try:
            while (frame := read_frame_fd(self.in_fd)) is not None:
                message = decoder.decode(frame)
                if isinstance(message, w.WorkerCancel):
                    if message.id in self.pending:
                        self.cancelled.add(message.id)
                else:
                    self.pending.add(message.id)
                    self.calls.put(message)
        except Exception as exc:
            log_failure(logging.getLogger(self.name), "reading a request failed", exc)
        os._exit(0)  # the supervisor closed our pipe or died: never outlive it

    def serve(self, threads: int = 1) -> None:
        threading.Thread(target=self.read_forever, name="reader", daemon=True).start()
        self.send(
            w.WorkerHello(name=self.name, protocol=w.WORKER_PROTOCOL_VERSION, install=w.INSTALL, dumpable=dumpable())
        )
        for number in range(1, threads):
            threading.Thread(target=self.handle_forever, name=f"handler-{number}", daemon=True).start()
        self.handle_forever()

    def handle_forever(self) -> None:
        while True:
            call = self.calls.get()
            if call.id in self.cancelled:  # cancelled while it waited in the queue: never started
                reply: w.WorkerOutbound = w.WorkerFailure(id=call.id, code="cancelled", message="cancelled")
            else:
                reply = self._handle(call)
            try:
                self.send(reply)
            except (UnicodeEncodeError, msgspec.EncodeError, OverflowError) as exc:
                # A result that cannot be encoded (a lone surrogate a service sent) must still answer the call:
                # an exception here would end this handler thread for good, and the daemon would wait for the reply
                # until the job's budget ran out.
                log_failure(logging.getLogger(self.name), f"the reply to a {type(call.body).__name__} failed", exc)
                self.send(w.WorkerFailure(id=call.id, code="internal_error", message="the reply could not be encoded"))
            self.pending.discard(call.id)
            self.cancelled.discard(call.id)

    def _handle(self, call: w.WorkerCall) -> w.WorkerOutbound:
        kind = type(call.body).__name__
        delay = self.delays.get(kind)
        if delay:
            time.sleep(delay)  # test hook: a deliberately slow step
        if self.hold is not None and self.hold.kind == kind:
            _hold_if_due(self.hold, self.held_kind_seen)
            self.held_kind_seen += 1
        handler = self.handlers.get(type(call.body))
        try:
            if handler is None:
                raise MemoriesError("protocol_error", f"worker {self.name} does not handle {kind}")
            return w.WorkerResult(id=call.id, body=handler(call.body, Context(self, call.id)))
        except MemoriesError as exc:
            return w.WorkerFailure(id=call.id, code=exc.code, message=exc.message, details=exc.details)
        except Exception as exc:
            log_failure(logging.getLogger(self.name), f"request {call.id} ({kind}) failed", exc)
            return w.WorkerFailure(
                id=call.id, code="internal_error", message=f"{self.name} worker failed: {type(exc).__name__}"
            )


def _hold_if_due(hold: HoldStep, answered: int) -> None:
    """Test hook: hold this step until the process is killed, once ``hold.after`` such steps were answered and
    no worker has held one yet (creating the marker with ``O_EXCL`` claims the hold)."""
    if answered < hold.after:
        return
    try:
        os.close(os.open(hold.marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return
    threading.Event().wait()


def run_worker(name: str, handlers: dict[type, Handler], threads: int = 1) -> None:
    """Entry point of a worker module: parse ``IN_FD OUT_FD`` from ``sys.argv`` and serve until the pipe closes.

    ``threads`` handlers take requests from the queue at once (handlers must then be thread-safe).
    """
    configure_worker_logging(name)
    harden_process()  # before the first request can hand us plaintext
    in_fd, out_fd = int(sys.argv[1]), int(sys.argv[2])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C on `daemon run` is the supervisor's to handle
    _Worker(name, in_fd, out_fd, handlers).serve(threads)

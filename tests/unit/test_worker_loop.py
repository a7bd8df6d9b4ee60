"""The worker loop answers every call: a result that cannot be encoded is answered with a failure, and the
handler thread lives on (a lone surrogate in a service's reply ended the remote worker's threads one by one)."""

from __future__ import annotations

import os
import select
import threading

import msgspec

from memories import worker_protocol as w
from memories.framing import read_frame_fd
from workers.loop import _Worker


def test_a_reply_that_cannot_be_encoded_is_a_failure_and_the_next_call_is_answered() -> None:
    texts = iter(["not text \ud800", "text"])
    worker = _Worker(
        "test",
        in_fd=-1,
        out_fd=(pipe := os.pipe())[1],
        handlers={w.ParseNotes: lambda body, context: w.GeneratedText(text=next(texts), structured_output="none")},
    )
    threading.Thread(target=worker.handle_forever, daemon=True).start()  # it serves until the process ends
    decoder = msgspec.msgpack.Decoder(w.WorkerOutbound)
    body = w.ParseNotes(texts=[])
    replies = []
    for number in (1, 2):
        worker.pending.add(number)
        worker.calls.put(w.WorkerCall(id=number, body=body))
        readable, _, _ = select.select([pipe[0]], [], [], 30)  # fails on a hang only: the reply never came
        assert readable, f"call {number} was never answered"
        replies.append(decoder.decode(read_frame_fd(pipe[0])))
    assert replies == [
        w.WorkerFailure(id=1, code="internal_error", message="the reply could not be encoded"),
        w.WorkerResult(id=2, body=w.GeneratedText(text="text", structured_output="none")),
    ]

"""Issue 21: a daemon killed (``kill -9``) during an ingest left the client with only ``daemon_not_running``; it now
says how many files the job had finished (the progress frames carry the count), which are stored. A socket server
in a thread plays the daemon that dies after two progress frames."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import msgspec
import pytest

from memories import protocol as p
from memories.cli.output import Session
from memories.errors import MemoriesError
from memories.framing import recv_frame, send_frame


def _dying_daemon(socket_path: str, progress: list[p.Progress]) -> threading.Thread:
    os.makedirs(os.path.dirname(socket_path), exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(1)

    def serve() -> None:
        conn, _ = server.accept()
        with conn, server:
            recv_frame(conn)
            for event in progress:
                send_frame(conn, msgspec.msgpack.encode(event))
        # the connection closes without an answer, as when the daemon is killed

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    ("done", "said"),
    [
        (37, "at least 37 of 120 files, and what it finished is kept (an ingest's cards are stored)"),
        (0, "not finished any of 120 files"),
    ],
)
def test_a_daemon_gone_during_an_ingest_says_how_many_files_were_done(tmp_path: Path, done: int, said: str) -> None:
    session = Session(json_mode=True, home=str(tmp_path / "home"), config=None)
    events = [
        p.Progress(job_id=1, done=0, total=120, unit="files"),
        p.Progress(job_id=1, done=done, total=120, unit="files"),
    ]
    thread = _dying_daemon(session.home.socket_path, events)
    with pytest.raises(MemoriesError) as failed:
        session.call(p.RagIngest(vault="notes", paths=[str(tmp_path)]), progress=True)
    thread.join(30)
    assert failed.value.code == "daemon_not_running"
    assert said in failed.value.message and "closed the connection without an answer" in failed.value.message
    assert failed.value.details == {"home": session.home.root, "done": done, "total": 120, "unit": "files"}

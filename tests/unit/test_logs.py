"""One way to log a failure (issue 27, item 3): :func:`memories.logs.log_failure`, by the exception's type only, the
traceback (which may quote note text, through a library's message about its input) only under ``MEMORIES_DEBUG=1``."""

from __future__ import annotations

import ast
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memories.logs import log_failure

PACKAGE = Path(__file__).resolve().parents[2] / "memories"


def test_a_failure_is_logged_by_type_and_the_traceback_only_when_debugging(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = logging.getLogger("memories.test")
    failure = ValueError("the diary entry of 3 May, quoted by a parser")
    monkeypatch.delenv("MEMORIES_DEBUG", raising=False)
    with caplog.at_level(logging.ERROR):
        log_failure(log, "a 100% unexpected step", failure)
    (record,) = caplog.records
    assert record.getMessage() == "a 100% unexpected step: ValueError (set MEMORIES_DEBUG=1 for the traceback)"
    assert record.exc_info is None and "diary" not in caplog.text
    caplog.clear()
    monkeypatch.setenv("MEMORIES_DEBUG", "1")
    with caplog.at_level(logging.ERROR):
        log_failure(log, "a 100% unexpected step", failure)
    assert caplog.records[0].exc_info is not None and "diary" in caplog.text


def test_nothing_in_the_package_logs_a_traceback_another_way() -> None:
    """``log.exception`` and ``exc_info=`` write tracebacks whatever ``MEMORIES_DEBUG`` says (daemon/sync.py and
    mcp/server.py did)."""
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "logs.py" and path.parent == PACKAGE:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr == "exception" or any(keyword.arg == "exc_info" for keyword in node.keywords):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert offenders == []


def test_mcp_serve_in_debug_mode_logs_no_library_payload(tmp_path: Path) -> None:
    """``mcp serve --http`` with ``MEMORIES_DEBUG=1`` set the root logger to DEBUG, and sse_starlette logs every event
    it streams (``chunk: ...``, a tool result with note text) at DEBUG (issue 29, item 15). Memories' own DEBUG lines
    stay; no library's DEBUG line is written. In a child process: the logging set-up is process-wide."""
    script = (
        "import logging\n"
        "from memories.mcp.server import logging_to_stderr\n"
        "logging_to_stderr()\n"
        "logging.getLogger('sse_starlette.sse').debug('chunk: %s', b'data: zqx note text')\n"
        "logging.getLogger('mcp.server.runner').debug('dropped a frame: %r', 'zqx note text')\n"
        "logging.getLogger('some.library').debug('zqx note text')\n"
        "logging.getLogger('memories.mcp').debug('a debug line of our own')\n"
        "logging.getLogger('uvicorn.error').info('Uvicorn running')\n"
    )
    environment = {**os.environ, "MEMORIES_DEBUG": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "zqx" not in done.stderr
    assert "a debug line of our own" in done.stderr and "Uvicorn running" in done.stderr

"""Issue 21 item 3: everything the CLI prints from the daemon in text mode goes through one escaping rule
(memories/cli/terminal.py), whatever field it comes in: a sync peer (or a note) chooses ids, metadata keys, titles,
bodies, file names and messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

from memories import protocol as p
from memories.cli import cli
from memories.cli.output import Session
from memories.cli.terminal import escape, escape_document
from memories.client import RequestFailed

# An OSC 52 clipboard write, a C1 CSI, a bidi override and isolate, a newline that would fake a line of output.
EVIL = "x\x1b]52;c;cm0gLXJmIH4K\x07\x9b2J\u202e\u2066 \x00\x7f\x85\nFORGED line\ty"
PARAGRAPHS = "first\x1b[2J\x9b\u202e\nsecond\tcolumn"  # a body or an answer: its newline and tab stay


def _unsafe(text: str) -> list[str]:
    """Characters a terminal would obey, and lines the hostile text faked."""
    bad = [c for c in text if escape(c, lines=True) != c]
    return bad + [line for line in text.splitlines() if line.startswith("FORGED")]


def test_escape_makes_controls_and_bidi_visible_and_leaves_text_alone() -> None:
    for code in [
        *range(0x20),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0x200E,
        0x200F,
        0x061C,
        0x2028,
        0x2029,
    ]:
        shown = escape(chr(code))
        assert shown == (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"), hex(code)
    assert escape("a\nb\tc", lines=True) == "a\nb\tc" and escape("a\nb\tc") == "a\\x0ab\\x09c"
    assert escape("a\rb\x1b", lines=True) == "a\\x0db\\x1b"
    text = "数据库　迁移 — café 👨\u200d👩\u200d👧 \u00a0"  # ideographic space, ZWJ emoji: text, not controls
    assert escape(text) == text and escape(text, lines=True) == text
    assert escape(escape(EVIL)) == escape(EVIL)  # escaping twice changes nothing


def test_escape_document_escapes_keys_and_values_and_keeps_lines_where_asked() -> None:
    document = {"meta": {EVIL: EVIL}, "body": "a\nb", "n": 3, "list": ["\x1b"], "none": None}
    shown = escape_document(document, lines=("body",))
    assert shown == {"meta": {escape(EVIL): escape(EVIL)}, "body": "a\nb", "n": 3, "list": ["\\x1b"], "none": None}
    assert escape_document(document)["body"] == "a\\x0ab"


def _hostile(kind: Any, field: str = "") -> Any:
    """A value of the msgspec type ``kind`` in which every string is hostile."""
    info = msgspec.inspect.type_info(kind) if not isinstance(kind, msgspec.inspect.Type) else kind
    return _build(info, field)


def _build(info: msgspec.inspect.Type, field: str) -> Any:
    if isinstance(info, msgspec.inspect.StrType):
        return PARAGRAPHS if field in ("body", "answer") else EVIL
    if isinstance(info, msgspec.inspect.BoolType):
        return True
    if isinstance(info, msgspec.inspect.IntType):
        return 1
    if isinstance(info, msgspec.inspect.FloatType):
        return 1.0
    if isinstance(info, msgspec.inspect.LiteralType):
        return info.values[0]
    if isinstance(info, msgspec.inspect.UnionType):
        return _build(next(t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)), field)
    if isinstance(info, msgspec.inspect.ListType):
        return [_build(info.item_type, field)]
    if isinstance(info, msgspec.inspect.TupleType):
        return tuple(_build(item, field) for item in info.item_types)
    if isinstance(info, msgspec.inspect.DictType):
        return {_build(info.key_type, field): _build(info.value_type, field)}
    if isinstance(info, msgspec.inspect.StructType):
        return info.cls(**{f.name: _build(f.type, f.name) for f in info.fields})
    if isinstance(info, msgspec.inspect.AnyType):
        return EVIL
    raise AssertionError(f"no hostile value for {info}")


def _commands(tmp_path: Path) -> list[tuple[list[str], type]]:
    note = tmp_path / "note.md"
    note.write_text("# note\n")
    return [
        (["vault", "create", "v"], p.VaultInfo),
        (["vault", "list"], p.VaultListing),
        (["vault", "show", "v"], p.VaultDetail),
        (["vault", "delete", "v", "--yes"], p.VaultDeleted),
        (["memory", "add", "v", "--title", "t", "--body", "b"], p.RecordRef),
        (["memory", "read", "v", "0123456789abcdef"], p.RecordView),
        (["memory", "list", "v"], p.RecordListing),
        (["memory", "search", "v", "q"], p.MemorySearchReport),
        (["rag", "ingest", "v", str(note)], p.IngestReport),
        (["rag", "search", "v", "q"], p.SearchReport),
        (["rag", "ask", "v", "q"], p.AskReport),
        (["rag", "status", "v"], p.RagStatusReport),
        (["rag", "watch", "v", str(tmp_path)], p.WatchReport),
        (["rag", "index", "v"], p.IndexReport),
        (["rag", "model-install"], p.InstallReport),
        (["jobs"], p.JobListing),
        (["grant", "create", "v", "--client", "c", "--scope", "search"], p.GrantCreated),
        (["grant", "list"], p.GrantListing),
        (["sync", "status", "v"], p.SyncReport),
        (["sync", "join", str(tmp_path), "--passphrase-stdin"], p.SyncJoined),
        (["daemon", "status"], p.DaemonStatus),
    ]


def test_every_text_reply_is_escaped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each command's text output of a reply whose every string (ids, keys, titles, paths, messages) is hostile:
    nothing a terminal obeys, no faked line; bodies and answers keep their paragraphs."""
    for args, kind in _commands(tmp_path):
        document = _hostile(kind)
        monkeypatch.setattr(Session, "call", lambda self, request, document=document, **_: (document, [EVIL]))
        run = CliRunner().invoke(cli, args, input="a sync passphrase\n")
        assert run.exception is None or isinstance(run.exception, SystemExit), (args, run.exception)
        assert run.stdout.strip() and not _unsafe(run.stdout + run.stderr), (args, _unsafe(run.stdout + run.stderr))
        assert "x\\x1b]52;c;" in run.stdout, (args, run.stdout)
        if args[1:2] in (["read"], ["ask"]):
            assert "\nfirst\\x1b[2J\\x9b\\u202e\nsecond\tcolumn\n" in "\n" + run.stdout, run.stdout


def test_failures_and_warnings_are_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: Session, request: p.Request, **_: Any) -> None:
        raise RequestFailed(p.Failure(code="invalid_argument", message=EVIL, warnings=[EVIL]))

    monkeypatch.setattr(Session, "call", fail)
    run = CliRunner().invoke(cli, ["memory", "read", "v", "0123456789abcdef"])
    assert run.exit_code == 1 and not _unsafe(run.stderr), run.stderr
    assert f"error: invalid_argument: {escape(EVIL)}" in run.stderr

"""``memory add|read|list|update|delete|move|search``: records of a vault.

A body comes from ``--body``, ``--file PATH`` or standard input; it must be UTF-8 and at most 2 MiB
(:data:`~memories.limits.MAX_BODY_BYTES`); an empty body is allowed; a leading UTF-8 BOM of a file or of standard
input is removed. Listing never prints a body.
"""

from __future__ import annotations

import sys
from typing import Any, BinaryIO, get_args

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.filters import filter_fields, filter_options, meta_pairs
from memories.cli.output import Session, command, common_options
from memories.errors import MemoriesError
from memories.files import UTF8_BOM, FileTooLarge, NotRegularFile, read_regular_file
from memories.limits import MAX_BODY_BYTES, body_too_large, check_result_limit

KINDS = list(get_args(p.RecordKind))
SENSITIVITIES = list(get_args(p.Sensitivity))


class RevisionRef(click.ParamType):
    """A revision number (1 to 2**53) or a revision id: 8 to 64 hex digits (a unique prefix). Digits alone are a
    number."""

    name = "N|ID"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        text = str(value).strip().lower()
        if text.isdigit():
            if 1 <= int(text) <= 2**53:
                return int(text)
        elif 8 <= len(text) <= 64 and all(c in "0123456789abcdef" for c in text):
            return text
        self.fail(f"{value!r} is neither a revision number nor a revision id (8 to 64 hex digits)", param, ctx)


@click.group()
@common_options
def memory(json_mode: bool, home: str | None, config: str | None) -> None:
    """Store, read, revise, delete and search records."""


def read_limited(stream: BinaryIO, name: str) -> bytes:
    """Read at most :data:`MAX_BODY_BYTES` bytes after a UTF-8 BOM, which is dropped; refuse larger input without
    reading all of it.

    Raises:
        MemoriesError: ``body_too_large``.
    """
    return _without_bom(stream.read(MAX_BODY_BYTES + len(UTF8_BOM) + 1), name)


def _without_bom(data: bytes, name: str) -> bytes:
    """A file's or a stream's bytes without a leading UTF-8 BOM (:data:`memories.files.UTF8_BOM`), as ``rag ingest``
    reads notes.

    Raises:
        MemoriesError: ``body_too_large`` when more than :data:`MAX_BODY_BYTES` remain.
    """
    text = data.removeprefix(UTF8_BOM)
    if len(text) > MAX_BODY_BYTES:
        raise body_too_large(name)
    return text


def _body(body: str | None, file: str | None, *, required: bool) -> bytes | None:
    if body is not None and file is not None:
        raise click.UsageError("give either --body or --file, not both")
    if body is not None:
        return body.encode("utf-8", "surrogateescape")  # undecodable argv bytes reach the daemon as they were
    if file is not None:
        return _read_body_file(file)
    if required:
        if sys.stdin.isatty():
            click.echo("reading the body from standard input; end it with Ctrl-D", err=True)
        return read_limited(sys.stdin.buffer, "standard input")
    return None


def _read_body_file(path: str) -> bytes:
    """The bytes of ``--file PATH``: a regular file only (a pipe or a device would block or never end), at most
    :data:`MAX_BODY_BYTES`, through :func:`memories.files.read_regular_file`.

    Raises:
        MemoriesError: ``unsupported_file``, ``body_too_large``, ``invalid_argument`` (cannot be opened or read).
    """
    try:
        return _without_bom(read_regular_file(path, MAX_BODY_BYTES + len(UTF8_BOM)), path)
    except NotRegularFile:
        raise MemoriesError(
            "unsupported_file",
            f"{path} is not a regular file (a pipe, device or socket); give a file, --body, "
            "or the body on standard input",
            {"path": path},
        ) from None
    except FileTooLarge:
        raise body_too_large(path) from None
    except OSError as exc:
        raise MemoriesError("invalid_argument", f"cannot read {path}: {exc.strerror}") from None


_META_HELP = "Metadata KEY=VALUE (repeatable); `source` and `tags` are indexed for search."


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--kind", type=click.Choice(KINDS), default="memory", show_default=True)
@click.option("--sensitivity", type=click.Choice(SENSITIVITIES), default="general", show_default=True)
@click.option("--title", required=True)
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help=_META_HELP)
@click.option("--body", help="The body text (else --file, else standard input).")
@click.option("--file", "file", metavar="PATH", help="Read the body from a file.")
def add(
    session: Session,
    vault_ref: str,
    kind: p.RecordKind,  # click.Choice(KINDS)
    sensitivity: p.Sensitivity,  # click.Choice(SENSITIVITIES)
    title: str,
    meta: tuple[str, ...],
    body: str | None,
    file: str | None,
) -> None:
    """Add a record (revision 1)."""
    data = _body(body, file, required=True)
    assert data is not None
    request = p.MemoryAdd(
        vault=vault_ref,
        kind=kind,
        sensitivity=sensitivity,
        title=title,
        body=data,
        meta=meta_pairs(meta),
    )
    session.emit(*session.call(request), render.record_ref)


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("record_id", metavar="ID")
@click.option(
    "--revision",
    type=RevisionRef(),
    help="A revision number, or a revision id when several share it (default: the latest).",
)
def read(session: Session, vault_ref: str, record_id: str, revision: int | str | None) -> None:
    """Print one revision of a record (of a record in conflict: the version shown, and the others' ids)."""
    view, warnings = session.call(p.MemoryRead(vault=vault_ref, id=record_id, revision=revision))
    session.emit(view, warnings, lambda escaped: render.record(escaped, vault_ref), lines=("body",))


@command(memory, name="list")
@click.argument("vault_ref", metavar="VAULT")
@click.option("--kind", type=click.Choice(KINDS))
@filter_options(kind=False)
def list_(session: Session, vault_ref: str, kind: p.RecordKind | None, **filters: Any) -> None:
    """List records (titles and dates, never bodies), filtered as searches are."""
    request = p.MemoryList(vault=vault_ref, kind=kind, **filter_fields(**filters))
    session.emit(*session.call(request), render.record_listing)


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("record_id", metavar="ID")
@click.option("--title")
@click.option("--body", help="The new body text.")
@click.option("--file", "file", metavar="PATH", help="Read the new body from a file.")
@click.option("--sensitivity", type=click.Choice(SENSITIVITIES))
@click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help="Replaces all metadata when given.")
@click.option("--revision", type=RevisionRef(), help="The revision whose fields it starts from (a record in conflict).")
def update(
    session: Session,
    vault_ref: str,
    record_id: str,
    title: str | None,
    body: str | None,
    file: str | None,
    sensitivity: p.Sensitivity | None,
    meta: tuple[str, ...],
    revision: int | str | None,
) -> None:
    """Add a revision; earlier revisions stay readable, and a record in conflict gets one head again. At least one
    option is needed (else ``invalid_argument``: nothing to change, and no revision is added)."""
    if title is None and body is None and file is None and sensitivity is None and not meta and revision is None:
        raise MemoriesError(
            "invalid_argument",
            "nothing to change: give --title, --body, --file, --sensitivity, --meta or --revision",
        )
    request = p.MemoryUpdate(
        vault=vault_ref,
        id=record_id,
        title=title,
        body=_body(body, file, required=False),
        sensitivity=sensitivity,
        meta=meta_pairs(meta) if meta else None,
        revision=revision,
    )
    session.emit(*session.call(request), render.record_ref)


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("record_id", metavar="ID")
def delete(session: Session, vault_ref: str, record_id: str) -> None:
    """Delete a record and all its revisions."""
    session.emit(*session.call(p.MemoryDelete(vault=vault_ref, id=record_id)), render.deleted)


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("record_id", metavar="ID")
@click.option("--to", "target", required=True, metavar="VAULT", help="The vault to move the record to.")
def move(session: Session, vault_ref: str, record_id: str, target: str) -> None:
    """Move a record with every revision to another vault (same id and revisions, sealed with that vault's key)."""
    session.emit(*session.call(p.MemoryMove(vault=vault_ref, id=record_id, to=target)), render.record_ref)


@command(memory)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("query")
@click.option("--limit", type=click.IntRange(min=1), default=10, show_default=True, help="Most records (<= 100).")
@filter_options()
def search(session: Session, vault_ref: str, query: str, limit: int, kind: str | None, **filters: Any) -> None:
    """Lexical search, results grouped by record (filters apply before the limit)."""
    check_result_limit(limit)  # the daemon checks too; this fails early, and before a huge number is encoded
    request = p.MemorySearch(
        vault=vault_ref,
        query=query,
        limit=limit,
        kind=kind,  # type: ignore[arg-type]
        **filter_fields(**filters),
    )
    session.emit(*session.call(request), render.memory_search, lines=("text",))

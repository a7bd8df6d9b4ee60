"""``rag ingest|search|ask|status|index|model-install``: knowledge cards, retrieval and answers."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import click

from memories import protocol as p
from memories.cli import render
from memories.cli.filters import filter_fields, filter_options
from memories.cli.output import Session, command, common_options, import_exit_status
from memories.cli.watch import unwatch, watch
from memories.errors import EXIT_PARTIAL, MemoriesError
from memories.files import UTF8_BOM, FileTooLarge, NotRegularFile, read_regular_file
from memories.limits import MAX_RESULTS, check_result_limit


@click.group()
@common_options
def rag(json_mode: bool, home: str | None, config: str | None) -> None:
    """Import notes as knowledge cards and search them (BM25, vector, hybrid)."""


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--title", help="Title of the card (one file only; default: first Markdown heading, else file name).")
@click.option("--recursive", is_flag=True, help="Walk folders and their subfolders.")
@click.option("--exclude", multiple=True, metavar="GLOB", help="gitignore-style pattern to leave out (repeatable).")
def ingest(
    session: Session,
    vault_ref: str,
    paths: tuple[str, ...],
    title: str | None,
    recursive: bool,
    exclude: tuple[str, ...],
) -> int:
    """Import UTF-8 .md/.txt files as general, encrypted knowledge cards.

    Exit status: 0 when every file went in (or was unchanged/skipped), 3 when some were refused or the vault is now
    over a per-vault index limit, 1 when nothing went in.
    """
    if title is not None and (len(paths) > 1 or os.path.isdir(paths[0])):
        raise click.UsageError("--title needs exactly one file")
    request = p.RagIngest(
        vault=vault_ref,
        paths=[os.path.abspath(path) for path in paths],
        title=title,
        recursive=recursive,
        exclude=list(exclude),
    )
    try:
        report, warnings = session.call(request, progress=True)
    except MemoriesError as exc:
        if exc.code not in ("disk_full", "home_read_only") or not exc.details.get("stored"):
            raise
        session.fail(exc)  # the disk stopped the ingest after some cards went in: they are kept
        return EXIT_PARTIAL

    session.emit(report, warnings, render.ingest)
    return import_exit_status(report, went_in={"added", "updated", "moved", "unchanged"})


def _search_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The options ``rag search`` and ``rag explain`` share (explain runs the search rag search would), and the
    filters: the command gets ``mode``, ``match_mode``, ``limit``, ``cards_only``, ``no_rerank`` and
    :func:`~memories.cli.filters.filter_options`' values."""
    options: list[Callable[[Callable[..., Any]], Callable[..., Any]]] = [
        click.option(
            "--mode",
            type=click.Choice(["bm25", "vector", "hybrid"]),
            help="Default: hybrid when a model is installed and the vault embedded, else bm25.",
        ),
        click.option("--match-mode", type=click.Choice(["any", "all", "phrase"]), default="any", show_default=True),
        click.option(
            "--limit",
            type=click.IntRange(min=1),
            default=10,
            show_default=True,
            help=f"Most chunks (<= {MAX_RESULTS}).",
        ),
        click.option("--cards-only", is_flag=True, help="Only knowledge cards (--kind card)."),
        click.option("--no-rerank", is_flag=True, help="Skip the rerank stages (vector and hybrid modes)."),
        filter_options(),
    ]
    for option in reversed(options):  # the first option outermost, so listed first in --help
        fn = option(fn)
    return fn


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("query")
@_search_options
def search(
    session: Session,
    vault_ref: str,
    query: str,
    mode: str | None,
    match_mode: str,
    limit: int,
    cards_only: bool,
    no_rerank: bool,
    kind: str | None,
    **filters: Any,
) -> None:
    """Chunk-level search with citation labels, byte offsets and chunk hashes."""
    check_result_limit(limit)  # the daemon checks too; this fails early, and before a huge number is encoded
    request = p.RagSearch(
        vault=vault_ref,
        query=query,
        mode=mode,  # type: ignore[arg-type]
        match_mode=match_mode,  # type: ignore[arg-type]
        limit=limit,
        cards_only=cards_only,
        no_rerank=no_rerank,
        highlight=not session.json,
        kind=kind,  # type: ignore[arg-type]
        **filter_fields(**filters),
    )

    report, warnings = session.call(request, progress=True)
    snippets = [render.snippet(hit.text, hit.highlights) for hit in report.results]  # from the unescaped text
    session.emit(report, warnings, lambda escaped: render.search(escaped, snippets))


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("query")
@_search_options
@click.option(
    "--chunk",
    metavar="RECORD_ID[:N]|HASH",
    help="Also explain this chunk (a record's best chunk, its N-th chunk, or a chunk-hash prefix of 8+ hex digits).",
)
@click.option("--rerank", is_flag=True, help="Also call the learned [rag.rerank] service (it costs money).")
def explain(
    session: Session,
    vault_ref: str,
    query: str,
    mode: str | None,
    match_mode: str,
    limit: int,
    cards_only: bool,
    no_rerank: bool,
    chunk: str | None,
    rerank: bool,
    kind: str | None,
    **filters: Any,
) -> None:
    """Why each result of a search ranks where it does: BM25 and vector ranks, fusion, reranker, final rank.

    Uses the vectors present (never embeds a chunk; says how many have none) and the same code that ranks
    rag search.
    """
    check_result_limit(limit)
    request = p.RagExplain(
        vault=vault_ref,
        query=query,
        mode=mode,  # type: ignore[arg-type]
        match_mode=match_mode,  # type: ignore[arg-type]
        limit=limit,
        cards_only=cards_only,
        no_rerank=no_rerank,
        chunk=chunk,
        rerank=rerank,
        kind=kind,  # type: ignore[arg-type]
        **filter_fields(**filters),
    )

    session.emit(*session.call(request, progress=True), lambda escaped: render.explain(escaped, chunk))


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("question")
@click.option("--mode", type=click.Choice(["bm25", "vector", "hybrid"]), help="Retrieval mode (default as rag search).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=8, show_default=True, help=f"Most chunks (<= {MAX_RESULTS})."
)
@click.option("--cards-only", is_flag=True, help="Only knowledge cards (--kind card).")
@click.option("--no-rerank", is_flag=True, help="Skip both rerank stages.")
@filter_options()
def ask(
    session: Session,
    vault_ref: str,
    question: str,
    mode: str | None,
    limit: int,
    cards_only: bool,
    no_rerank: bool,
    kind: str | None,
    **filters: Any,
) -> None:
    """Answer QUESTION from the vault's own notes with the daemon's [rag.generation] service.

    Only evidence chunks are sent, as untrusted data; every citation is checked to name a chunk that was sent
    (references are checked, not whether each claim is supported). An answer longer than the answer cap (the same
    as memory_ask's) is cut and says so. Exit status 0 for an answer and for insufficient_evidence.
    """
    check_result_limit(limit)
    request = p.RagAsk(
        vault=vault_ref,
        question=question,
        mode=mode,  # type: ignore[arg-type]
        limit=limit,
        cards_only=cards_only,
        no_rerank=no_rerank,
        kind=kind,  # type: ignore[arg-type]
        **filter_fields(**filters),
    )

    session.emit(*session.call(request, progress=True), render.answer, lines=("answer",))  # it may have paragraphs


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("fixture", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--modes",
    metavar="MODES",
    help="Comma-separated bm25, vector, hybrid (default: all three when a model is usable, else bm25).",
)
@click.option("--rerank", is_flag=True, help="Also call the learned [rag.rerank] service (it costs money).")
def bench(session: Session, vault_ref: str, fixture: str, modes: str | None, rerank: bool) -> None:
    """Measure search on your own questions: nDCG@10, Recall@10 and MRR@10 per mode.

    FIXTURE is a JSONL file, one question a line: {"query": "...", "relevant": ["...", ...]}, each relevant entry a
    record id, a title or a source path. Each question runs as its own search; the scores count distinct records.
    """
    chosen: list[str] = []
    for mode in (modes or "").split(","):
        mode = mode.strip()
        if mode and mode not in ("bm25", "vector", "hybrid"):
            raise click.BadParameter(f"{mode!r} is not one of bm25, vector, hybrid", param_hint="--modes")
        if mode:
            chosen.append(mode)
    if modes is not None and not chosen:
        raise click.BadParameter("name at least one mode", param_hint="--modes")
    request = p.RagBench(
        vault=vault_ref,
        questions=fixture_questions(fixture),
        modes=chosen,  # type: ignore[arg-type]
        rerank=rerank,
    )

    session.emit(*session.call(request, progress=True), render.bench)


MAX_FIXTURE_BYTES = 16 * 1024 * 1024
"""The largest ``rag bench`` fixture read, in bytes: tens of thousands of questions (a line is a query of at most
1,024 bytes and a few relevant names), far beyond a person's own set."""


def fixture_questions(path: str) -> list[p.BenchQuestion]:
    """The questions of a ``rag bench`` fixture: UTF-8 JSONL (a leading BOM is skipped, blank lines too), each line
    an object with a non-empty string ``query`` and a non-empty list ``relevant`` of non-empty strings (other keys
    are ignored).

    Raises:
        MemoriesError: ``invalid_fixture`` naming the first bad line; ``invalid_argument`` when the file cannot be
            read, is not a regular file (``/dev/zero`` read until the machine ran out of memory) or is over
            :data:`MAX_FIXTURE_BYTES`.
    """
    try:
        text = read_regular_file(path, MAX_FIXTURE_BYTES).removeprefix(UTF8_BOM).decode("utf-8")
    except NotRegularFile:
        raise MemoriesError("invalid_argument", f"{path} is not a regular file (a pipe, device or socket)") from None
    except FileTooLarge:
        raise MemoriesError("invalid_argument", f"{path} is larger than {MAX_FIXTURE_BYTES:,} bytes") from None
    except OSError as exc:
        raise MemoriesError("invalid_argument", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise MemoriesError("invalid_fixture", f"{path} is not UTF-8 text (byte {exc.start})", {"line": None}) from None
    questions = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _bad_line(path, number, f"not JSON ({exc.msg})") from None
        if not isinstance(row, dict):
            raise _bad_line(path, number, "not a JSON object")
        query, relevant = row.get("query"), row.get("relevant")
        if not isinstance(query, str) or not query.strip():
            raise _bad_line(path, number, '"query" must be a non-empty string')
        if not isinstance(relevant, list) or not relevant:
            raise _bad_line(path, number, '"relevant" must be a non-empty list')
        if not all(isinstance(entry, str) and entry.strip() for entry in relevant):
            raise _bad_line(path, number, 'each "relevant" entry must be a non-empty string')
        questions.append(p.BenchQuestion(line=number, query=query, relevant=list(dict.fromkeys(relevant))))
    if not questions:
        raise MemoriesError("invalid_fixture", f"{path} holds no question", {"line": None})
    return questions


def _bad_line(path: str, number: int, problem: str) -> MemoriesError:
    return MemoriesError(
        "invalid_fixture",
        f'{path} line {number}: {problem}; each line is {{"query": "...", "relevant": ["...", ...]}}',
        {"line": number},
    )


rag.add_command(watch)
rag.add_command(unwatch)


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
def status(session: Session, vault_ref: str) -> None:
    """What is cached and embedded for a vault (works while locked)."""

    session.emit(*session.call(p.RagStatus(vault=vault_ref)), render.rag_status)


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--background", is_flag=True, help="Queue a job that keeps embedding in budgeted rounds after exit.")
def index(session: Session, vault_ref: str, background: bool) -> int:
    """Embed every chunk that has no vector yet.

    Exit status 3 when the embedding service refused some chunks (too long): they are listed under ``failed`` and
    not sent again.
    """

    report, warnings = session.call(p.RagIndex(vault=vault_ref, background=background), progress=True)
    session.emit(report, warnings, render.index)
    return EXIT_PARTIAL if isinstance(report, p.IndexReport) and report.failed else 0


@command(rag, name="model-install")
@click.option(
    "--from",
    "from_dir",
    type=click.Path(exists=True, file_okay=False),
    help="Install from a folder instead of downloading.",
)
def model_install(session: Session, from_dir: str | None) -> None:
    """Install the pinned EmbeddingGemma 300M Q4 files (SHA-256 verified, resumable)."""

    request = p.RagModelInstall(from_dir=os.path.abspath(from_dir) if from_dir else None)
    session.emit(*session.call(request, progress=True), render.installed)

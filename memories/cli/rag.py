"""``rag ingest|search|ask|status|index|model-install``: knowledge cards, retrieval and answers."""

from __future__ import annotations

import json
import os

import click

from memories import protocol as p
from memories.caps import MAX_ANSWER_CHARS, MAX_ANSWER_TOKENS
from memories.cli.output import (
    Session,
    command,
    common_options,
    counted,
    job_pace,
    local_time,
    mebibytes,
    one_line,
    plain_decimal,
    table,
)
from memories.cli.terminal import escape
from memories.cli.watch import show_watches, unwatch, watch
from memories.errors import EXIT_ERROR, EXIT_PARTIAL, MemoriesError
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
        document, warnings = session.call(request, progress=True)
    except MemoriesError as exc:
        if exc.code not in ("disk_full", "home_read_only") or not exc.details.get("stored"):
            raise
        session.fail(exc)  # the disk stopped the ingest after some cards went in: they are kept
        return EXIT_PARTIAL

    def human(document: dict) -> None:
        counts: dict[str, int] = {}
        for result in document["results"]:
            counts[result["status"]] = counts.get(result["status"], 0) + 1
            if result["status"] == "skipped":
                continue
            line = f"{result['status']:<9} {result['source'] or result['path']}"
            if result["id"]:
                line += f"  {result['id']} r{result['revision']}"
            if result["error"]:
                line += f"\n          {result['error']['code']}: {result['error']['message']}"
            click.echo(line)
        click.echo(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to import")

    session.emit(document, warnings, human)
    if document.get("over_limit"):
        over = document["over_limit"]
        click.echo(f"error: {escape(over['code'])}: the cards are stored, but {escape(over['message'])}", err=True)
        return EXIT_PARTIAL
    statuses = [r["status"] for r in document["results"]]
    if "refused" not in statuses:
        return 0
    went_in = any(s in ("added", "updated", "moved", "unchanged") for s in statuses)
    return EXIT_PARTIAL if went_in else EXIT_ERROR


def _snippet(text: str, highlights: list[list[int]], width: int = 200) -> str:
    """One line of ``text`` around the first highlight, with the query terms in bold when colour is on. ``text``
    comes unescaped, since ``highlights`` are code point offsets into it: each piece is escaped here."""
    start = max(0, highlights[0][0] - width // 4) if highlights else 0
    end = min(len(text), start + width)
    pieces, cursor = [], start
    for span_start, span_end in highlights:
        span_start, span_end = max(span_start, start), min(span_end, end)
        if span_start >= span_end:
            continue
        pieces.append(escape(text[cursor:span_start], lines=True))
        pieces.append(click.style(escape(text[span_start:span_end], lines=True), bold=True, fg="yellow"))
        cursor = span_end
    pieces.append(escape(text[cursor:end], lines=True))
    line = " ".join("".join(pieces).split())
    return ("…" if start else "") + line + ("…" if end < len(text) else "")


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("query")
@click.option(
    "--mode",
    type=click.Choice(["bm25", "vector", "hybrid"]),
    help="Default: hybrid when a model is installed, else bm25.",
)
@click.option("--match-mode", type=click.Choice(["any", "all", "phrase"]), default="any", show_default=True)
@click.option(
    "--limit", type=click.IntRange(min=1), default=10, show_default=True, help=f"Most chunks (<= {MAX_RESULTS})."
)
@click.option("--cards-only", is_flag=True, help="Only knowledge cards.")
@click.option("--no-rerank", is_flag=True, help="Skip the reranker (vector and hybrid modes).")
def search(
    session: Session,
    vault_ref: str,
    query: str,
    mode: str | None,
    match_mode: str,
    limit: int,
    cards_only: bool,
    no_rerank: bool,
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
    )

    document, warnings = session.call(request, progress=True)
    snippets = [_snippet(hit["text"], hit.get("highlights", [])) for hit in document["results"]]

    def human(document: dict) -> None:
        if not document["results"]:
            click.echo(f"no results ({document['mode']}, {document['match_mode']})")
        for hit, snippet in zip(document["results"], snippets, strict=True):
            where = hit["source"] or hit["asset_id"]
            click.echo(f"[{hit['label']}] {plain_decimal(hit['score'])}  {one_line(hit['title'], 70)}  ({where})")
            click.echo(f"     {snippet}")

    session.emit(document, warnings, human)


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("query")
@click.option(
    "--mode",
    type=click.Choice(["bm25", "vector", "hybrid"]),
    help="Default: as rag search (hybrid when a model is installed and the vault embedded, else bm25).",
)
@click.option("--match-mode", type=click.Choice(["any", "all", "phrase"]), default="any", show_default=True)
@click.option(
    "--limit", type=click.IntRange(min=1), default=10, show_default=True, help=f"Most chunks (<= {MAX_RESULTS})."
)
@click.option("--cards-only", is_flag=True, help="Only knowledge cards.")
@click.option("--no-rerank", is_flag=True, help="Skip both rerank stages, as rag search does.")
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
    )

    def human(document: dict) -> None:
        analysis = document["query"]
        click.echo(f"{document['mode']}, match {document['match_mode']}, language {analysis['language'] or '-'}")
        for term in analysis["terms"]:
            written = f" (written {', '.join(term['written'])})" if term["written"] else ""
            held = counted(term["chunks"], "chunk")
            click.echo(f"  term {term['term']}{written}: idf {term['weight']:.2f}, in {held}")
        if analysis["dropped"]:
            click.echo(f"  dropped (no term): {' '.join(analysis['dropped'])}")
        for character, words in analysis["widened"].items():
            click.echo(f"  {character} stands for: {', '.join(words)} (no chunk holds a query word)")
        for note in document["notes"]:
            click.echo(f"  note: {note}")
        if not document["results"]:
            click.echo("no results")
        for explained in document["results"]:
            _explained_chunk(explained)
        named = document["chunk"]
        if named is not None:
            where = f"rank {named['rank']}, shown above" if named["rank"] else "not in the list"
            click.echo(f"\n--chunk {chunk}: {where}")
            if not named["rank"]:
                _explained_chunk(named)

    session.emit(*session.call(request, progress=True), human)


def _explained_chunk(chunk: dict) -> None:
    """One explained chunk: where it is, then one line per stage."""
    head = f"[{chunk['label']}]" if chunk["label"] else "[-]"
    where = chunk["source"] or chunk["asset_id"]
    click.echo(
        f"{head} {one_line(chunk['title'], 60)}  ({where}, chunk {chunk['position']} of {chunk['chunks']}, "
        f"{chunk['chunk_hash'][:12]}, {chunk['language'] or '-'})"
    )
    lexical, vector, fusion, reranked = chunk["bm25"], chunk["vector"], chunk["fusion"], chunk["rerank"]
    if lexical is not None:
        parts = [] if lexical["rank"] is None else [f"rank {lexical['rank']}, score {plain_decimal(lexical['score'])}"]
        parts.append(f"holds {lexical['coverage']:.0%} of the query's weight")
        if lexical["note"]:
            parts.append(lexical["note"])
        click.echo(f"     bm25    {'; '.join(parts)}")
    if vector is not None:
        parts = [] if vector["rank"] is None else [f"rank {vector['rank']}, cosine {vector['cosine']:.4f}"]
        if vector["note"]:
            parts.append(vector["note"])
        click.echo(f"     vector  {'; '.join(parts)}")
    if fusion is not None:
        click.echo(f"     fusion  rank {fusion['rank']}, {plain_decimal(fusion['score'])}")
        for rule in fusion["rules"]:
            click.echo(f"             {rule}")
    if reranked is not None:
        if reranked["boost"] is None:
            click.echo(f"     rerank  {reranked['note']} -> {plain_decimal(reranked['score'])}")
        else:
            phrase = "yes" if reranked["phrase"] else "no"
            click.echo(
                f"     rerank  x{reranked['boost']:.3f} (coverage {reranked['coverage']:.2f} after script factor "
                f"{reranked['script']:.2f}, phrase {phrase}) -> {plain_decimal(reranked['score'])}"
            )
    if chunk["learned"] is not None:
        click.echo(f"     learned {plain_decimal(chunk['learned'])} ([rag.rerank])")
    click.echo(f"     final   {'rank ' + str(chunk['rank']) if chunk['rank'] else 'not in the list'}")


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.argument("question")
@click.option("--mode", type=click.Choice(["bm25", "vector", "hybrid"]), help="Retrieval mode (default as rag search).")
@click.option(
    "--limit", type=click.IntRange(min=1), default=8, show_default=True, help=f"Most chunks (<= {MAX_RESULTS})."
)
@click.option("--cards-only", is_flag=True, help="Only knowledge cards.")
@click.option("--no-rerank", is_flag=True, help="Skip both rerank stages.")
def ask(
    session: Session, vault_ref: str, question: str, mode: str | None, limit: int, cards_only: bool, no_rerank: bool
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
    )

    def human(document: dict) -> None:
        if document["status"] != "answered":
            reason = "no chunk is evidence" if document["reason"] == "retrieval" else "the model cited nothing"
            click.echo(f"insufficient evidence ({reason}; {document['mode']})")
            return
        click.echo(document["answer"])
        if document["answer_truncated"]:
            click.echo(
                f"(answer cut: the service wrote more than {MAX_ANSWER_TOKENS:,} estimated tokens or "
                f"{MAX_ANSWER_CHARS:,} characters)"
            )
        click.echo("")
        for citation in document["citations"]:
            span = f"{citation['byte_start']}-{citation['byte_end']}"
            click.echo(
                f"[{citation['label']}] {one_line(citation['title'], 70)}  "
                f"({citation['asset_id']} r{citation['revision']}, bytes {span})"
            )

    session.emit(*session.call(request, progress=True), human, lines=("answer",))  # an answer may have paragraphs


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

    def human(document: dict) -> None:
        learned = "with" if document["learned_rerank"] else "without"
        click.echo(f"{counted(document['questions'], 'question')}, {learned} the learned reranker")
        figures = document["modes"]
        rows = [
            [mode, f"{row['ndcg@10']:.3f}", f"{row['recall@10']:.3f}", f"{row['mrr@10']:.3f}", str(len(row["missed"]))]
            for mode, row in figures.items()
        ]
        table(rows, ["mode", "nDCG@10", "Recall@10", "MRR@10", "missed"])
        for mode, row in figures.items():
            if row["missed"]:
                click.echo(f"\nmissed by {mode} (no relevant record in the top 10):")
                for query in row["missed"]:
                    click.echo(f"  {one_line(query, 100)}")

    session.emit(*session.call(request, progress=True), human)


def fixture_questions(path: str) -> list[p.BenchQuestion]:
    """The questions of a ``rag bench`` fixture: UTF-8 JSONL (a leading BOM is skipped, blank lines too), each line
    an object with a non-empty string ``query`` and a non-empty list ``relevant`` of non-empty strings (other keys
    are ignored).

    Raises:
        MemoriesError: ``invalid_fixture`` naming the first bad line; ``invalid_argument`` when the file cannot be
            read.
    """
    try:
        with open(path, "rb") as file:
            text = file.read().removeprefix(b"\xef\xbb\xbf").decode("utf-8")
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

    def human(document: dict) -> None:
        model = document["model"]
        built = document["last_build"]
        click.echo(f"vault      {document['vault']}{' (locked)' if document['locked'] else ''}")
        click.echo(f"records    {'?' if document['records'] is None else document['records']} eligible")
        click.echo(
            f"cache      {document['cache']}, {counted(document['chunks'], 'chunk')}, "
            f"{counted(document['text_bytes'], 'byte')} of text"
        )
        if built:
            click.echo(f"built      {local_time(built)}")
        embedded, missing = document["embedded"], document["missing"]
        # Chunks with the same title and text are one model input and share one vector, so these can add up
        # to fewer than the chunks above.
        inputs = "?" if missing is None else f"{embedded + missing:,}"
        shown_missing = "?" if missing is None else f"{missing:,}"
        click.echo(
            f"vectors    {inputs} distinct inputs to embed (identical chunks share one): {embedded:,} embedded, "
            f"{shown_missing} missing, {counted(document['vector_bytes'], 'byte')}; kept {document['vectors']}"
        )
        indexing = document.get("indexing")
        if indexing:
            click.echo(f"indexing   {job_pace(indexing)} (job {indexing['job_id']})")
        remote = model.get("remote")
        if remote:
            key = remote["api_key_env"] or "no key"
            if remote["api_key_env"]:
                key += " (set)" if remote["key_set"] else " (not set)"
            width = remote["dimension"] or "from the first reply"
            click.echo(f"embedding  {remote['protocol']} {remote['url']} model {remote['model']}, {width} dims, {key}")
            click.echo(f"space      {model['space_key']}")
        else:
            state = "not installed" if not model["installed"] else ("verified" if model["verified"] else "installed")
            click.echo(f"model      {state} at {model['path']}")
        if document.get("failed"):
            click.echo(f"refused    {counted(document['failed'], 'chunk')} (too long for the embedding service)")
        limits = ", ".join(f"{k} {v:,}" for k, v in document["limits"].items())
        click.echo(f"limits     {limits}")
        if document["watch_count"]:
            show_watches(document["watches"], document["watch_count"], document["locked"])

    session.emit(*session.call(p.RagStatus(vault=vault_ref)), human)


@command(rag)
@click.argument("vault_ref", metavar="VAULT")
@click.option("--background", is_flag=True, help="Queue a job that keeps embedding in budgeted rounds after exit.")
def index(session: Session, vault_ref: str, background: bool) -> int:
    """Embed every chunk that has no vector yet.

    Exit status 3 when the embedding service refused some chunks (too long): they are listed under ``failed`` and
    not sent again.
    """

    def human(document: dict) -> None:
        if "job_id" in document:
            click.echo(f"job {document['job_id']} queued; follow it with `memories jobs`")
            return
        click.echo(
            f"{counted(document['embedded_now'], 'chunk')} embedded now, {document['reused']} reused, "
            f"{document['missing']} missing, {len(document['failed'])} refused"
        )
        for failure in document["failed"]:
            click.echo(
                f"  refused {failure['asset_id']} r{failure['revision']} {failure['chunk_hash'][:12]}: ", nl=False
            )
            click.echo(failure["error"])

    document, warnings = session.call(p.RagIndex(vault=vault_ref, background=background), progress=True)
    session.emit(document, warnings, human)
    return EXIT_PARTIAL if document.get("failed") else 0


@command(rag, name="model-install")
@click.option(
    "--from",
    "from_dir",
    type=click.Path(exists=True, file_okay=False),
    help="Install from a folder instead of downloading.",
)
def model_install(session: Session, from_dir: str | None) -> None:
    """Install the pinned EmbeddingGemma 300M Q4 files (SHA-256 verified, resumable)."""

    def human(document: dict) -> None:
        for file in document["files"]:
            click.echo(f"{file['status']:<10} {file['path']} ({mebibytes(file['bytes'])})")
        click.echo(f"model ready in {document['path']}")

    request = p.RagModelInstall(from_dir=os.path.abspath(from_dir) if from_dir else None)
    session.emit(*session.call(request, progress=True), human)

"""The CLI's text output: one function per daemon result, from the typed result to lines on stdout.

Every function gets its result already escaped (:meth:`memories.cli.output.Session.emit` passes it through
:func:`memories.cli.terminal.escape_document` first), so none of them can forget a field; text built here from
anything else (a vault name as typed, a snippet cut from unescaped text) is escaped where it is built. ``--json``
never comes here: it is the result struct encoded (:func:`memories.protocol.document`).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING

import click

from memories import protocol as p
from memories.caps import MAX_ANSWER_CHARS, MAX_ANSWER_TOKENS
from memories.cli.output import (
    Document,
    counted,
    job_pace,
    local_date,
    local_time,
    mebibytes,
    one_line,
    plain_decimal,
    relative_scores,
    table,
)
from memories.cli.terminal import escape

if TYPE_CHECKING:
    from memories.launcher import Started

# -- daemon, keys ------------------------------------------------------------------------------------------------

_CORE_DUMPS = {False: "off", True: "ON", None: "?"}
"""How a process's dumpable flag reads in ``daemon status``: ``off`` is what memories.hardening sets."""


def daemon_status(status: p.DaemonStatus) -> None:
    """``daemon status``: the daemon's lines, then a table of its workers."""
    click.echo(f"pid       {status.pid} (core dumps {_CORE_DUMPS[status.dumpable]})")
    click.echo(f"uptime    {status.uptime:.0f} s")
    click.echo(f"home      {status.home}")
    click.echo(f"config    {status.config} ({status.config_digest[:12]})")
    if not status.initialized:
        click.echo("keys      not initialized (run `memories init`)")
    else:
        click.echo(f"keys      {'locked' if status.locked else 'unlocked'}")
    click.echo(f"jobs      {status.running_jobs} running, {status.queued_jobs} queued")
    if status.model_loaded is not None:  # null: a remote embedding service, or a daemon of an older release
        click.echo(f"model     {'loaded' if status.model_loaded else 'not loaded'} in the embedding worker")
    if status.restart_needed:
        click.echo("restart   needed (settings on disk differ from the running ones)")
    if status.watch_count:
        watches(status.watches, status.watch_count, status.locked)
    table(
        [
            [
                w.name,
                "-" if w.pid is None else str(w.pid),  # no process yet: starting, or between restarts
                w.state,
                str(w.restarts),
                _CORE_DUMPS[w.dumpable],
            ]
            for w in status.workers
        ],
        ["worker", "pid", "state", "restarts", "core dumps"],
    )


def daemon_started(started: Started) -> None:
    """``daemon start``: its status, after a line saying so when it was already running."""
    if started.already_running:
        click.echo("already running; nothing was started")
    daemon_status(started)


def daemon_stopped(document: Document) -> None:
    """``daemon stop`` (a document the CLI builds: ``{"ok", "already_stopped"}``)."""
    click.echo("not running; nothing was stopped" if document["already_stopped"] else "stopped")


def lock_state(done: p.Done) -> None:
    """``init``, ``unlock``, ``lock``: the state the home is in now."""
    click.echo("locked" if done.locked else "unlocked")


# -- vaults ------------------------------------------------------------------------------------------------------


def vault(info: p.VaultInfo | p.VaultDetail) -> None:
    """``ID  NAME``, and ``(device-only)`` for a vault that is (a vault that is not needs no word: models are used
    only when the config names them)."""
    click.echo(f"{info.id}  {info.name}{'  (device-only)' if info.device_only else ''}")


def vault_listing(listing: p.VaultListing) -> None:
    table([[v.id, v.name, "yes" if v.device_only else "no"] for v in listing.vaults], ["id", "name", "device-only"])


def vault_detail(detail: p.VaultDetail) -> None:
    vault(detail)
    click.echo(f"created {local_time(detail.created)}, {counted(detail.records, 'record')}")


def vault_policy(info: p.VaultInfo) -> None:
    click.echo(f"{info.id}  {info.name}  device-only: {'on' if info.device_only else 'off'}")


def vault_deleted(deleted: p.VaultDeleted) -> None:
    click.echo(
        f"deleted vault {deleted.name} ({deleted.id}) with {counted(deleted.records, 'record')}; "
        f"{counted(deleted.revoked_grants, 'grant')} revoked"
    )


# -- records -----------------------------------------------------------------------------------------------------


def record_ref(ref: p.RecordRef) -> None:
    """``memory add``, ``update``, ``move``: the record and the revision written."""
    click.echo(f"{ref.id}  revision {ref.revision}")


def deleted(done: p.Done) -> None:
    click.echo("deleted")


SHORT_REVISION = 16
"""Hex digits of a revision id shown in text: unique in practice, and ``--revision`` takes any unique prefix of 8
or more."""


def record(view: p.RecordView, vault_ref: str) -> None:
    """``memory read``: title, id line, the conflict when there is one (:func:`conflict_lines`), metadata, body."""
    click.echo(f"# {view.title}")
    click.echo(f"id {view.id}  revision {view.revision}  {view.kind}  {view.sensitivity}  {local_time(view.updated)}")
    for line in conflict_lines(vault_ref, view):
        click.echo(line)
    for key, value in sorted(view.meta.items()):
        click.echo(f"{key}: {value}")
    click.echo()
    click.echo(view.body)


def conflict_lines(vault_ref: str, view: p.RecordView) -> list[str]:
    """What text shows of a record in conflict (``view.conflict``, else nothing): that several versions exist and
    how to resolve it, then each version's id: the one shown, a deletion, or the command that reads it.

    A deletion is named only when it is certain: a deletion is never shown, so when the revision shown is one of
    two heads and one head deletes the record, the other is the deletion."""
    conflict = view.conflict
    if conflict is None:
        return []
    heads, shown = conflict.revisions, view.revision_id
    deletion_known = conflict.deleted and shown in heads and len(heads) == 2
    command = f"memories memory read {shlex.quote(vault_ref)} {view.id} --revision"
    lines = [
        f"conflict: {len(heads)} versions, made on different devices; `memory update` resolves it "
        "(`--revision ID` picks the version it starts from)"
    ]
    for revision_id in heads:
        short = revision_id[:SHORT_REVISION]
        if revision_id == shown:
            lines.append(f"  {short}  shown here")
        elif deletion_known:
            lines.append(f"  {short}  deletes the record")
        else:
            lines.append(f"  {short}  {command} {short}")
    if conflict.deleted and not deletion_known:
        lines.append("  one of them deletes the record")
    return [escape(line) for line in lines]  # the vault as typed


def record_listing(listing: p.RecordListing) -> None:
    """``memory list`` as a table; a damaged record's title starts with ``DAMAGED (integrity_error)``, a record in
    conflict's with ``CONFLICT`` (``memory read`` shows its versions), a card whose watched file is gone with
    ``MISSING``."""
    rows = [
        [
            r.id,
            str(r.revision),
            r.kind or "?",
            r.sensitivity or "?",
            local_date(r.date),
            ("DAMAGED (integrity_error) " if r.damaged else "")
            + ("CONFLICT " if r.conflict else "")
            + ("MISSING " if r.missing else "")
            + one_line(r.title or ""),
        ]
        for r in listing.records
    ]
    table(rows, ["id", "rev", "kind", "sensitivity", "date", "title"])


def memory_search(report: p.MemorySearchReport) -> None:
    if not report.results:
        click.echo("no results")
    scores = relative_scores([found.score for found in report.results])
    for found, score in zip(report.results, scores, strict=True):
        click.echo(f"{score:>5}  {one_line(found.title, 80)}  ({found.id} r{found.revision})")
        for chunk in found.chunks:
            click.echo(f"       [{chunk.label}] {one_line(chunk.text, 100)}")


# -- rag ---------------------------------------------------------------------------------------------------------


def ingest(report: p.IngestReport) -> None:
    """One line per file (skipped ones only counted), its error below it, then the count of each status."""
    counts: dict[str, int] = {}
    for result in report.results:
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status == "skipped":
            continue
        line = f"{result.status:<9} {result.source or result.path}"
        if result.id:
            line += f"  {result.id} r{result.revision}"
        if result.error:
            line += f"\n          {result.error.code}: {result.error.message}"
        click.echo(line)
    click.echo(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing to import")


def snippet(text: str, highlights: Sequence[Sequence[int]], width: int = 200) -> str:
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


def search(report: p.SearchReport, snippets: list[str]) -> None:
    """``rag search``: label, score (as a share of the top result's, :func:`relative_scores`), title and where,
    then each hit's snippet (:func:`snippet`, made from the unescaped result)."""
    if not report.results:
        click.echo(f"no results ({report.mode}, {report.match_mode})")
    scores = relative_scores([hit.score for hit in report.results])
    for hit, shown, score in zip(report.results, snippets, scores, strict=True):
        where = hit.source or hit.asset_id
        click.echo(f"[{hit.label}] {score}  {one_line(hit.title, 70)}  ({where})")
        click.echo(f"     {shown}")


def explain(report: p.ExplainReport, chunk: str | None) -> None:
    """``rag explain``: the query's analysis, each result stage by stage, and the chunk named by ``--chunk``."""
    analysis = report.query
    click.echo(f"{report.mode}, match {report.match_mode}, language {analysis.language or '-'}")
    for term in analysis.terms:
        written = f" (written {', '.join(term.written)})" if term.written else ""
        click.echo(f"  term {term.term}{written}: idf {term.weight:.2f}, in {counted(term.chunks, 'chunk')}")
    if analysis.dropped:
        click.echo(f"  dropped (no term): {' '.join(analysis.dropped)}")
    for character, words in analysis.widened.items():
        click.echo(f"  {character} stands for: {', '.join(words)} (no chunk holds a query word)")
    for note in report.notes:
        click.echo(f"  note: {note}")
    if report.weak_matches:
        click.echo(
            "  weak matches: no result holds half of the query's content weight or reaches the evidence cosine "
            "(rag ask would find no evidence)"
        )
    if not report.results:
        click.echo("no results")
    for explained in report.results:
        _explained_chunk(explained)
    named = report.chunk
    if named is not None:
        where = f"rank {named.rank}, shown above" if named.rank else "not in the list"
        click.echo(f"\n--chunk {escape(chunk or '')}: {where}")
        if not named.rank:
            _explained_chunk(named)


def _explained_chunk(chunk: p.ExplainedChunk) -> None:
    """One explained chunk: where it is, then one line per stage."""
    head = f"[{chunk.label}]" if chunk.label else "[-]"
    where = chunk.source or chunk.asset_id
    click.echo(
        f"{head} {one_line(chunk.title, 60)}  ({where}, chunk {chunk.position} of {chunk.chunks}, "
        f"{chunk.chunk_hash[:12]}, {chunk.language or '-'})"
    )
    lexical, vector, fusion, reranked = chunk.bm25, chunk.vector, chunk.fusion, chunk.rerank
    if lexical is not None:
        ranked = lexical.rank is not None and lexical.score is not None
        parts = [f"rank {lexical.rank}, score {plain_decimal(lexical.score or 0.0)}"] if ranked else []
        parts.append(f"holds {lexical.coverage:.0%} of the query's weight")
        if lexical.note:
            parts.append(lexical.note)
        click.echo(f"     bm25    {'; '.join(parts)}")
    if vector is not None:
        parts = [] if vector.rank is None else [f"rank {vector.rank}, cosine {vector.cosine:.4f}"]
        if vector.note:
            parts.append(vector.note)
        click.echo(f"     vector  {'; '.join(parts)}")
    if fusion is not None:
        click.echo(f"     fusion  rank {fusion.rank}, {plain_decimal(fusion.score)}")
        for rule in fusion.rules:
            click.echo(f"             {rule}")
    if reranked is not None:
        if reranked.boost is None:
            click.echo(f"     rerank  {reranked.note} -> {plain_decimal(reranked.score)}")
        else:
            phrase = "yes" if reranked.phrase else "no"
            click.echo(
                f"     rerank  x{reranked.boost:.3f} (coverage {reranked.coverage:.2f} after script factor "
                f"{reranked.script:.2f}, phrase {phrase}) -> {plain_decimal(reranked.score)}"
            )
    if chunk.learned is not None:
        click.echo(f"     learned {plain_decimal(chunk.learned)} ([rag.rerank])")
    click.echo(f"     final   {'rank ' + str(chunk.rank) if chunk.rank else 'not in the list'}")


def answer(report: p.AskReport) -> None:
    """``rag ask``: the answer (paragraphs kept), a note when it was cut, then its citations; or why there is
    none."""
    if report.status != "answered":
        reason = "no chunk is evidence" if report.reason == "retrieval" else "the model cited nothing"
        click.echo(f"insufficient evidence ({reason}; {report.mode})")
        return
    click.echo(report.answer)
    if report.answer_truncated:
        click.echo(
            f"(answer cut: the service wrote more than {MAX_ANSWER_TOKENS:,} estimated tokens or "
            f"{MAX_ANSWER_CHARS:,} characters)"
        )
    click.echo("")
    for citation in report.citations:
        span = f"{citation.byte_start}-{citation.byte_end}"
        click.echo(
            f"[{citation.label}] {one_line(citation.title, 70)}  "
            f"({citation.asset_id} r{citation.revision}, bytes {span})"
        )


def bench(report: p.BenchReport) -> None:
    """``rag bench``: a table of the figures per mode, then the questions each mode missed."""
    learned = "with" if report.learned_rerank else "without"
    click.echo(f"{counted(report.questions, 'question')}, {learned} the learned reranker")
    rows = [
        [mode, f"{row.ndcg:.3f}", f"{row.recall:.3f}", f"{row.mrr:.3f}", str(len(row.missed))]
        for mode, row in report.modes.items()
    ]
    table(rows, ["mode", "nDCG@10", "Recall@10", "MRR@10", "missed"])
    for mode, row in report.modes.items():
        if row.missed:
            click.echo(f"\nmissed by {mode} (no relevant record in the top 10):")
            for query in row.missed:
                click.echo(f"  {one_line(query, 100)}")


def rag_status(status: p.RagStatusReport) -> None:
    """``rag status``: cache, vectors, the embedding backend and the limits, one labelled line each."""
    model = status.model
    click.echo(f"vault      {status.vault}{' (locked)' if status.locked else ''}")
    click.echo(f"records    {'?' if status.records is None else status.records} eligible")
    click.echo(
        f"cache      {status.cache}, {counted(status.chunks, 'chunk')}, {counted(status.text_bytes, 'byte')} of text"
    )
    if status.last_build:
        click.echo(f"built      {local_time(status.last_build)}")
    embedded, missing = status.embedded, status.missing
    size = f"{counted(status.vector_bytes, 'byte')}; kept {status.vectors}"
    if embedded is None:  # kept sealed in the home, not loaded into the cache yet
        click.echo(f"vectors    {size}; counted once loaded (the first vector or hybrid search loads them)")
    elif missing is None:  # the cache is cold: what is left to embed is known once the vault is indexed
        click.echo(f"vectors    {embedded:,} embedded, {size}; the count to embed is known once the cache is built")
    else:
        # Chunks with the same title and text are one model input and share one vector, so these can add up to
        # fewer than the chunks above.
        click.echo(
            f"vectors    {embedded + missing:,} distinct inputs to embed (identical chunks share one): "
            f"{embedded:,} embedded, {missing:,} missing, {size}"
        )
    if status.indexing:
        click.echo(f"indexing   {job_pace(status.indexing)} (job {status.indexing.job_id})")
    crashed = status.background_failure
    if crashed:
        then = (
            f"job {crashed.retry_job} retries it (attempt {crashed.attempt} of {crashed.attempts})"
            if crashed.retry_job is not None
            else f"not retried after {crashed.attempts} attempts: run memories rag index {status.vault} --background"
        )
        click.echo(f"failed     background job {crashed.job_id}: {crashed.error.message}; {then}")
    remote = model.remote
    if remote:
        key = remote.api_key_env or "no key"
        if remote.api_key_env:
            key += " (set)" if remote.key_set else " (not set)"
        width = remote.dimension or "from the first reply"
        click.echo(f"embedding  {remote.protocol} {remote.url} model {remote.model}, {width} dims, {key}")
        click.echo(f"space      {model.space_key}")
    else:
        if not model.installed:
            click.echo(f"model      not installed at {model.path} (memories rag model-install)")
        elif model.verified:
            click.echo(f"model      verified at {model.path} (its files match the pinned SHA-256 hashes)")
        else:
            click.echo(
                f"model      installed at {model.path}, but its files match no pinned SHA-256 hash: a model of your "
                "own, or damaged files (move them away and run memories rag model-install for the pinned ones)"
            )
        if model.installed and model.loaded is not None:
            click.echo(
                "loaded     yes, in the embedding worker"
                if model.loaded
                else "loaded     not yet (it loads in the background after an unlock, or at the first query)"
            )
    if status.failed:
        click.echo(f"refused    {counted(status.failed, 'chunk')} (too long for the embedding service)")
    limits = ", ".join(f"{k} {v:,}" for k, v in status.limits.items())
    click.echo(f"limits     {limits}")
    over = status.over_limit
    if over is not None and over.details:
        facts = over.details
        click.echo(
            f"over       {facts['chunks']:,} chunks, {facts['text_bytes']:,} bytes of text: over {facts['limit']} "
            f"{facts['max']:,}; searches fail until records are removed or {facts['setting']} is raised"
        )
    if status.watch_count:
        watches(status.watches, status.watch_count, status.locked)


def index(report: p.IndexReport | p.JobStarted) -> None:
    """``rag index``: what was embedded and refused, or the background job queued."""
    if isinstance(report, p.JobStarted):
        click.echo(f"job {report.job_id} queued; follow it with `memories jobs`")
        return
    click.echo(
        f"{counted(report.embedded_now, 'chunk')} embedded now, {report.reused} reused, "
        f"{report.missing} missing, {len(report.failed)} refused"
    )
    for failure in report.failed:
        click.echo(f"  refused {failure.asset_id} r{failure.revision} {failure.chunk_hash[:12]}: ", nl=False)
        click.echo(failure.error)


def installed(report: p.InstallReport) -> None:
    for file in report.files:
        click.echo(f"{file.status:<10} {file.path} ({mebibytes(file.bytes)})")
    click.echo(f"model ready in {report.path}")


# -- watched folders ---------------------------------------------------------------------------------------------


def watches(found: list[p.WatchInfo], count: int, locked: bool) -> None:
    """The watched folders as ``rag watch list``, ``rag status`` and ``daemon status`` print them."""
    if locked:
        click.echo(f"watches   {counted(count, 'folder')} (locked: unlock to see them)")
        return
    if not found:
        click.echo("watches   none")
    for watch in found:
        rules = ", ".join(
            [*(["recursive"] if watch.recursive else []), f"on delete: {watch.on_delete}"]
            + [f"exclude {pattern}" for pattern in watch.exclude]
        )
        click.echo(f"watch     {watch.folder} -> {watch.vault_name} ({rules})")
        seen = local_time(watch.last_change) if watch.last_change else "none yet"
        line = f"          {watch.state}, {counted(watch.cards, 'card')}, last change {seen}"
        if watch.missing:
            line += f", {watch.missing} files missing"
        if watch.refused:
            line += f", {counted(watch.refused, 'file')} refused"
        click.echo(line)
        if watch.paused:
            click.echo(f"          paused: {watch.paused}")
            click.echo(
                f"          resume: memories rag watch {watch.vault_name} {watch.folder} --resume "
                "(deletes only what is still absent) or --accept-deletions"
            )
        if watch.error:
            click.echo(f"          note: {watch.error}")


def watch_report(report: p.WatchReport) -> None:
    """``rag watch``: what its import did (unchanged and skipped files only counted), then the watch."""
    counts: dict[str, int] = {}
    for result in report.results:
        counts[result.status] = counts.get(result.status, 0) + 1
        if result.status in ("skipped", "unchanged"):
            continue
        click.echo(f"{result.status:<9} {result.source or result.path}")
        if result.error:
            click.echo(f"          {result.error.code}: {result.error.message}")
    click.echo(", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "nothing new to import")
    watches([report.watch], 1, False)


def watch_listing(listing: p.WatchListing) -> None:
    watches(listing.watches, listing.count, listing.locked)


def unwatched(done: p.Done, folder: str) -> None:
    """``rag unwatch``: the folder as given (absolute), escaped here: it is not part of the result."""
    click.echo(f"no longer watching {escape(folder)}")


# -- jobs, grants, sync ------------------------------------------------------------------------------------------


def jobs(listing: p.JobListing) -> None:
    rows = []
    for job in listing.jobs:
        # a job that never reported progress (a search): its state says it all
        progress = "-" if job.unit is None else job_pace(job)
        error = job.error.code if job.error else ""
        rows.append([str(job.id), job.kind, job.vault_name or job.vault or "", job.state, progress, error])
    table(rows, ["id", "kind", "vault", "state", "progress", "error"])


def grant_created(created: p.GrantCreated) -> None:
    click.echo(f"grant {created.id} on {created.vault} for {created.client}")
    click.echo(f"scope {','.join(created.scope)}, expires {local_time(created.expires)}")
    click.echo(f"token (shown once): {created.token}")


def grants(listing: p.GrantListing) -> None:
    rows = [
        [g.id, g.vault, g.client, ",".join(g.scope), local_time(g.created), local_time(g.expires), g.state]
        for g in listing.grants
    ]
    table(rows, ["id", "vault", "client", "scope", "created", "expires", "state"])


def sync(report: p.SyncReport) -> None:
    """``sync init|push|pull|status``: the last push and pull, then each conflict, bad and skipped file."""
    click.echo(f"vault {report.vault}  folder {report.folder}")
    click.echo(f"last push {local_time(report.last_push)} ({report.pushed} written)")
    click.echo(f"last pull {local_time(report.last_pull)} ({report.imported} imported)")
    for record_id in report.conflicts:
        click.echo(f"conflict: record {record_id} (`memory read` names its versions; `memory update` resolves it)")
    for bad in report.bad:
        state = "not complete yet" if bad.pending else "bad"
        click.echo(f"{state}: {bad.file} ({bad.reason})")
    for skipped in report.skipped:
        click.echo(f"skipped: {skipped.file} ({skipped.why})")
    if report.not_local or report.waiting:
        click.echo(f"not here yet: {report.not_local} payload(s); waiting for parents: {report.waiting}")
    failed = report.timer_error
    if failed:
        click.echo(f"timed sync failed {local_time(failed.at)}: {failed.code}: {failed.message}")


def joined(joined: p.SyncJoined) -> None:
    click.echo(f"joined vault {joined.name} ({joined.id})")


def injected(document: Document) -> None:
    """``inject``: one line per client, and its notes (a document the CLI builds: ``{"clients": [row, ...]}``, each
    row's ``client``, ``status``, and ``config``, ``grant``, ``skill_status``, ``note``, ``skill_note``, ``error``
    where they apply); a client's error goes to stderr."""
    for row in document["clients"]:
        line = f"{row['client']}: {row['status']}"
        if row["status"] == "configured":
            line += f" {row['config']} (grant {row['grant']})"
        if row.get("skill_status"):
            line += f"; skill {row['skill_status']}"
        click.echo(line)
        for key in ("note", "skill_note"):
            if row.get(key):
                click.echo(f"  {row[key]}")
        if row.get("error"):
            click.echo(f"error: {row['error']['code']}: {row['error']['message']}", err=True)

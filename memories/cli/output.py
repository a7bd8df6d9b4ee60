"""How every command talks to the daemon and prints: one JSON document or readable text, and one error line.

- ``--json``: exactly one JSON document on stdout (the reply's result, plus ``"warnings"`` when there are any);
  progress events as JSON lines on stderr (``{"event": "progress", "job_id", "done", "total", "unit"}``); a
  failure is ``{"error": {"code", "message", "details"}}`` on stdout.
- Otherwise: text or a table on stdout, progress as a bar on stderr when it is a terminal, warnings as
  ``warning: ...`` lines on stderr. Every string from the daemon (the document, warnings, progress notes, error
  messages) passes through :mod:`memories.cli.terminal`'s escaping first.
- A failure always writes ``error: CODE: message`` on stderr and exits 1 (click's usage errors keep 2; partial
  runs exit 3).
"""

from __future__ import annotations

import datetime
import functools
import math
import os
import sys
import unicodedata
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import click
import msgspec

from memories import protocol as p
from memories.cli.terminal import escape, escape_document
from memories.client import Answer, Client, RequestFailed
from memories.durations import about
from memories.errors import EXIT_ERROR, EXIT_PARTIAL, MemoriesError
from memories.paths import Home, resolve_home

Document = dict[str, Any]
"""A document the CLI builds itself (``daemon stop``, ``inject``), printed as a daemon's result is."""

R = TypeVar("R")


class Session:
    """What a command invocation knows: output mode, home, and a client for its daemon."""

    def __init__(self, json_mode: bool, home: str | None, config: str | None) -> None:
        self.json = json_mode
        self._home_option = home
        self._config_option = config
        self._home: Home | None = None

    @property
    def home(self) -> Home:
        if self._home is None:
            self._home = resolve_home(self._home_option, self._config_option)
        return self._home

    @property
    def client(self) -> Client:
        return Client(self.home)

    def call(self, request: p.ClientRequest[R], *, progress: bool = False) -> Answer[R]:
        """Send ``request``; returns its result (of the type the request declares) and the daemon's warnings.

        Raises:
            MemoriesError: the daemon's failure; ``daemon_not_running`` when the daemon went away before its
                answer, saying (and with ``progress``, in ``details``: ``done``, ``total``, ``unit``) how far the job
                had got by its last progress event: what a job finished is kept (an ingest's cards are stored).
        """
        if not progress:
            return self.client.request(request)
        seen: list[p.Progress] = []
        with self._progress() as show:

            def on_progress(event: p.Progress) -> None:
                seen[:] = [event]
                show(event)

            try:
                return self.client.request(request, on_progress)
            except MemoriesError as exc:
                if exc.code != "daemon_not_running" or not seen or isinstance(exc, RequestFailed):
                    raise
                raise _stopped_after(exc, seen[0]) from None

    def emit(
        self,
        result: R,
        warnings: list[str],
        human: Callable[[R], None],
        *,
        lines: Collection[str] = (),
    ) -> None:
        """Print a result (a result struct, or a :data:`Document` the CLI built): with ``--json`` its JSON document
        (:func:`memories.protocol.document`) and the warnings in it; else ``human`` (a :mod:`memories.cli.render`
        function) of the result with every string escaped (:func:`~memories.cli.terminal.escape_document`; the
        fields or keys ``lines`` keep their newlines and tabs) and the warnings on stderr."""
        if self.json:
            document = p.document(result) if isinstance(result, msgspec.Struct) else cast(Document, result)
            if warnings:
                document = {**document, "warnings": warnings}
            _write_json(document)
        else:
            human(escape_document(result, lines))
            for warning in warnings:
                click.echo(f"warning: {escape(warning)}", err=True)

    def fail(self, exc: MemoriesError) -> None:
        """Report a failure in both channels."""
        warnings = exc.warnings if isinstance(exc, RequestFailed) else []
        if self.json:
            error: dict[str, Any] = {"code": exc.code, "message": exc.message}
            if exc.details:
                error["details"] = exc.details
            document: Document = {"error": error}
            if warnings:
                document["warnings"] = warnings
            _write_json(document)
        else:
            for warning in warnings:
                click.echo(f"warning: {escape(warning)}", err=True)
        click.echo(f"error: {escape(exc.code)}: {escape(exc.message)}", err=True)  # messages name files and records

    @contextmanager
    def _progress(self) -> Iterator[Callable[[p.Progress], None]]:
        if self.json:
            yield _json_progress
        elif sys.stderr.isatty():
            with _ProgressBar() as bar:
                yield bar.update
        else:
            yield lambda event: None


def _stopped_after(exc: MemoriesError, last: p.Progress) -> MemoriesError:
    """``exc`` (the daemon went away mid-request) with how far the job had got, as its last progress event said: a
    ``kill -9`` of the daemon during an ingest left only "closed the connection without an answer"."""
    of = f" of {last.total:,}" if last.total is not None else ""
    if last.done:
        how_far = f"by then the job had finished at least {last.done:,}{of} {last.unit}, and what it finished is kept"
        how_far += " (an ingest's cards are stored)" if last.unit == "files" else ""
    else:
        how_far = f"the job had not finished any{of} {last.unit} yet"
    return MemoriesError(
        exc.code,
        f"{exc.message}; {how_far}: run the command again to go on",
        {**exc.details, "done": last.done, "total": last.total, "unit": last.unit},
    )


def _write_json(document: Document) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(document) + b"\n")
    sys.stdout.flush()


def _json_progress(event: p.Progress) -> None:
    line = {
        "event": "progress",
        "job_id": event.job_id,
        "done": event.done,
        "total": event.total,
        "unit": event.unit,
    }
    if event.note is not None:
        line["note"] = event.note
    sys.stderr.buffer.write(msgspec.json.encode(line) + b"\n")
    sys.stderr.flush()


class _ProgressBar:
    """A rich progress bar on stderr (rich is imported only here, never on a plain command's start-up path).

    Byte counts (model downloads) show size, rate and ETA; item counts (files, chunks) show done/total and ETA;
    an event's note (``retrying 2/3 after 503, waiting 1 s``) shows beside the unit until the next event.
    A wait (unit ``seconds``: ``rag ask`` waiting for the generation service) is a spinner line with its first
    event's note and the seconds waited; any other note (a retry) is also printed as a line of its own, which stays
    when the spinner line goes.
    """

    def __init__(self) -> None:
        self._progress: Any = None
        self._task: Any = None
        self._status: str | None = None
        """The note of a wait's first event: what it waits for."""

    def __enter__(self) -> _ProgressBar:
        return self

    def update(self, event: p.Progress) -> None:
        if self._progress is None:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                SpinnerColumn,
                TextColumn,
                TimeRemainingColumn,
            )
            from rich.text import Text

            class MebibytesPerSecond(ProgressColumn):
                """Transfer speed in MiB/s (rich's own column uses decimal MB/s; sizes here are MiB)."""

                def render(self, task: Any) -> Text:
                    speed = task.finished_speed or task.speed
                    return Text("" if speed is None else f"{speed / 2**20:.1f} MiB/s", style="progress.data.speed")

            text = TextColumn("{task.description}", markup=False)  # a note is text, not rich markup
            columns: tuple[ProgressColumn, ...]
            if event.unit == "seconds":
                columns = (SpinnerColumn(), text)
                self._status = event.note
            elif event.unit == "bytes":
                columns = (text, BarColumn(), DownloadColumn(binary_units=True), MebibytesPerSecond())
                columns += (TimeRemainingColumn(),)
            else:
                columns = (text, BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
            self._progress = Progress(*columns, console=Console(stderr=True), transient=True)
            self._progress.start()
            self._task = self._progress.add_task(event.unit, total=event.total)
        if event.unit == "seconds":
            note = escape(event.note or "waiting")
            if event.note != self._status:
                self._progress.console.print(note, highlight=False, markup=False)
            self._progress.update(self._task, description=f"{note} · {event.done} s")
            return
        # A note (a retry and its wait) replaces the unit until the next plain event.
        label = event.unit if event.note is None else f"{event.unit}: {escape(event.note)}"
        self._progress.update(self._task, completed=event.done, total=event.total, description=label)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()


def common_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Add ``--json``, ``--home`` and ``--config`` (the root group, groups and leaf commands all take them)."""
    fn = click.option("--config", "config", metavar="FILE", help="The config file (default: <home>/config.toml).")(fn)
    fn = click.option(
        "--home",
        "home",
        metavar="DIR",
        help="The home folder (default: $MEMORIES_HOME, else the user data folder).",
    )(fn)
    return click.option("--json", "json_mode", is_flag=True, help="Print exactly one JSON document on stdout.")(fn)


def _from_context(name: str) -> Any:
    """The value of a common option given at the nearest level of ``memories [opts] group [opts] cmd [opts]``."""
    ctx: click.Context | None = click.get_current_context()
    while ctx is not None:
        value = ctx.params.get(name)
        if value:
            return value
        ctx = ctx.parent
    return None


def command(group: click.Group | None, name: str | None = None, **settings: Any) -> Callable[[Callable[..., Any]], Any]:
    """A leaf command (of ``group``, or standalone for the root's lazy loader) that takes the common options and
    reports errors uniformly. The decorated function receives a :class:`Session` first; it may return an exit
    status (default 0).
    """

    def decorate(fn: Callable[..., Any]) -> Any:
        @(group.command(name, **settings) if group is not None else click.command(name, **settings))
        @common_options
        @functools.wraps(fn)
        def wrapper(json_mode: bool, home: str | None, config: str | None, **kwargs: Any) -> None:
            session = Session(bool(_from_context("json_mode")), _from_context("home"), _from_context("config"))
            try:
                status = fn(session, **kwargs)
            except MemoriesError as exc:
                session.fail(exc)
                sys.exit(EXIT_ERROR)
            except (click.ClickException, click.exceptions.Exit, click.Abort, BrokenPipeError):
                raise
            except KeyboardInterrupt:
                raise click.Abort from None
            except Exception as exc:  # a bug: still one line, never a traceback (MEMORIES_DEBUG=1 shows it)
                if os.environ.get("MEMORIES_DEBUG"):
                    raise
                session.fail(MemoriesError("internal_error", f"{type(exc).__name__}: {exc}"))
                sys.exit(EXIT_ERROR)
            sys.exit(status or 0)

        return wrapper

    return decorate


# -- human rendering helpers -----------------------------------------------------------------------------------


def display_width(text: str) -> int:
    """Terminal columns of ``text``: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def table(rows: list[list[str]], headers: list[str]) -> None:
    """Print a plain aligned table (CJK-aware widths) of cells already escaped (:meth:`Session.emit` did)."""
    if not rows:
        click.echo("(none)")
        return
    widths = [max(display_width(r[i]) for r in [headers, *rows]) for i in range(len(headers))]
    for row in [headers, *rows]:
        cells = [cell + " " * (widths[i] - display_width(cell)) for i, cell in enumerate(row)]
        click.echo("  ".join(cells).rstrip())


def local_time(seconds: float | None) -> str:
    """Unix ``seconds`` as local ISO 8601 time to the second with its UTC offset (``2025-03-01T09:30:00+08:00``),
    so a time read on another machine, in a log or after a move to another zone is still one moment; ``never`` for
    ``None``."""
    if seconds is None:
        return "never"
    return datetime.datetime.fromtimestamp(seconds).astimezone().isoformat(timespec="seconds")


def local_date(seconds: float | None) -> str:
    """Unix ``seconds`` as the local day (``2025-03-01``: a listing's note date); ``-`` for ``None``."""
    if seconds is None:
        return "-"
    return datetime.datetime.fromtimestamp(seconds).date().isoformat()


def plain_decimal(value: float, significant: int = 4) -> str:
    """``value`` with about ``significant`` significant digits in positional notation, never an exponent: a BM25
    score of ``3.75e-06`` looks broken to a person, ``0.00000375`` does not. At most 12 decimals, trailing zeros
    dropped.

    >>> plain_decimal(3.75e-06), plain_decimal(0.0327868), plain_decimal(12.3456), plain_decimal(0.0)
    ('0.00000375', '0.03279', '12.35', '0')
    """
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = min(max(significant - 1 - math.floor(math.log10(abs(value))), 0), 12)
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def relative_scores(scores: Sequence[float]) -> list[str]:
    """Each of a result list's ``scores`` as a whole percentage of the best one, for text output: a BM25 or fused
    score on its own scale (``0.000001856``) tells a person nothing, its share of the top result's does. Rounded
    down, so only the best (and its ties) shows ``100%``; a share under 1 % is ``<1%``. When the best is not a
    positive finite number the scores are shown as :func:`plain_decimal`. ``--json`` keeps the scores themselves.

    >>> relative_scores([1.856e-06, 1.5e-06, 1e-09]), relative_scores([0.0, 0.0])
    (['100%', '80%', '<1%'], ['0', '0'])
    """
    best = max(scores, default=0.0)
    if not (math.isfinite(best) and best > 0):
        return [plain_decimal(score) for score in scores]
    shares = [math.floor(100 * score / best) if score < best else 100 for score in scores]
    return [f"{share}%" if share >= 1 else "<1%" for share in shares]


def counted(number: int, noun: str, plural: str | None = None) -> str:
    """``number`` and ``noun``, in the plural unless the number is 1 (``plural``, else ``noun`` + ``s``), with
    thousands separators.

    >>> counted(1, "record"), counted(0, "record"), counted(4758, "chunk"), counted(2, "entry", "entries")
    ('1 record', '0 records', '4,758 chunks', '2 entries')
    """
    return f"{number:,} {noun if number == 1 else plural or noun + 's'}"


def job_pace(job: p.JobInfo | p.IndexingState) -> str:
    """A job's progress as a person reads it, with what is known of its pace (``rate`` per second and
    ``seconds_left``, as ``jobs`` and ``rag status`` send them); ``unit`` defaults to chunks.

    >>> job_pace(p.IndexingState(job_id=1, background=True, done=12, total=40, rate=3.84, seconds_left=7.3))
    '12/40 chunks, 3.8 per second, about 7 s left'
    >>> job_pace(p.IndexingState(job_id=1, background=True, done=0, total=None))
    '0/? chunks'
    """
    total = "?" if job.total is None else str(job.total)
    unit = job.unit if isinstance(job, p.JobInfo) and job.unit else "chunks"
    text = f"{job.done}/{total} {unit}"
    if job.rate:
        text += f", {plain_decimal(job.rate, 2)} per second"
    left = job.seconds_left
    if left is not None:
        text += f", about {about(left)} left"
    return text


def mebibytes(size: int) -> str:
    """A size in bytes as MiB (2**20 bytes), the one unit sizes are shown in: ``"201 MiB"``, ``"0.0041 MiB"``."""
    return f"{plain_decimal(size / 2**20, 3)} MiB"


def one_line(text: str, limit: int = 60) -> str:
    """``text`` (escaped already) on one line, cut to about ``limit`` columns with an ellipsis."""
    flat = " ".join(text.split())
    out: list[str] = []
    width = 0
    for char in flat:
        width += display_width(char)
        if width > limit:
            return "".join(out) + "…"
        out.append(char)
    return "".join(out)


def import_exit_status(report: p.IngestReport | p.WatchReport, went_in: Collection[p.IngestStatus]) -> int:
    """The exit status of an import (``rag ingest``, ``rag watch``): 3 (partial) when the vault is now over an
    index limit (said on stderr: the cards are stored all the same) or when some files were refused and others have
    a status in ``went_in``; 1 when every file was refused or is otherwise not in; 0 when none was refused."""
    over = report.over_limit
    if over is not None:
        click.echo(f"error: {escape(over.code)}: the cards are stored, but {escape(over.message)}", err=True)
        return EXIT_PARTIAL
    statuses = [result.status for result in report.results]
    if "refused" not in statuses:
        return 0
    return EXIT_PARTIAL if any(status in went_in for status in statuses) else EXIT_ERROR

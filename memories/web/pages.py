"""The pages of ``memories web`` (server-rendered; every form works without JavaScript) and their actions.

Each page asks the daemon what it shows, as the CLI does; a daemon error is shown as its code and message on the
page (with an HTTP status for its kind), never a traceback, and the server stays up whatever the daemon does.
Query parameters and form fields become requests through :func:`msgspec.convert`, so the protocol's own limits
judge them (``invalid_argument`` otherwise).
"""

from __future__ import annotations

import importlib.resources
import urllib.parse
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from memories import protocol as p
from memories.errors import MemoriesError
from memories.paths import Home
from memories.web.daemon import call, until_hangup
from memories.web.gate import CSRF_FIELD, SESSION_KEY, cookie_header
from memories.web.render import markdown, marked, page
from memories.web.text import LANGUAGES, pick

R = TypeVar("R")

PER_PAGE = 10
"""Results per search page unless ``limit`` says otherwise."""

_STATUS = {"daemon_not_running": 503, "daemon_unresponsive": 503, "vault_locked": 423, "not_found": 404}


def _status_of(code: str) -> int:
    if code in _STATUS:
        return _STATUS[code]
    if code.endswith("_not_found"):
        return 404
    return 400 if code.startswith("invalid_") or code.endswith("_too_large") else 500


def _language(request: Request) -> str:
    return pick(request.headers.get("accept-language"), request.cookies.get("memories_lang"))


def _render(request: Request, template: str, status: int = 200, **values: Any) -> HTMLResponse:
    session = request.scope[SESSION_KEY]
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    body = page(template, _language(request), csrf=session.csrf, csrf_field=CSRF_FIELD, here=here, **values)
    return HTMLResponse(body, status)


def _error(request: Request, exc: MemoriesError) -> HTMLResponse:
    return _render(request, "error.html", _status_of(exc.code), code=exc.code, message=exc.message)


def _convert(kind: type[R], fields: dict[str, Any]) -> R:
    try:
        return msgspec.convert(fields, type=kind)
    except msgspec.ValidationError as exc:
        raise MemoriesError("invalid_argument", str(exc)) from None


def _int(value: str | None, default: int, name: str) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise MemoriesError("invalid_argument", f"{name}: not a whole number: {value!r}") from None


def _filters(query: Any) -> dict[str, Any]:
    """The search filters of a query string: since, until, tag (repeated or comma-separated), kind, source and
    meta (``KEY=VALUE``, repeated or one a line)."""
    tags = [tag.strip() for value in query.getlist("tag") for tag in value.split(",") if tag.strip()]
    meta: dict[str, str] = {}
    for value in query.getlist("meta"):
        for line in value.splitlines():
            if line.strip():
                key, sep, val = line.partition("=")
                if not sep or not key.strip():
                    raise MemoriesError("invalid_argument", f"meta: expected KEY=VALUE, got {line!r}")
                meta[key.strip()] = val.strip()
    found: dict[str, Any] = {"tags": tags, "meta": meta}
    for name in ("since", "until", "kind", "source"):
        if query.get(name):
            found[name] = query.get(name)
    return found


async def _vaults(home: Home) -> list[p.VaultInfo]:
    return (await call(home, p.VaultList())).result.vaults


class Pages:
    """The routes over the daemon of ``home``."""

    def __init__(self, home: Home) -> None:
        self.home = home

    def app(self) -> Starlette:
        """The Starlette app of the pages (the :class:`~memories.web.gate.Gate` goes in front of it)."""
        routes = [
            Route("/", self.root),
            Route("/search", self.search),
            Route("/note", self.note),
            Route("/ask", self.ask, methods=["GET", "POST"]),
            Route("/status", self.status),
            Route("/jobs/cancel", self.cancel_job, methods=["POST"]),
            Route("/watch", self.watch, methods=["POST"]),
            Route("/grants/revoke", self.revoke, methods=["POST"]),
            Route("/language", self.language),
            Route("/web.css", self.stylesheet),
            Route("/web.js", self.script),
        ]
        return Starlette(routes=routes)

    async def root(self, request: Request) -> Response:
        return RedirectResponse("/search", 303)

    async def search(self, request: Request) -> Response:
        query = request.query_params
        try:
            vaults = await _vaults(self.home)
            vault = query.get("vault") or (vaults[0].name if vaults else "")
            limit = _int(query.get("limit"), PER_PAGE, "limit")
            number = max(1, _int(query.get("page"), 1, "page"))
            values: dict[str, Any] = {"vaults": vaults, "vault": vault, "params": query, "number": number}
            text = query.get("q", "")
            if not text.strip() or not vault:
                return _render(request, "search.html", report=None, pieces=[], explained={}, **values)
            fields: dict[str, Any] = {"vault": vault, "query": text, **_filters(query)}
            if query.get("mode"):
                fields["mode"] = query.get("mode")
            if query.get("match_mode"):
                fields["match_mode"] = query.get("match_mode")
            wanted = _convert(p.RagSearch, {**fields, "limit": limit, "highlight": True})
            fields["limit"] = min(limit * number, p.MAX_RESULTS)
            answer = await call(self.home, _convert(p.RagSearch, {**fields, "highlight": True}))
            report = answer.result
            shown = report.results[(number - 1) * wanted.limit : number * wanted.limit]
            explained: dict[str, p.ExplainedChunk] = {}
            if query.get("why"):
                account = await call(self.home, _convert(p.RagExplain, fields))
                explained = {chunk.chunk_hash: chunk for chunk in account.result.results}
            pieces = [(hit, marked(hit.text, hit.highlights)) for hit in shown]
            more = len(report.results) > number * wanted.limit and fields["limit"] < p.MAX_RESULTS
            return _render(
                request,
                "search.html",
                report=report,
                pieces=pieces,
                explained=explained,
                warnings=answer.warnings,
                more=more,
                page_url=lambda n: "/search?" + _with(query, page=str(n)),
                why_url="/search?" + _with(query, why="1"),
                **values,
            )
        except MemoriesError as exc:
            return _error(request, exc)

    async def note(self, request: Request) -> Response:
        query = request.query_params
        try:
            fields: dict[str, Any] = {"vault": query.get("vault", ""), "id": query.get("id", "")}
            if query.get("revision"):
                fields["revision"] = _int(query.get("revision"), 0, "revision")
            record = (await call(self.home, _convert(p.MemoryRead, fields))).result
            body = record.body.encode("utf-8")
            start = _int(query.get("start"), -1, "start")
            end = _int(query.get("end"), -1, "end")
            parts: list[tuple[str, bool]]
            if 0 <= start < end <= len(body):
                cut = [body[:start], body[start:end], body[end:]]
                parts = [(markdown(piece.decode("utf-8", "replace")), index == 1) for index, piece in enumerate(cut)]
            else:
                parts = [(markdown(record.body), False)]
            return _render(request, "note.html", record=record, vault=fields["vault"], parts=parts)
        except MemoriesError as exc:
            return _error(request, exc)

    async def ask(self, request: Request) -> Response:
        try:
            vaults = await _vaults(self.home)
            if request.method == "GET":
                vault = request.query_params.get("vault") or (vaults[0].name if vaults else "")
                return _render(request, "ask.html", vaults=vaults, vault=vault, question="", report=None)
            form = await request.form()
            vault, question = str(form.get("vault", "")), str(form.get("question", ""))
            ask = _convert(p.RagAsk, {"vault": vault, "question": question})
            answer = await until_hangup(self.home, ask, request.receive)
            if answer is None:  # the browser stopped waiting (cancel): the daemon has cancelled the ask job
                return Response(status_code=204)
            return _render(
                request,
                "ask.html",
                vaults=vaults,
                vault=vault,
                question=question,
                report=answer.result,
                warnings=answer.warnings,
                pieces=_cited(answer.result),
            )
        except MemoriesError as exc:
            return _error(request, exc)

    async def status(self, request: Request) -> Response:
        try:
            daemon = (await call(self.home, p.Status())).result
            vaults = [] if daemon.locked else await _vaults(self.home)
            indexes = [(v.name, (await call(self.home, p.RagStatus(vault=v.name))).result) for v in vaults]
            jobs = (await call(self.home, p.Jobs())).result.jobs
            grants = [] if daemon.locked else (await call(self.home, p.GrantList())).result.grants
            running = any(job.state in ("queued", "running", "cancelling") for job in jobs)
            return _render(
                request, "status.html", daemon=daemon, indexes=indexes, jobs=jobs, grants=grants, running=running
            )
        except MemoriesError as exc:
            return _error(request, exc)

    async def cancel_job(self, request: Request) -> Response:
        form = await request.form()
        return await self._act(request, p.JobCancel(job_id=_int(str(form.get("job", "")), -1, "job")))

    async def watch(self, request: Request) -> Response:
        form = await request.form()
        fields = {"vault": form.get("vault", ""), "folder": form.get("folder", ""), "resume": True}
        if form.get("accept_deletions"):
            fields["accept_deletions"] = True
        return await self._act(request, _convert(p.RagWatch, fields))

    async def revoke(self, request: Request) -> Response:
        form = await request.form()
        return await self._act(request, _convert(p.GrantRevoke, {"id": form.get("grant", "")}))

    async def _act(self, request: Request, action: p.ClientRequest[Any]) -> Response:
        try:
            await call(self.home, action)
        except MemoriesError as exc:
            return _error(request, exc)
        return RedirectResponse("/status", 303)

    async def language(self, request: Request) -> Response:
        chosen = request.query_params.get("to", "")
        back = request.query_params.get("back", "/")
        if not back.startswith("/") or back.startswith(("//", "/\\")):
            back = "/"
        response = RedirectResponse(back, 303)
        if chosen in LANGUAGES:
            name, value = cookie_header("memories_lang", chosen)
            response.raw_headers.append((name, value))
        return response

    async def stylesheet(self, request: Request) -> Response:
        return _static("web.css", "text/css; charset=utf-8")

    async def script(self, request: Request) -> Response:
        return _static("web.js", "text/javascript; charset=utf-8")


def _static(name: str, media_type: str) -> Response:
    data = importlib.resources.files("memories.web").joinpath("static", name).read_bytes()
    return Response(data, media_type=media_type)


def _with(query: Any, **changes: str) -> str:
    pairs = [(key, value) for key, value in query.multi_items() if key not in changes]
    return urllib.parse.urlencode(pairs + list(changes.items()))


def _cited(report: p.AskReport) -> list[tuple[str, str | None]]:
    """The answer cut into text and ``[S#]`` citations: ``(text, label)`` pieces, ``label`` set on a citation."""
    labels = {citation.label for citation in report.citations}
    pieces: list[tuple[str, str | None]] = []
    rest = report.answer or ""
    while rest:
        start = rest.find("[S")
        end = rest.find("]", start) if start >= 0 else -1
        label = rest[start + 1 : end] if end > start >= 0 else ""
        if label not in labels:
            cut = start + 2 if start >= 0 else len(rest)
            pieces.append((rest[:cut], None))
            rest = rest[cut:]
            continue
        pieces.append((rest[:start], None))
        pieces.append((f"[{label}]", label))
        rest = rest[end + 1 :]
    return [piece for piece in pieces if piece[0]]

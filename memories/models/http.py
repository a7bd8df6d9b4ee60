"""One httpx client factory and the retry and redirect policy of ``[rag.http]`` (R-37 … R-39).

Every outbound request of ``workers.remote`` goes through three pieces, from the outside in::

    client = build_client(config)       proxies, TLS roots, timeouts; never follows a redirect by itself
    with_retries(attempt, ...)          1 + retries attempts; backoff or Retry-After; deadline; cancel
      attempt(): open_response(...)     one attempt: redirects by policy; status -> error or TransientFailure

Which URLs may be requested, redirected to or used as proxies is :mod:`memories.urls` (the URL policy).

Proxy choice, per request (R-38):

1. a loopback target (``127.0.0.0/8``, ``::1``, ``localhost``) connects directly, whatever the proxy settings;
2. else an explicit ``proxy_url`` carries it;
3. else, with ``use_env_proxy``, the environment as the standard library reads it
   (:func:`urllib.request.getproxies_environment`: ``https_proxy``, ``http_proxy``, ``all_proxy`` and
   ``no_proxy`` in either case, lower case first): the scheme's proxy, or ``ALL_PROXY``, unless ``NO_PROXY``
   names the host (curl's suffix rules, ``*`` = everything); credentials in these URLs are allowed;
4. else directly.

httpx's ``mounts`` match hosts by exact name or ``*.`` suffix and cannot express ``127.0.0.0/8``, so the
routing is a small transport (:class:`_ProxyRouter`) in front of one direct and one transport per proxy URL.

SOCKS: httpx 0.28 passes ``socks5://`` and ``socks5h://`` proxies to httpcore's ``SOCKSProxy``, which sends a
host name to the proxy as a SOCKS5 domain-name address (ATYP 3, RFC 1928 section 5) and never resolves it
locally. So ``socks5h://`` has real remote DNS (a name only the proxy can resolve works), and ``socks5://``
resolves remotely too; an IP literal is sent as an address. TLS to the target (SNI, certificate check)
always uses the URL's host name.
"""

from __future__ import annotations

import email.utils
import ssl
import time
import urllib.request
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

import certifi
import httpx

from memories import __version__
from memories.config import HttpConfig
from memories.errors import MemoriesError
from memories.urls import is_loopback_host, proxy_problem, redirect_problem, target_problem

T = TypeVar("T")

CancelCheck = Callable[[], bool]
"""Returns True once the job is cancelled; polled between attempts, during waits and between chunks."""

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Statuses retried (R-39); 401/403 give ``auth_failed`` and other 4xx ``upstream_error``, not retried."""

MAX_RETRY_WAIT_SECONDS = 30.0
"""Longest wait between attempts, for backoff and Retry-After alike (R-39: "Retry-After seconds up to 30")."""

USER_AGENT = f"memories/{__version__}"
"""Sent with every request; names the product and version, nothing about the user or the machine."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SLEEP_SLICE_SECONDS = 0.05


@dataclass(frozen=True)
class RedirectPolicy:
    """How many redirects one attempt follows (R-39).

    Every followed redirect must pass :func:`memories.urls.redirect_problem`: from ``https://`` only to
    ``https://`` (any host; a signed query string is fine), from a plain ``http://`` loopback URL to ``http://``
    loopback or ``https://``; never credentials.
    """

    max_redirects: int


DOWNLOAD_REDIRECTS = RedirectPolicy(5)
"""For model downloads: Hugging Face answers ``resolve`` URLs with a redirect to a signed content-host URL."""


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` extra attempts after the first, waiting ``backoff_ms * 2**(n-1)`` ms before retry ``n``.

    The wait before retry ``n`` (1-based) is the larger of that backoff and the server's ``Retry-After``,
    capped at :data:`MAX_RETRY_WAIT_SECONDS`; with the defaults (2 retries, 500 ms) the waits are 0.5 s, 1 s.
    """

    retries: int = 2
    backoff_ms: int = 500

    @classmethod
    def from_config(cls, config: HttpConfig) -> RetryPolicy:
        """The policy of ``[rag.http]``."""
        return cls(retries=config.retries, backoff_ms=config.backoff_ms)

    def wait_seconds(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``retry`` (1-based).

        >>> RetryPolicy(retries=3, backoff_ms=500).wait_seconds(3)
        2.0
        >>> RetryPolicy(retries=3, backoff_ms=10).wait_seconds(2, retry_after=1.0)
        1.0
        """
        backoff = self.backoff_ms / 1000 * 2 ** (retry - 1)
        return min(MAX_RETRY_WAIT_SECONDS, max(backoff, retry_after or 0.0))


@dataclass(frozen=True)
class Deadline:
    """A budget ending at ``at`` (seconds on :func:`time.monotonic`); after it, :meth:`check` raises ``code``.

    Downloads use one per file (``download_timeout_seconds``, code ``download_timeout``); other calls may pass
    the job's budget (``budget_exceeded``).
    """

    at: float
    code: str
    message: str

    @classmethod
    def after(cls, seconds: float, code: str, message: str) -> Deadline:
        """A deadline ``seconds`` from now."""
        return cls(time.monotonic() + seconds, code, message)

    def remaining(self) -> float:
        """Seconds left, never below 0."""
        return max(0.0, self.at - time.monotonic())

    def check(self) -> None:
        """Fail once the deadline has passed.

        Raises:
            MemoriesError: ``code``, with ``message``.
        """
        if time.monotonic() >= self.at:
            raise MemoriesError(self.code, self.message)


class TransientFailure(Exception):
    """One attempt failed in a way that is retried: a connection or read failure, a 429/5xx, a body cut short.

    ``reason`` is one line for the final ``upstream_unavailable`` message (no URL, no query string);
    ``retry_after`` is the server's ``Retry-After`` in seconds, if it sent one.
    """

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after


def check_cancelled(cancelled: CancelCheck | None) -> None:
    """Fail when ``cancelled()`` says the job is cancelled.

    Raises:
        MemoriesError: ``cancelled``.
    """
    if cancelled is not None and cancelled():
        raise MemoriesError("cancelled", "the model transfer was cancelled")


def wait(seconds: float, *, deadline: Deadline | None = None, cancelled: CancelCheck | None = None) -> None:
    """Sleep ``seconds`` in slices of 50 ms, checking ``cancelled`` and ``deadline`` after each slice.

    The full wait elapses on :func:`time.monotonic` before it returns: a server measuring the gap between two
    attempts sees at least ``seconds``.

    Raises:
        MemoriesError: ``cancelled``, or the deadline's code.
    """
    end = time.monotonic() + seconds
    while True:
        check_cancelled(cancelled)
        if deadline is not None:
            deadline.check()
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(_SLEEP_SLICE_SECONDS, left))


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` (RFC 9110 section 10.2.3) in seconds from now: delay-seconds or an HTTP-date.

    ``None`` for a missing or unreadable value; a date in the past gives 0.0.

    >>> parse_retry_after("1")
    1.0
    >>> parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT", now=datetime(1994, 11, 6, 8, 49, 30, tzinfo=UTC))
    7.0
    """
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def shown_url(url: httpx.URL | str) -> str:
    """``url`` without credentials, query string and fragment, for messages: a signed query is a short-lived
    secret, and a refused redirect target may carry a password."""
    return str(httpx.URL(url).copy_with(userinfo=b"", query=None, fragment=None))


def make_ssl_context(ca_bundle: str | None) -> ssl.SSLContext:
    """A verifying TLS context: certifi's roots, plus the PEM file ``ca_bundle`` when given.

    Verification and host-name checks are always on (R-38); ``ca_bundle`` adds roots (a TLS-intercepting
    corporate proxy, a test CA), it never replaces certifi's.

    Raises:
        MemoriesError: ``invalid_config`` when ``ca_bundle`` cannot be read as PEM certificates.
    """
    context = ssl.create_default_context(cafile=certifi.where())
    if ca_bundle is not None:
        try:
            context.load_verify_locations(cafile=ca_bundle)
        except (OSError, ssl.SSLError) as exc:
            raise MemoriesError(
                "invalid_config", f"`rag.http.ca_bundle` {ca_bundle} is not a readable PEM bundle: {exc}"
            ) from None
    return context


def build_client(config: HttpConfig) -> httpx.Client:
    """The one ``httpx.Client`` factory for remote I/O: proxies, TLS and timeouts from ``[rag.http]``.

    Timeouts: ``connect_timeout_seconds`` to connect, ``timeout_seconds`` for each read, write and pool
    wait (a per-read limit, not a total). Redirects are never followed by httpx: :func:`open_response`
    applies a :class:`RedirectPolicy`. The environment's proxies are read once, here. Use the client as a
    context manager.

    Raises:
        MemoriesError: ``invalid_config`` for an unreadable ``ca_bundle`` or an environment proxy URL that
            :func:`memories.urls.proxy_problem` refuses (a scheme other than http, https, socks5 or socks5h, or
            no host).
    """
    context = make_ssl_context(config.ca_bundle)
    direct = httpx.HTTPTransport(verify=context, trust_env=False)
    explicit = _proxy_transport(config.proxy_url, context) if config.proxy_url else None
    environment: dict[str, str] = {}
    by_scheme: dict[str, httpx.HTTPTransport] = {}
    if explicit is None and config.use_env_proxy:
        environment = urllib.request.getproxies_environment()
        by_url: dict[str, httpx.HTTPTransport] = {}
        for scheme in ("https", "http", "all"):
            url = environment.get(scheme)
            if not url:
                continue
            if "://" not in url:
                url = f"http://{url}"
            _check_env_proxy(url, scheme)
            if url not in by_url:
                by_url[url] = _proxy_transport(url, context)
            by_scheme[scheme] = by_url[url]
    router = _ProxyRouter(direct, explicit, by_scheme, environment)
    timeout = httpx.Timeout(config.timeout_seconds, connect=config.connect_timeout_seconds)
    return httpx.Client(
        transport=router,
        timeout=timeout,
        follow_redirects=False,
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )


def open_response(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    redirects: RedirectPolicy,
    headers: Mapping[str, str] | None = None,
    content: bytes | None = None,
    deadline: Deadline | None = None,
    passthrough: Collection[int] = (),
) -> httpx.Response:
    """One attempt: send, follow redirects by ``redirects``, and return the final response, streamed and open.

    The caller closes the response (``contextlib.closing``). A 2xx, or a status in ``passthrough``, is returned;
    every other status becomes an exception. Each request's timeouts are cut to what is left of
    ``deadline``. Headers (``Range`` included) are sent again to each redirect target.

    Raises:
        TransientFailure: 429, 500, 502, 503 or 504 (with ``Retry-After``, if any).
        httpx.TransportError: connection, TLS, proxy or read failures (:func:`with_retries` retries them).
        MemoriesError: ``auth_failed`` (401/403), ``upstream_error`` (other 4xx/5xx, a 3xx without
            ``Location``), ``unsafe_redirect`` (a redirect :func:`memories.urls.redirect_problem` refuses, such as
            https:// to http://, or more than ``redirects.max_redirects``), ``invalid_argument`` (``url`` itself
            fails :func:`memories.urls.target_problem`).
    """
    current = httpx.URL(url)
    # The policy reads httpx's normalized URL, so it sees the host httpx connects to (a backslash before "@"
    # is already percent-encoded into the userinfo there).
    problem = target_problem(str(current))
    if problem:
        raise MemoriesError("invalid_argument", f"{shown_url(current)}: refused by the URL policy ({problem})")
    followed = 0
    while True:
        request = client.build_request(
            method, current, headers=headers, content=content, timeout=_cut_timeout(client.timeout, deadline)
        )
        response = client.send(request, stream=True)
        status = response.status_code
        if status in _REDIRECT_STATUSES:
            location = response.headers.get("location")
            response.close()
            if location is None:
                raise MemoriesError(
                    "upstream_error", f"{shown_url(current)} answered HTTP {status} without a Location header"
                )
            target = current.join(location)
            problem = redirect_problem(str(current), str(target))
            if problem:
                raise MemoriesError(
                    "unsafe_redirect",
                    f"{shown_url(url)} redirected to {shown_url(target)}: refused ({problem})",
                    {"status": status, "target": shown_url(target)},
                )
            followed += 1
            if followed > redirects.max_redirects:
                raise MemoriesError(
                    "unsafe_redirect",
                    f"{shown_url(url)} redirected more than {redirects.max_redirects} times",
                    {"status": status},
                )
            current = target
            continue
        if 200 <= status < 300 or status in passthrough:
            return response
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        response.close()
        raise _status_failure(status, retry_after, url, current)


def with_retries(
    attempt: Callable[[], T],
    *,
    policy: RetryPolicy,
    what: str,
    deadline: Deadline | None = None,
    cancelled: CancelCheck | None = None,
) -> T:
    """Run ``attempt`` up to ``1 + policy.retries`` times and return its result.

    Retried: :class:`TransientFailure` and httpx's timeout, network, remote-protocol and proxy errors.
    Anything else (a :class:`MemoriesError` such as ``auth_failed``) passes through at once. Cancellation
    and ``deadline`` are checked before each attempt and during each wait; a wait that would end past the
    deadline is not started.

    Args:
        what: names the operation in messages, e.g. ``"download of https://host/path"``.

    Raises:
        MemoriesError: ``upstream_unavailable`` once the retries are used up (how many attempts, the last
            failure); ``cancelled``; the deadline's code.
    """
    failures = 0
    while True:
        check_cancelled(cancelled)
        if deadline is not None:
            deadline.check()
        try:
            return attempt()
        except TransientFailure as failure:
            last = failure
        except (
            httpx.TimeoutException,
            httpx.NetworkError,
            httpx.RemoteProtocolError,
            httpx.ProxyError,
        ) as exc:
            last = TransientFailure(_describe(exc))
        failures += 1
        check_cancelled(cancelled)
        if deadline is not None:
            deadline.check()
        if failures > policy.retries:
            raise MemoriesError(
                "upstream_unavailable",
                f"{what}: failed after {failures} attempt{'s' if failures > 1 else ''} "
                f"(retries = {policy.retries}); last: {last.reason}",
                {"attempts": failures, "last": last.reason},
            )
        delay = policy.wait_seconds(failures, last.retry_after)
        if deadline is not None and delay >= deadline.remaining():
            raise MemoriesError(
                deadline.code,
                f"{deadline.message} (the next retry would start after it; last: {last.reason})",
            )
        wait(delay, deadline=deadline, cancelled=cancelled)


class _ProxyRouter(httpx.BaseTransport):
    """Sends each request directly or through a proxy transport, by the rules in the module docstring."""

    def __init__(
        self,
        direct: httpx.BaseTransport,
        explicit: httpx.BaseTransport | None,
        by_scheme: Mapping[str, httpx.BaseTransport],
        environment: Mapping[str, str],
    ) -> None:
        self._direct = direct
        self._explicit = explicit
        self._by_scheme = dict(by_scheme)
        self._environment = dict(environment)

    def _route(self, url: httpx.URL) -> httpx.BaseTransport:
        if is_loopback_host(url.host):
            return self._direct
        if self._explicit is not None:
            return self._explicit
        proxy = self._by_scheme.get(url.scheme) or self._by_scheme.get("all")
        if proxy is None:
            return self._direct
        host = f"{url.host}:{url.port}" if url.port else url.host
        if urllib.request.proxy_bypass_environment(host, self._environment):
            return self._direct
        return proxy

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._route(request.url).handle_request(request)

    def close(self) -> None:
        transports = {id(t): t for t in (self._direct, self._explicit, *self._by_scheme.values()) if t}
        for transport in transports.values():
            transport.close()


def _proxy_transport(url: str, context: ssl.SSLContext) -> httpx.HTTPTransport:
    # An https:// proxy's own certificate is checked with the same roots as the targets (httpcore refuses a
    # proxy TLS context for any other proxy scheme).
    proxy_context = context if url.lower().startswith("https://") else None
    proxy = httpx.Proxy(url, ssl_context=proxy_context)
    return httpx.HTTPTransport(verify=context, proxy=proxy, trust_env=False)


def _check_env_proxy(url: str, scheme: str) -> None:
    problem = proxy_problem(url, credentials_allowed=True)
    if problem:
        # No URL in the message: the variable may hold the proxy's password.
        raise MemoriesError("invalid_config", f"the {scheme.upper()}_PROXY environment variable refused: {problem}")


def _cut_timeout(base: httpx.Timeout, deadline: Deadline | None) -> httpx.Timeout:
    if deadline is None:
        return base
    # A socket timeout of 0 means non-blocking mode, not "expired"; keep it positive so the read fails as a timeout.
    left = max(deadline.remaining(), 0.001)

    def cut(value: float | None) -> float:
        return left if value is None else min(value, left)

    return httpx.Timeout(connect=cut(base.connect), read=cut(base.read), write=cut(base.write), pool=cut(base.pool))


def _status_failure(
    status: int, retry_after: float | None, url: str, final: httpx.URL
) -> TransientFailure | MemoriesError:
    where = shown_url(url)
    if final != httpx.URL(url):
        where += f" (redirected to {final.host})"
    if status in RETRY_STATUSES:
        return TransientFailure(f"HTTP {status}", retry_after)
    if status in (401, 403):
        return MemoriesError("auth_failed", f"{where} answered HTTP {status}: access refused", {"status": status})
    return MemoriesError("upstream_error", f"{where} answered HTTP {status}", {"status": status})


def _describe(exc: Exception) -> str:
    text = str(exc)
    if isinstance(exc, httpx.TimeoutException) and not text:
        text = "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__

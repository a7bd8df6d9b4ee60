"""One httpx client factory and the redirect policy of ``[rag.http]`` (R-37 … R-39).

Every outbound request of ``workers.remote`` goes through three pieces, from the outside in::

    client = build_client(config)       proxies, TLS roots, timeouts; never follows a redirect by itself
    with_retries(attempt, ...)          1 + retries attempts; backoff or server delay; deadline; cancel
      attempt(): open_response(...)     one attempt: redirects by policy; status -> error or TransientFailure

Retries are :mod:`memories.http.retry`; which URLs may be requested, redirected to or used as proxies is
:mod:`memories.http.urls` (the URL policy).

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

import ssl
import urllib.request
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import certifi
import httpx

from memories import __version__
from memories.config import HttpConfig
from memories.errors import MemoriesError
from memories.http.retry import RETRY_STATUSES, Deadline, TransientFailure, parse_retry_after
from memories.http.urls import is_loopback_host, proxy_problem, redirect_problem, target_problem

USER_AGENT = f"memories/{__version__}"
"""Sent with every request; names the product and version, nothing about the user or the machine."""

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class RedirectPolicy:
    """How many redirects one attempt follows (R-39).

    Every followed redirect must pass :func:`memories.http.urls.redirect_problem`: from ``https://`` only to
    ``https://`` (any host; a signed query string is fine), from a plain ``http://`` loopback URL to ``http://``
    loopback or ``https://``; never credentials.
    """

    max_redirects: int


DOWNLOAD_REDIRECTS = RedirectPolicy(5)
"""For model downloads: Hugging Face answers ``resolve`` URLs with a redirect to a signed content-host URL."""

API_REDIRECTS = RedirectPolicy(0)
"""For model APIs (embeddings, generation, rerank): every redirect is refused (R-39), since a request body that
holds vault text must go only to the configured URL."""


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
            :func:`memories.http.urls.proxy_problem` refuses (a scheme other than http, https, socks5 or socks5h, or
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
            ``Location``), ``unsafe_redirect`` (a redirect :func:`memories.http.urls.redirect_problem` refuses, such as
            https:// to http://, or more than ``redirects.max_redirects``), ``invalid_argument`` (``url`` itself
            fails :func:`memories.http.urls.target_problem`).
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
            if redirects.max_redirects == 0:
                raise MemoriesError(
                    "unsafe_redirect",
                    f"{shown_url(url)} redirected to {shown_url(target)}: model API redirects are refused",
                    {"status": status, "target": shown_url(target)},
                )
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
        # proxy_bypass_environment is urllib's documented-by-use NO_PROXY matcher, missing from typeshed's stubs
        if urllib.request.proxy_bypass_environment(host, self._environment):  # type: ignore[attr-defined]
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
        return TransientFailure(f"HTTP {status}", retry_after, short=str(status))
    if status in (401, 403):
        return MemoriesError("auth_failed", f"{where} answered HTTP {status}: access refused", {"status": status})
    return MemoriesError("upstream_error", f"{where} answered HTTP {status}", {"status": status})

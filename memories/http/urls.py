"""The URL policy (R-31, R-38, R-39): where Memories may send a request, follow a redirect, or reach a proxy.

Standard library only: :mod:`memories.config` checks the configured URLs with it inside the supervisor, which
never imports httpx, and :mod:`memories.http.client` checks every request and redirect target with it. The
rules build on one another::

    target_problem(url)              any request target: https://, or http:// only to a loopback host;
                                     no credentials (a query string is fine: content hosts sign URLs with one)
    endpoint_problem(url)            a configured operation or mirror URL: a target without query or fragment
    redirect_problem(source, target) a redirect: a target, and from https:// only to https://
    proxy_problem(url, ...)          a proxy: http, https, socks5 or socks5h with a host; credentials only
                                     where the caller allows them (the environment, never config.toml)

So a redirect from ``https://`` may go to any ``https://`` host, signed query included, and a plain ``http://``
loopback mirror may redirect to ``http://`` loopback or to ``https://``; a downgrade is refused.

Each check returns ``None`` for an allowed URL, else a short phrase naming the fault, to be framed by the caller
(``"... refused: <phrase>"``). A phrase never repeats the whole URL: a signed query is a short-lived secret.

>>> target_problem("http://127.0.0.1:8080/models/config.json") is None
True
>>> redirect_problem("https://huggingface.co/a", "http://127.0.0.1/a")
'a downgrade from https:// to plain http://'
"""

from __future__ import annotations

import ipaddress
import urllib.parse

PROXY_SCHEMES = ("http", "https", "socks5", "socks5h")
"""Proxy URL schemes httpx can use (``socks5h`` lets the proxy resolve host names); see :mod:`memories.http.client`."""


def is_loopback_host(host: str | None) -> bool:
    """True for ``localhost`` and literal loopback addresses (``127.0.0.0/8``, ``::1``); names never resolve.

    >>> [is_loopback_host(host) for host in ("localhost", "127.0.0.5", "[::1]", "localhost.", "example.com")]
    [True, True, True, False, False]
    """
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def target_problem(url: str) -> str | None:
    """Why ``url`` may not be requested, or ``None``: ``https://`` to any host, ``http://`` only to loopback.

    Credentials in the URL are refused; a query string is allowed (signed content-host URLs carry one).

    >>> target_problem("http://example.com/file")
    'plain http:// to the non-loopback host example.com'
    """
    parts = _split(url)
    if parts is None:
        return "not a valid URL"
    if parts.scheme not in ("https", "http"):
        return f"{_scheme(parts)} (only https://, or http:// to a loopback host)"
    if not parts.hostname:
        return "no host"
    if parts.scheme == "http" and not is_loopback_host(parts.hostname):
        return f"plain http:// to the non-loopback host {parts.hostname}"
    if "@" in parts.netloc:
        return "credentials in the URL"
    return None


def endpoint_problem(url: str) -> str | None:
    """Why ``url`` may not be a configured operation or mirror URL, or ``None``.

    The rules of :func:`target_problem`, and no query string or fragment: paths are appended to the URL, and a
    secret has no place in a configured URL.

    >>> endpoint_problem("https://mirror.example/models?token=abc")
    'a query string or fragment'
    """
    problem = target_problem(url)
    if problem is not None:
        return problem
    parts = urllib.parse.urlsplit(url)  # it parsed in target_problem
    if parts.query or parts.fragment:
        return "a query string or fragment"
    return None


def redirect_problem(source: str, target: str) -> str | None:
    """Why a redirect from ``source`` to ``target`` may not be followed, or ``None`` (R-39).

    ``target`` must pass :func:`target_problem`, and a redirect from ``https://`` must stay on ``https://``;
    only a plain ``http://`` (so loopback) source may redirect to ``http://`` loopback. ``source`` is the URL
    that answered with the redirect, so a chain that reached ``https://`` never drops back.

    >>> redirect_problem("http://127.0.0.1/a", "https://cdn.example/a?signature=abc") is None
    True
    """
    problem = target_problem(target)
    if problem is not None:
        return problem
    source_parts = _split(source)
    from_plain_http = source_parts is not None and source_parts.scheme == "http"
    # target passed target_problem, so it parses, and http:// there names a loopback host.
    if urllib.parse.urlsplit(target).scheme == "http" and not from_plain_http:
        return "a downgrade from https:// to plain http://"
    return None


def proxy_problem(url: str, *, credentials_allowed: bool) -> str | None:
    """Why ``url`` may not be a proxy, or ``None``: scheme in :data:`PROXY_SCHEMES` and a host.

    Args:
        credentials_allowed: True for a proxy from the environment (``HTTPS_PROXY``, ``ALL_PROXY``…), False for
            ``rag.http.proxy_url``, since config.toml never holds secrets.

    >>> proxy_problem("socks5h://127.0.0.1:1080", credentials_allowed=False) is None
    True
    """
    parts = _split(url)
    if parts is None:
        return "not a valid URL"
    if parts.scheme not in PROXY_SCHEMES:
        return f"{_scheme(parts)} (supported: {', '.join(PROXY_SCHEMES)})"
    if not parts.hostname:
        return "no host"
    if "@" in parts.netloc and not credentials_allowed:
        return (
            "credentials in the URL; put a proxy URL with credentials in HTTPS_PROXY or ALL_PROXY in the "
            "daemon's environment instead"
        )
    return None


def _split(url: str) -> urllib.parse.SplitResult | None:
    """``url`` split (scheme and host lowercased), or ``None`` when it cannot be parsed (an unclosed ``[``)."""
    try:
        return urllib.parse.urlsplit(url)
    except ValueError:
        return None


def _scheme(parts: urllib.parse.SplitResult) -> str:
    return f"the {parts.scheme}:// scheme" if parts.scheme else "no scheme"

"""Retries, waits and deadlines of ``[rag.http]`` (R-39): which failures are tried again, and for how long.

::

    with_retries(attempt, policy=RetryPolicy.from_config(http), what="...", deadline=..., cancelled=...)
        1 + retries attempts of attempt(); TransientFailure and httpx's transport errors are retried
        the wait before retry n: max(backoff_ms * 2**(n-1), the server's delay), at most 30 s
        a server delay over 30 s (a quota that will not reset soon) ends the call at once: upstream_unavailable

A server states its delay in a ``Retry-After`` header (:func:`parse_retry_after`: seconds or an HTTP date) or, for
Gemini, in the error body's ``google.rpc.RetryInfo`` detail (:func:`parse_retry_delay`: a duration such as
``"17s"``). Cancellation and the deadline are checked before every attempt and during every wait.
"""

from __future__ import annotations

import email.utils
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import httpx

from memories.config import HttpConfig
from memories.errors import MemoriesError

T = TypeVar("T")

CancelCheck = Callable[[], bool]
"""Returns True once the job is cancelled; polled between attempts, during waits and between chunks."""

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
"""Statuses retried (R-39); 401/403 give ``auth_failed`` and other 4xx ``upstream_error``, not retried."""

MAX_RETRY_WAIT_SECONDS = 30.0
"""Longest wait between attempts, for backoff and server delays alike (R-39: "Retry-After seconds up to 30")."""

RETRY_INFO_TYPE = "type.googleapis.com/google.rpc.RetryInfo"
"""``@type`` of the error detail in which Google APIs say how long to wait (``google/rpc/error_details.proto``)."""

_SLEEP_SLICE_SECONDS = 0.05
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)s$")


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` extra attempts after the first, waiting ``backoff_ms * 2**(n-1)`` ms before retry ``n``.

    The wait before retry ``n`` (1-based) is the larger of that backoff and the server's ``Retry-After``,
    capped at :data:`MAX_RETRY_WAIT_SECONDS`; with the defaults (2 retries, 500 ms) the waits are 0.5 s, 1 s.
    """

    retries: int = 2
    backoff_ms: int = 500
    read_timeout_seconds: float | None = None
    """``rag.http.timeout_seconds``, named in the message of a read timeout (``None``: not from a config)."""
    connect_timeout_seconds: float | None = None
    """``rag.http.connect_timeout_seconds``, named in the message of a connect timeout."""

    @classmethod
    def from_config(cls, config: HttpConfig) -> RetryPolicy:
        """The policy of ``[rag.http]``."""
        return cls(
            retries=config.retries,
            backoff_ms=config.backoff_ms,
            read_timeout_seconds=config.timeout_seconds,
            connect_timeout_seconds=config.connect_timeout_seconds,
        )

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
    """One attempt failed in a way that is retried: a connection or read failure, a 429/5xx, a body cut short, or
    a request the caller changes in answer to the server's refusal (a generation request asking for less
    structured output).

    ``reason`` is one line for the final ``upstream_unavailable`` message (no URL, no query string);
    ``retry_after`` is the server's stated delay in seconds (``Retry-After``, Gemini's ``RetryInfo``), if any;
    ``short`` names the failure in the retry note (``"429"``, ``"read timeout"``; default ``reason``). A failure
    retried ``at_once`` is tried again without a wait (the next request differs; waiting would change nothing),
    and ``final``, when given, is raised as it is once no retry is left, instead of ``upstream_unavailable`` (the
    server's own refusal says more than "failed after 1 attempt").
    """

    def __init__(
        self,
        reason: str,
        retry_after: float | None = None,
        *,
        short: str | None = None,
        at_once: bool = False,
        final: MemoriesError | None = None,
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after = retry_after
        self.short = short or reason
        self.at_once = at_once
        self.final = final


def check_cancelled(cancelled: CancelCheck | None) -> None:
    """Fail when ``cancelled()`` says the job is cancelled.

    Raises:
        MemoriesError: ``cancelled``.
    """
    if cancelled is not None and cancelled():
        raise MemoriesError("cancelled", "the request was cancelled")


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


def parse_retry_delay(error_body: Any) -> float | None:
    """Gemini's delay in seconds from a decoded JSON error body, or ``None``.

    Google APIs put a ``google.rpc.RetryInfo`` detail in ``error.details[]`` with ``retryDelay`` as a protobuf
    JSON duration (``"17s"``, ``"0.5s"``).

    >>> parse_retry_delay({"error": {"details": [{"@type": RETRY_INFO_TYPE, "retryDelay": "17s"}]}})
    17.0
    >>> parse_retry_delay({"error": {"message": "quota"}}) is None
    True
    """
    error = error_body.get("error") if isinstance(error_body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == RETRY_INFO_TYPE:
            delay = detail.get("retryDelay")
            match = _DURATION.match(delay.strip()) if isinstance(delay, str) else None
            if match:
                return float(match.group(1))
    return None


def with_retries(
    attempt: Callable[[], T],
    *,
    policy: RetryPolicy,
    what: str,
    deadline: Deadline | None = None,
    cancelled: CancelCheck | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> T:
    """Run ``attempt`` up to ``1 + policy.retries`` times and return its result.

    Retried: :class:`TransientFailure` and httpx's timeout, network, remote-protocol and proxy errors.
    Anything else (a :class:`MemoriesError` such as ``auth_failed``) passes through at once. Cancellation
    and ``deadline`` are checked before each attempt and during each wait; a wait that would end past the
    deadline is not started, and neither is one for a server delay over :data:`MAX_RETRY_WAIT_SECONDS`.

    Args:
        what: names the operation in messages, e.g. ``"download of https://host/path"``.
        on_retry: told before each wait, in one line for a person (:func:`retry_note`: ``"retrying 2/3 after
            429, waiting 4 s"``; a progress line shows it).

    Raises:
        MemoriesError: ``upstream_unavailable`` once the retries are used up (how many attempts, the last
            failure), or at once for a server delay over the cap (``details.retry_after`` in seconds); the last
            failure's ``final`` error instead when it has one; ``cancelled``; the deadline's code.
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
            last = TransientFailure(_describe(exc, policy), short=_short(exc))
        failures += 1
        check_cancelled(cancelled)
        if deadline is not None:
            deadline.check()
        if failures > policy.retries:
            if last.final is not None:
                raise last.final
            raise MemoriesError(
                "upstream_unavailable",
                f"{what}: failed after {failures} attempt{'s' if failures > 1 else ''} "
                f"(retries = {policy.retries}); last: {last.reason}",
                {"attempts": failures, "last": last.reason},
            )
        if last.retry_after is not None and last.retry_after > MAX_RETRY_WAIT_SECONDS:
            raise MemoriesError(
                "upstream_unavailable",
                f"{what}: the service asks to wait {last.retry_after:g} s ({last.reason}), longer than the "
                f"{MAX_RETRY_WAIT_SECONDS:g} s a retry may wait; try again later",
                {"attempts": failures, "last": last.reason, "retry_after": last.retry_after},
            )
        delay = 0.0 if last.at_once else policy.wait_seconds(failures, last.retry_after)
        if deadline is not None and delay >= deadline.remaining():
            raise MemoriesError(
                deadline.code,
                f"{deadline.message} (the next retry would start after it; last: {last.reason})",
            )
        if on_retry is not None:
            on_retry(retry_note(failures + 1, policy.retries + 1, last.short, None if last.at_once else delay))
        wait(delay, deadline=deadline, cancelled=cancelled)


def retry_note(attempt: int, attempts: int, after: str, delay: float | None) -> str:
    """The one line a person sees before attempt ``attempt`` of ``attempts``: what failed, and the wait in
    seconds (``None``: the next attempt starts at once).

    >>> retry_note(2, 3, "429", 4.0)
    'retrying 2/3 after 429, waiting 4 s'
    >>> retry_note(3, 3, "read timeout", 0.5)
    'retrying 3/3 after read timeout, waiting 0.5 s'
    """
    note = f"retrying {attempt}/{attempts} after {after}"
    return note if delay is None else f"{note}, waiting {delay:g} s"


def _describe(exc: Exception, policy: RetryPolicy) -> str:
    """One line for a transport failure; a timeout names the setting that bounded it."""
    if isinstance(exc, httpx.ReadTimeout) and policy.read_timeout_seconds is not None:
        return f"read timeout: no data for {policy.read_timeout_seconds:g} s (rag.http.timeout_seconds)"
    if isinstance(exc, httpx.ConnectTimeout) and policy.connect_timeout_seconds is not None:
        return f"connect timeout after {policy.connect_timeout_seconds:g} s (rag.http.connect_timeout_seconds)"
    text = str(exc)
    if isinstance(exc, httpx.TimeoutException) and not text:
        text = "timed out"
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _short(exc: Exception) -> str:
    """A transport failure in a few words, for the retry note."""
    if isinstance(exc, httpx.ReadTimeout):
        return "read timeout"
    if isinstance(exc, httpx.ConnectTimeout):
        return "connect timeout"
    if isinstance(exc, httpx.TimeoutException):
        return "timeout"
    if isinstance(exc, httpx.ConnectError):
        return "connection failure"
    return type(exc).__name__

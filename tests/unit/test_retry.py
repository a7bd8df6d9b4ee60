"""The retry policy's server delays (R-39): Retry-After and Gemini's RetryInfo, the 30 s cap, timeouts named.

Plain function calls with a counting attempt; no clock is asserted.
"""

from __future__ import annotations

import doctest

import httpx
import pytest

from memories.errors import MemoriesError
from memories.http import retry
from memories.http.retry import RETRY_INFO_TYPE, RetryPolicy, TransientFailure, parse_retry_delay, with_retries


def test_doctests() -> None:
    assert doctest.testmod(retry).failed == 0


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"details": [{"@type": RETRY_INFO_TYPE, "retryDelay": "0.5s"}]}}, 0.5),
        (
            {
                "error": {
                    "details": [
                        {"@type": "type.googleapis.com/google.rpc.Help"},
                        {"@type": RETRY_INFO_TYPE, "retryDelay": "42s"},
                    ]
                }
            },
            42.0,
        ),
        ({"error": {"details": [{"@type": RETRY_INFO_TYPE, "retryDelay": "soon"}]}}, None),
        ({"error": "overloaded"}, None),
        ([1, 2], None),
    ],
)
def test_parse_retry_delay(body: object, expected: float | None) -> None:
    assert parse_retry_delay(body) == expected


def test_a_delay_over_the_cap_is_not_waited_on() -> None:
    calls = []

    def attempt() -> None:
        calls.append(1)
        raise TransientFailure("HTTP 429: quota exceeded", retry_after=3600)

    with pytest.raises(MemoriesError) as caught:
        with_retries(attempt, policy=RetryPolicy(retries=5, backoff_ms=1), what="embedding request")

    assert caught.value.code == "upstream_unavailable"
    assert caught.value.details["retry_after"] == 3600 and len(calls) == 1
    assert "3600 s" in caught.value.message


def test_a_delay_within_the_cap_is_retried() -> None:
    calls = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) == 1:
            raise TransientFailure("HTTP 503", retry_after=0.01)
        return "ok"

    assert with_retries(attempt, policy=RetryPolicy(retries=1, backoff_ms=1), what="x") == "ok"
    assert len(calls) == 2


def test_a_read_timeout_names_the_setting() -> None:
    def attempt() -> None:
        raise httpx.ReadTimeout("")

    policy = RetryPolicy(retries=0, backoff_ms=1, read_timeout_seconds=5, connect_timeout_seconds=10)
    with pytest.raises(MemoriesError) as caught:
        with_retries(attempt, policy=policy, what="embedding request")

    assert caught.value.code == "upstream_unavailable"
    assert "read timeout" in caught.value.message and "rag.http.timeout_seconds" in caught.value.message


def test_cancel_is_checked_before_the_first_attempt() -> None:
    with pytest.raises(MemoriesError) as caught:
        with_retries(lambda: "never", policy=RetryPolicy(), what="x", cancelled=lambda: True)

    assert caught.value.code == "cancelled"

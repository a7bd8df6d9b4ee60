"""One JSON call to a model API (embeddings, generation, rerank): the request, the bounded reply, the failure.

::

    post_json(client, endpoint, body, policy=..., deadline=..., cancelled=...)
        POST body as JSON to endpoint.url with endpoint.headers(); redirects refused (API_REDIRECTS)
        2xx            -> the decoded JSON reply (a body that is not JSON: upstream_error; nested deeper than
                          MAX_JSON_DEPTH: invalid_model_output)
        429, 5xx       -> retried (TransientFailure; delay from Retry-After or Gemini's RetryInfo)
        401, 403       -> auth_failed
        other 4xx      -> upstream_error quoting the server's message (details: status, server_message)
        a refusal the caller's fallback answers with another body -> that body at once, as a retry

The server's message is quoted because it is how a service states its limits ("batch size 60 > maximum allowed
batch size 32", "input is too long"); callers such as :mod:`memories.providers.embedding` read it to
re-batch or to record an input as failed. It is cut to :data:`MAX_SERVER_MESSAGE` code points.

The body is read by :func:`memories.http.replies.read_body`: at most :data:`MAX_REPLY_BYTES` raw and again after
gzip/deflate is undone (a small gzip body may inflate to gigabytes), and JSON nested over :data:`MAX_JSON_DEPTH`
is refused before it is parsed (issue 29, item 13).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from memories.errors import MemoriesError
from memories.http.client import API_REDIRECTS, open_response, shown_url
from memories.http.replies import ACCEPT_ENCODING, depth_exceeds, read_body
from memories.http.retry import (
    RETRY_STATUSES,
    CancelCheck,
    Deadline,
    RetryPolicy,
    TransientFailure,
    parse_retry_after,
    parse_retry_delay,
    with_retries,
)

MAX_REPLY_BYTES = 64 * 1024 * 1024
"""Largest reply read, in bytes, as sent and again once decompressed: 100 vectors of 3,072 floats as JSON text are
about 7 MB."""

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects read in a reply: the replies of the services read are 6 deep at most
(Gemini's ``candidates[].content.parts[].text``)."""

MAX_SERVER_MESSAGE = 500
"""Code points of a server's error message kept in ours."""


@dataclass(frozen=True)
class Endpoint:
    """A configured model endpoint as ``workers.remote`` calls it.

    ``auth`` is ``"x-goog-api-key"`` (Gemini) or ``"bearer"`` (compatible); the key is read from the environment
    variable ``api_key_env`` of the worker's environment (inherited from the daemon) at each call, so it never
    crosses a pipe. ``name`` is the config table (``rag.embedding``), for messages.
    """

    name: str
    url: str
    auth: str
    api_key_env: str | None

    def key_advice(self) -> str:
        """What to check after a 401/403: the variable named by ``api_key_env``, whether it is set at all, or that
        no key is configured (the hint named ``api_key_env`` as if one were)."""
        if not self.api_key_env:
            return f"no key was sent: set [{self.name}] api_key_env to the environment variable that holds the key"
        if not os.environ.get(self.api_key_env):
            return (
                f"no key was sent: the environment variable {self.api_key_env} is not set in the daemon's environment"
            )
        return f"check the key in the environment variable {self.api_key_env}"

    def headers(self) -> dict[str, str]:
        """The JSON content type and the key header, when the variable is set (optional for loopback)."""
        headers = {"Content-Type": "application/json", "Accept": "application/json", "Accept-Encoding": ACCEPT_ENCODING}
        key = os.environ.get(self.api_key_env) if self.api_key_env else None
        if key:
            if self.auth == "x-goog-api-key":
                headers["x-goog-api-key"] = key
            else:
                headers["Authorization"] = f"Bearer {key}"
        return headers


Fallback = Callable[[int, str, Any], Mapping[str, Any] | None]
"""Called with the status, the server's message (:func:`server_message`) and the decoded body (``None`` when it is
not JSON) of a failed attempt, any status from 400 on but 401/403: the body of the next request, which is sent at
once and counts as a retry, or ``None`` when that failure has no other request (it is then handled as the table
above says)."""


class ApiError(MemoriesError):
    """``upstream_error`` for a 4xx the service answered, with its status and its own message."""

    def __init__(self, endpoint: Endpoint, status: int, server_message: str) -> None:
        super().__init__(
            "upstream_error",
            f"{endpoint.name} ({shown_url(endpoint.url)}) answered HTTP {status}: {server_message}",
            {"status": status, "server_message": server_message},
        )
        self.status = status
        self.server_message = server_message


def post_json(
    client: httpx.Client,
    endpoint: Endpoint,
    body: Mapping[str, Any],
    *,
    policy: RetryPolicy,
    deadline: Deadline | None = None,
    cancelled: CancelCheck | None = None,
    on_retry: Callable[[str], None] | None = None,
    fallback: Fallback | None = None,
) -> Any:
    """POST ``body`` as JSON with retries by ``policy`` and return the decoded JSON reply.

    Args:
        on_retry: told each retry before its wait (:func:`~memories.http.retry.with_retries`).
        fallback: another request for a failure the caller knows how to avoid (:data:`Fallback`). When no retry
            is left for it, the failure is raised as the server gave it (``upstream_error`` for a 4xx).

    Raises:
        ApiError: ``upstream_error`` for a 4xx other than 401/403 (not retried).
        MemoriesError: ``auth_failed`` (401/403), ``unsafe_redirect`` (any redirect), ``upstream_error`` (a reply
            that is not JSON, or over :data:`MAX_REPLY_BYTES` raw or decompressed, or in an encoding other than
            gzip/deflate), ``invalid_model_output`` (a 2xx reply nested deeper than :data:`MAX_JSON_DEPTH`),
            ``upstream_unavailable`` (retries used up, or a server delay over 30 s), ``cancelled``, the deadline's
            code.
    """
    payload = _encode(body)

    def attempt() -> Any:
        nonlocal payload
        response = open_response(
            client,
            "POST",
            endpoint.url,
            redirects=API_REDIRECTS,
            headers=endpoint.headers(),
            content=payload,
            deadline=deadline,
            passthrough=range(400, 600),
        )
        with contextlib.closing(response):
            raw = read_body(response, endpoint.name, MAX_REPLY_BYTES)
        status = response.status_code
        decoded = _decode(raw)
        if 200 <= status < 300:
            if decoded is _TOO_DEEP:
                raise MemoriesError(
                    "invalid_model_output",
                    f"{endpoint.name} ({shown_url(endpoint.url)}) answered JSON nested more than {MAX_JSON_DEPTH} "
                    "levels deep; nothing of it was read",
                )
            if decoded is _NOT_JSON:
                raise MemoriesError(
                    "upstream_error",
                    f"{endpoint.name} ({shown_url(endpoint.url)}) answered with a body that is not JSON",
                )
            return decoded
        if decoded is _TOO_DEEP:
            decoded = _NOT_JSON  # a failure's body is quoted as text
        message = server_message(decoded, raw)
        refused = f"HTTP {status}: {message}" if message else f"HTTP {status}"
        replacement = None
        if fallback is not None and status not in (401, 403):
            replacement = fallback(status, message, None if decoded is _NOT_JSON else decoded)
        if replacement is not None:
            payload = _encode(replacement)
            final = ApiError(endpoint, status, message or "(no message)")
            raise TransientFailure(refused, short=str(status), at_once=True, final=final)
        if status in RETRY_STATUSES:
            delays = [
                d
                for d in (parse_retry_after(response.headers.get("retry-after")), parse_retry_delay(decoded))
                if d is not None
            ]
            raise TransientFailure(refused, max(delays, default=None), short=str(status))
        if status in (401, 403):
            raise MemoriesError(
                "auth_failed",
                f"{endpoint.name} ({shown_url(endpoint.url)}) answered HTTP {status}: access refused; "
                + endpoint.key_advice(),
                {"status": status},
            )
        raise ApiError(endpoint, status, message or "(no message)")

    return with_retries(
        attempt,
        policy=policy,
        what=f"{endpoint.name} ({shown_url(endpoint.url)})",
        deadline=deadline,
        cancelled=cancelled,
        on_retry=on_retry,
    )


def _encode(body: Mapping[str, Any]) -> bytes:
    return json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


_NOT_JSON = object()
_TOO_DEEP = object()


def _decode(raw: bytes) -> Any:
    """The JSON value of ``raw``; :data:`_TOO_DEEP` when it nests over :data:`MAX_JSON_DEPTH`, :data:`_NOT_JSON`
    when it does not parse. A failed reply's deep body is quoted as text (:func:`server_message`)."""
    if depth_exceeds(raw, MAX_JSON_DEPTH):
        return _TOO_DEEP
    try:
        decoded = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return _NOT_JSON
    except RecursionError:  # not reached past the depth check; kept so no parse ends as internal_error
        return _TOO_DEEP
    return _without_lone_surrogates(decoded) if b"\\u" in raw else decoded


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
"""A UTF-16 surrogate code point. JSON's ``\\ud800`` escape decodes to one when it is not half of a pair (json.loads
joins the pairs), and such a string is not Unicode text: it cannot be encoded as UTF-8, so the remote worker could
not send a reply holding it back to the daemon."""


def _without_lone_surrogates(value: Any) -> Any:
    """``value`` (decoded JSON) with each lone surrogate in its strings (keys too) replaced by U+FFFD, the
    replacement character, as a decoder replaces bytes that are not UTF-8: a service that sends ``"\\ud800"`` in an
    answer or an error gets its text read, not the ask stuck."""
    if isinstance(value, str):
        return _LONE_SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_lone_surrogates(item) for item in value]
    if isinstance(value, dict):
        return {_without_lone_surrogates(key): _without_lone_surrogates(item) for key, item in value.items()}
    return value


def server_message(decoded: Any, raw: bytes) -> str:
    """The service's own words about a failure, in the shapes real servers use, cut to :data:`MAX_SERVER_MESSAGE`.

    OpenAI, vLLM, Gemini: ``{"error": {"message": ...}}``; TEI: ``{"error": "...", "error_type": ...}``; vLLM's
    older and FastAPI servers: ``{"message": ...}`` or ``{"detail": ...}``; anything else: the body as text.

    >>> server_message({"error": {"message": "batch size 60 > maximum allowed batch size 32"}}, b"")
    'batch size 60 > maximum allowed batch size 32'
    """
    text: Any = None
    if isinstance(decoded, dict):
        error = decoded.get("error")
        if isinstance(error, dict):
            text = error.get("message")
        elif isinstance(error, str):
            text = error
        if text is None:
            text = decoded.get("message") or decoded.get("detail")
    if text is None:
        text = raw.decode("utf-8", "replace").strip()
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False)
    text = " ".join(text.split())
    return text if len(text) <= MAX_SERVER_MESSAGE else text[: MAX_SERVER_MESSAGE - 1] + "…"

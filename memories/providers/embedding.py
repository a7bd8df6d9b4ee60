"""Remote embedding services (R-28, R-30, R-32): the call of any wire format, from ``workers.remote``.

::

    embed_remote(client, provider, inputs, task=...)     one call of the supervisor: up to batch_size inputs
      requests of at most provider.request_size() inputs, fewer once the server stated a lower limit
        provider.request                                   the JSON body (memories.providers.gemini, .compatible)
        post_json                                          retries, auth header, status -> error
        provider.vectors                                   the reply's raw vectors, in input order
        checked_matrix                                     flat, finite, non-zero, one size; L2-normalized
      an input the server refuses as too long             recorded as failed (the server's words), not resent

Nothing is stored unless every vector of a request passes :func:`checked_matrix`.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np

from memories.errors import MemoriesError
from memories.http.api import ApiError, post_json
from memories.http.retry import CancelCheck, Deadline, RetryPolicy
from memories.models.embedding import FloatMatrix
from memories.providers.capabilities import EmbeddingProvider, EmbedText, Task

_BATCH_LIMIT = re.compile(r"(?i)(?:maximum|max|at most|limit(?: is| of)?|up to)\D{0,40}?(\d+)")
_TOO_LONG = re.compile(r"(?i)too long|too many tokens|context length|maximum (?:input|sequence) length|exceeds")


@dataclass
class EmbedOutcome:
    """What one call produced: ``vectors`` float32 ``[len(ok), dimension]`` for the inputs at indexes ``ok``, and
    ``failed`` (input index → the server's reason) for inputs the server refused as too long."""

    vectors: FloatMatrix
    ok: list[int]
    failed: dict[int, str] = field(default_factory=dict)


class BatchLimit:
    """The most inputs per request a server accepts, learned from its error messages; shared by the threads of
    ``workers.remote`` (one per process, so a restart forgets it and the server says it again)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._limit: int | None = None

    def get(self, wanted: int) -> int:
        """``wanted``, or the stated limit when that is lower."""
        with self._lock:
            return wanted if self._limit is None else min(wanted, self._limit)

    def lower(self, limit: int) -> None:
        with self._lock:
            self._limit = limit if self._limit is None else min(self._limit, limit)


def checked_matrix(raw: Sequence[Any], dimension: int | None) -> FloatMatrix:
    """float32 ``[len(raw), d]`` of unit rows from a reply's raw vectors, or ``invalid_vector``.

    Each vector must be a flat list of finite numbers of ``dimension`` values (or, when ``dimension`` is None, of
    the first vector's size), and not all zero. A nested per-token array, an empty or zero vector, or a wrong size
    is refused whole: nothing of the reply is kept.

    >>> checked_matrix([[3, 0, 4, 0]], 4).tolist()
    [[0.6000000238418579, 0.0, 0.800000011920929, 0.0]]
    """
    rows: list[list[float]] = []
    for number, vector in enumerate(raw):
        if not isinstance(vector, list) or not vector:
            raise invalid_vector(f"vector {number} is {'empty' if vector == [] else 'not a list of numbers'}")
        if any(isinstance(value, list) for value in vector):
            raise invalid_vector(
                f"vector {number} is nested (a per-token array?); expected one flat list of numbers per input"
            )
        if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in vector):
            raise invalid_vector(f"vector {number} holds values that are not numbers")
        expected = dimension if dimension is not None else (len(rows[0]) if rows else len(vector))
        if len(vector) != expected:
            raise invalid_vector(
                f"vector {number} has {len(vector)} values, expected {expected}"
                + ("; the server may ignore `dimensions`" if dimension is not None else ""),
                {"expected": expected, "got": len(vector)},
            )
        if not all(math.isfinite(value) for value in vector):
            raise invalid_vector(f"vector {number} holds NaN or infinite values")
        rows.append(vector)
    matrix = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0).any():
        raise invalid_vector(f"vector {int(np.flatnonzero(norms == 0)[0])} is all zeros")
    unit: FloatMatrix = (matrix / norms[:, None]).astype(np.float32)
    return unit


def stated_batch_limit(message: str) -> int | None:
    """The maximum batch size a server's error message states, or ``None``.

    >>> stated_batch_limit("batch size 60 > maximum allowed batch size 32")
    32
    >>> stated_batch_limit("* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch")
    100
    >>> stated_batch_limit("input is too long") is None
    True
    """
    if "batch" not in message.lower():
        return None
    match = _BATCH_LIMIT.search(message)
    return int(match.group(1)) if match and int(match.group(1)) > 0 else None


def embed_remote(
    client: httpx.Client,
    provider: EmbeddingProvider,
    inputs: Sequence[EmbedText],
    *,
    task: Task,
    dimension: int | None,
    limit: BatchLimit,
    policy: RetryPolicy,
    deadline: Deadline | None = None,
    cancelled: CancelCheck | None = None,
) -> EmbedOutcome:
    """Embed ``inputs`` in as many requests as the provider needs; vectors of one width (``dimension``, else the
    configured ``dimensions``, else the first reply's).

    A 400/413/422 that states a maximum batch size lowers ``limit`` and the inputs go again in smaller requests
    (the server's limit is met, not retried blindly). A refusal of an input as too long (413, or a 400/422 saying
    so) splits the request until the input is alone, and then records it in ``failed`` with the server's words.
    Any other failure raises, and nothing of this call is kept.

    Raises:
        MemoriesError: ``invalid_vector`` (a reply that fails :func:`checked_matrix` or holds a vector per input
            other than exactly one), ``upstream_error``, ``auth_failed``, ``upstream_unavailable``,
            ``unsafe_redirect``, ``cancelled``, the deadline's code.
    """
    endpoint = provider.endpoint()
    size = provider.request_size()
    width = dimension if dimension is not None else provider.config.dimensions
    pending = [list(range(start, min(start + size, len(inputs)))) for start in range(0, len(inputs), size)]
    rows: dict[int, FloatMatrix] = {}
    failed: dict[int, str] = {}
    while pending:
        group = pending.pop(0)
        allowed = limit.get(len(group))
        if allowed < len(group):
            pending[:0] = [group[start : start + allowed] for start in range(0, len(group), allowed)]
            continue
        items = [inputs[index] for index in group]
        try:
            reply = post_json(
                client, endpoint, provider.request(items, task), policy=policy, deadline=deadline, cancelled=cancelled
            )
        except ApiError as error:
            if error.status not in (400, 413, 422):
                raise
            stated = stated_batch_limit(error.server_message)
            if stated is not None and stated < len(group):
                limit.lower(stated)
                pending.insert(0, group)
                continue
            if error.status == 413 or _TOO_LONG.search(error.server_message):
                if len(group) == 1:
                    failed[group[0]] = f"HTTP {error.status}: {error.server_message}"
                else:
                    half = len(group) // 2
                    pending[:0] = [group[:half], group[half:]]
                continue
            raise
        matrix = checked_matrix(provider.vectors(reply, len(group)), width)
        width = matrix.shape[1]
        for offset, index in enumerate(group):
            rows[index] = matrix[offset]
    ok = sorted(rows)
    vectors = np.stack([rows[index] for index in ok]) if ok else np.empty((0, width or 0), dtype=np.float32)
    return EmbedOutcome(vectors=vectors.astype(np.float32), ok=ok, failed=failed)


def invalid_vector(message: str, details: dict[str, Any] | None = None) -> MemoriesError:
    """``invalid_vector`` for a reply of ``[rag.embedding]`` that fails a check (``message`` says which)."""
    return MemoriesError("invalid_vector", f"rag.embedding: {message}; nothing was stored", details)

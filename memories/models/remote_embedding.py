"""Remote embedding services (R-28, R-30, R-32): Gemini and OpenAI-compatible servers, called from ``workers.remote``.

::

    embed_remote(client, service, inputs, task=...)       one call of the supervisor: up to batch_size inputs
      requests of at most service.request_size() inputs, fewer once the server stated a lower limit
        gemini_request / compatible_request                the JSON body
        post_json                                          retries, auth header, status -> error
        gemini_vectors / compatible_vectors                the reply's raw vectors, in input order
        checked_matrix                                     flat, finite, non-zero, one size; L2-normalized
      an input the server refuses as too long             recorded as failed (the server's words), not resent

Wire shapes, from the services' API references:

- Gemini ``models.embedContent``: ``{"content": {"parts": [{"text"}]}, "taskType", "title", "outputDimensionality"}``
  → ``{"embedding": {"values": [...]}}``; ``models.batchEmbedContents``: ``{"requests": [<embedContent body with
  "model": "models/<model>">, ...]}`` (at most 100) → ``{"embeddings": [{"values"}, ...]}`` in request order.
  ``title`` is sent only with ``taskType`` ``RETRIEVAL_DOCUMENT`` (the API refuses it otherwise).
- OpenAI-compatible ``/v1/embeddings`` (OpenAI, vLLM, TEI, Ollama, llama.cpp): ``{"model", "input": [...],
  "encoding_format": "float"}`` plus ``"dimensions"`` only when configured (some servers refuse the field) →
  ``{"data": [{"index", "embedding"}, ...]}``; ``embedding`` may also be a base64 string of little-endian float32
  (OpenAI's ``encoding_format: "base64"``, which some servers send regardless).

Nothing is stored unless every vector of a request passes :func:`checked_matrix`.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx
import numpy as np

from memories.errors import MemoriesError
from memories.http.api import ApiError, Endpoint, post_json
from memories.http.retry import CancelCheck, Deadline, RetryPolicy
from memories.models.embedding import FloatMatrix

Task = Literal["query", "document"]

GEMINI_MAX_BATCH = 100
"""``batchEmbedContents`` takes at most 100 requests per call (Gemini API reference)."""

GEMINI_TASKS = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}

_BATCH_LIMIT = re.compile(r"(?i)(?:maximum|max|at most|limit(?: is| of)?|up to)\D{0,40}?(\d+)")
_TOO_LONG = re.compile(r"(?i)too long|too many tokens|context length|maximum (?:input|sequence) length|exceeds")


@dataclass(frozen=True)
class EmbeddingService:
    """``[rag.embedding]`` as the worker needs it (the key stays in the environment, named by ``api_key_env``)."""

    protocol: Literal["gemini", "compatible"]
    url: str
    model: str
    dimensions: int | None
    api_key_env: str | None
    batch_size: int

    def endpoint(self) -> Endpoint:
        """The endpoint for :func:`memories.http.api.post_json`: Gemini's key header, or a bearer token."""
        auth = "x-goog-api-key" if self.protocol == "gemini" else "bearer"
        return Endpoint("rag.embedding", self.url, auth, self.api_key_env)

    def gemini_batch(self) -> bool:
        """The URL names ``batchEmbedContents`` (else Gemini's ``embedContent``: one text per request)."""
        return self.protocol == "gemini" and self.url.endswith(":batchEmbedContents")

    def request_size(self) -> int:
        """Inputs per request: 1 for ``embedContent``, at most 100 for ``batchEmbedContents``, else ``batch_size``."""
        if self.protocol == "gemini":
            return min(self.batch_size, GEMINI_MAX_BATCH) if self.gemini_batch() else 1
        return self.batch_size


@dataclass(frozen=True)
class EmbedText:
    """One model input: ``text`` with any prefix applied; ``title`` travels beside it (Gemini documents only)."""

    text: str
    title: str | None = None


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


def gemini_request(service: EmbeddingService, inputs: Sequence[EmbedText], task: Task) -> dict[str, Any]:
    """The JSON body of one Gemini call for ``inputs`` (one input unless the URL is ``batchEmbedContents``).

    >>> service = EmbeddingService("gemini", "https://g/v1beta/models/m:embedContent", "m", 256, None, 32)
    >>> gemini_request(service, [EmbedText("a note", "Title")], "document")  # doctest: +NORMALIZE_WHITESPACE
    {'content': {'parts': [{'text': 'a note'}]}, 'taskType': 'RETRIEVAL_DOCUMENT', 'title': 'Title',
     'outputDimensionality': 256}
    """

    def one(item: EmbedText) -> dict[str, Any]:
        body: dict[str, Any] = {"content": {"parts": [{"text": item.text}]}, "taskType": GEMINI_TASKS[task]}
        if task == "document" and item.title:
            body["title"] = item.title
        if service.dimensions is not None:
            body["outputDimensionality"] = service.dimensions
        return body

    if service.gemini_batch():
        return {"requests": [{"model": f"models/{service.model}", **one(item)} for item in inputs]}
    if len(inputs) != 1:
        raise ValueError("embedContent takes one input per request")
    return one(inputs[0])


def compatible_request(service: EmbeddingService, inputs: Sequence[EmbedText]) -> dict[str, Any]:
    """The JSON body of one OpenAI-compatible call; ``dimensions`` only when configured.

    >>> service = EmbeddingService("compatible", "http://127.0.0.1/v1/embeddings", "bge-m3", None, None, 32)
    >>> compatible_request(service, [EmbedText("a"), EmbedText("b")])
    {'model': 'bge-m3', 'input': ['a', 'b'], 'encoding_format': 'float'}
    """
    body: dict[str, Any] = {"model": service.model, "input": [item.text for item in inputs], "encoding_format": "float"}
    if service.dimensions is not None:
        body["dimensions"] = service.dimensions
    return body


def gemini_vectors(service: EmbeddingService, reply: Any, count: int) -> list[Any]:
    """The raw vectors of a Gemini reply, in input order.

    Raises:
        MemoriesError: ``invalid_vector`` when the reply does not hold exactly ``count`` embeddings.
    """
    if service.gemini_batch():
        embeddings = reply.get("embeddings") if isinstance(reply, dict) else None
        if not isinstance(embeddings, list):
            raise _invalid('the reply has no "embeddings" list (expected {"embeddings": [{"values": [...]}, ...]})')
    else:
        embedding = reply.get("embedding") if isinstance(reply, dict) else None
        if not isinstance(embedding, dict):
            raise _invalid('the reply has no "embedding" object (expected {"embedding": {"values": [...]}})')
        embeddings = [embedding]
    if len(embeddings) != count:
        raise _invalid(f"the reply holds {len(embeddings)} embeddings for {count} inputs")
    values = [item.get("values") if isinstance(item, dict) else None for item in embeddings]
    if any(value is None for value in values):
        raise _invalid('an embedding has no "values"')
    return values


def compatible_vectors(reply: Any, count: int) -> list[Any]:
    """The raw vectors of an OpenAI-compatible reply, placed by each item's ``index``; base64 strings decoded.

    Raises:
        MemoriesError: ``invalid_vector`` unless every input index ``0..count-1`` has exactly one vector.
    """
    data = reply.get("data") if isinstance(reply, dict) else None
    if not isinstance(data, list):
        raise _invalid('the reply has no "data" list (expected {"data": [{"index", "embedding"}, ...]})')
    placed: dict[int, Any] = {}
    for item in data:
        index = item.get("index") if isinstance(item, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in placed:
            raise _invalid(f"the reply's data items must carry unique indexes 0..{count - 1} (found {index!r})")
        if "embedding" not in item:
            raise _invalid(f'data item {index} has no "embedding"')
        placed[index] = _decode_base64(item["embedding"], index)
    if len(placed) != count:
        raise _invalid(f"the reply holds {len(placed)} vectors for {count} inputs")
    return [placed[index] for index in range(count)]


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
            raise _invalid(f"vector {number} is {'empty' if vector == [] else 'not a list of numbers'}")
        if any(isinstance(value, list) for value in vector):
            raise _invalid(
                f"vector {number} is nested (a per-token array?); expected one flat list of numbers per input"
            )
        if not all(isinstance(value, int | float) and not isinstance(value, bool) for value in vector):
            raise _invalid(f"vector {number} holds values that are not numbers")
        expected = dimension if dimension is not None else (len(rows[0]) if rows else len(vector))
        if len(vector) != expected:
            raise _invalid(
                f"vector {number} has {len(vector)} values, expected {expected}"
                + ("; the server may ignore `dimensions`" if dimension is not None else ""),
                {"expected": expected, "got": len(vector)},
            )
        if not all(math.isfinite(value) for value in vector):
            raise _invalid(f"vector {number} holds NaN or infinite values")
        rows.append(vector)
    matrix = np.asarray(rows, dtype=np.float64)
    norms = np.linalg.norm(matrix, axis=1)
    if (norms == 0).any():
        raise _invalid(f"vector {int(np.flatnonzero(norms == 0)[0])} is all zeros")
    return (matrix / norms[:, None]).astype(np.float32)


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
    service: EmbeddingService,
    inputs: Sequence[EmbedText],
    *,
    task: Task,
    dimension: int | None,
    limit: BatchLimit,
    policy: RetryPolicy,
    deadline: Deadline | None = None,
    cancelled: CancelCheck | None = None,
) -> EmbedOutcome:
    """Embed ``inputs`` in as many requests as the service needs; vectors of one width (``dimension``, else the
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
    endpoint = service.endpoint()
    width = dimension if dimension is not None else service.dimensions
    pending = [
        list(range(start, min(start + service.request_size(), len(inputs))))
        for start in range(0, len(inputs), service.request_size())
    ]
    rows: dict[int, FloatMatrix] = {}
    failed: dict[int, str] = {}
    while pending:
        group = pending.pop(0)
        allowed = limit.get(len(group))
        if allowed < len(group):
            pending[:0] = [group[start : start + allowed] for start in range(0, len(group), allowed)]
            continue
        items = [inputs[index] for index in group]
        body = (
            gemini_request(service, items, task) if service.protocol == "gemini" else compatible_request(service, items)
        )
        try:
            reply = post_json(client, endpoint, body, policy=policy, deadline=deadline, cancelled=cancelled)
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
        raw = (
            gemini_vectors(service, reply, len(group))
            if service.protocol == "gemini"
            else compatible_vectors(reply, len(group))
        )
        matrix = checked_matrix(raw, width)
        width = matrix.shape[1]
        for offset, index in enumerate(group):
            rows[index] = matrix[offset]
    ok = sorted(rows)
    vectors = np.stack([rows[index] for index in ok]) if ok else np.empty((0, width or 0), dtype=np.float32)
    return EmbedOutcome(vectors=vectors.astype(np.float32), ok=ok, failed=failed)


def _decode_base64(embedding: Any, index: int) -> Any:
    """A base64 ``embedding`` as a list of little-endian float32 values; anything else unchanged."""
    if not isinstance(embedding, str):
        return embedding
    try:
        raw = base64.b64decode(embedding, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(f"data item {index}: the embedding string is not base64") from None
    if len(raw) % 4:
        raise _invalid(f"data item {index}: the base64 embedding has {len(raw)} bytes, not a whole number of float32")
    return np.frombuffer(raw, dtype="<f4").astype(float).tolist()


def _invalid(message: str, details: dict[str, Any] | None = None) -> MemoriesError:
    return MemoriesError("invalid_vector", f"rag.embedding: {message}; nothing was stored", details)

"""OpenAI-compatible servers (R-28, R-30, R-36): embeddings, chat completions and the common rerank API.

Wire shapes, from the services' API references:

- ``/v1/embeddings`` (OpenAI, vLLM, TEI, Ollama, llama.cpp): ``{"model", "input": [...], "encoding_format":
  "float"}`` plus ``"dimensions"`` only when configured (some servers refuse the field) → ``{"data": [{"index",
  "embedding"}, ...]}``; ``embedding`` may also be a base64 string of little-endian float32 (OpenAI's
  ``encoding_format: "base64"``, which some servers send regardless).
- ``/v1/chat/completions`` (OpenAI, vLLM, Ollama's ``/v1``, llama.cpp's ``llama-server``, LM Studio, OpenRouter,
  DeepSeek): ``{"model", "messages": [system, user], "<max_tokens_field>": N, "stream": false, "response_format":
  ...}`` (no tools). ``response_format`` is, by level (:data:`memories.providers.generation.STRUCTURED_OUTPUTS`):
  ``json_schema``: ``{"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema": <answer
  schema>}}``; ``json_object``: ``{"type": "json_object"}``; ``none``: left out. The reply's text is
  ``choices[0].message.content`` (a string, or a list of content parts whose ``text`` parts are joined,
  ``thinking``/``reasoning`` parts skipped: Mistral's Magistral) with ``choices[0].finish_reason``. The reasoning
  fields (:data:`REASONING_FIELDS`) are never read as the answer; a reply whose only text is there says so.
  ``message.refusal`` (OpenAI's structured outputs) is the model declining.
- The learned reranker (R-36), the common rerank API (Cohere, Jina, vLLM's ``/v1/rerank``, TEI's ``/v1/rerank``
  adapter, llama.cpp): ``{model, query, documents, top_n}`` → ``{"results": [{"index": i, "relevance_score": s},
  ...]}``. The vault does not trust the server's ordering or its ``top_n``: it sorts by score itself (ties by the
  fused order), keeps ``top_n``, and the candidates the server did not return, or that fell outside ``top_n``,
  follow in their fused order. Scores may be any finite numbers (raw logits too). An unknown, duplicate or
  non-finite entry fails the whole request (it would reorder the wrong documents), and so does another schema,
  such as TEI's native bare array with ``score``.

The key travels as ``Authorization: Bearer``.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from memories.config import EmbeddingConfig, GenerationConfig, RerankConfig
from memories.errors import MemoriesError
from memories.http.api import Endpoint
from memories.providers.capabilities import EmbedText, Refusal, Task
from memories.providers.embedding import invalid_vector
from memories.providers.generation import answer_schema
from memories.rag.answers import SYSTEM_PROMPT
from memories.rag.replies import invalid_output
from memories.worker_protocol import InputRecipe, StructuredOutput

REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
"""Message fields in which compatible servers return a reasoning model's thinking, never read as the answer:
``reasoning_content`` (DeepSeek's API, vLLM's and llama.cpp's reasoning parsers, LM Studio), ``reasoning``
(Ollama's ``/v1``, OpenRouter, LM Studio, newer vLLM), ``thinking`` (Ollama's own API shape)."""

_COMPATIBLE_NAMES = ("response_format", "response format", "json_schema", "json schema", "json_object")

EXPECTED_SHAPE = '{"results": [{"index": <int>, "relevance_score": <number>}, ...]}'
"""The rerank reply this vault reads."""


class CompatibleEmbedding:
    """``/v1/embeddings``: ``batch_size`` inputs per request; ``query_prefix`` and ``document_prefix`` applied when
    configured (e5: ``"query: "``, ``"passage: "``)."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config

    def endpoint(self) -> Endpoint:
        return Endpoint("rag.embedding", self.config.url, "bearer", self.config.api_key_env)

    def request_size(self) -> int:
        return self.config.batch_size

    def request(self, inputs: Sequence[EmbedText], task: Task) -> dict[str, Any]:
        """The JSON body of one call (the same for either task); ``dimensions`` only when configured.

        >>> config = EmbeddingConfig(protocol="compatible", url="http://127.0.0.1/v1/embeddings", model="bge-m3")
        >>> CompatibleEmbedding(config).request([EmbedText("a"), EmbedText("b")], "document")
        {'model': 'bge-m3', 'input': ['a', 'b'], 'encoding_format': 'float'}
        """
        body: dict[str, Any] = {
            "model": self.config.model,
            "input": [item.text for item in inputs],
            "encoding_format": "float",
        }
        if self.config.dimensions is not None:
            body["dimensions"] = self.config.dimensions
        return body

    def vectors(self, reply: Any, count: int) -> list[Any]:
        """The raw vectors of a reply, placed by each item's ``index``; base64 strings decoded.

        Raises:
            MemoriesError: ``invalid_vector`` unless every input index ``0..count-1`` has exactly one vector.
        """
        data = reply.get("data") if isinstance(reply, dict) else None
        if not isinstance(data, list):
            raise invalid_vector('the reply has no "data" list (expected {"data": [{"index", "embedding"}, ...]})')
        placed: dict[int, Any] = {}
        for item in data:
            index = item.get("index") if isinstance(item, dict) else None
            if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count or index in placed:
                raise invalid_vector(
                    f"the reply's data items must carry unique indexes 0..{count - 1} (found {index!r})"
                )
            if "embedding" not in item:
                raise invalid_vector(f'data item {index} has no "embedding"')
            placed[index] = _decode_base64(item["embedding"], index)
        if len(placed) != count:
            raise invalid_vector(f"the reply holds {len(placed)} vectors for {count} inputs")
        return [placed[index] for index in range(count)]

    def recipe(self) -> InputRecipe:
        """``document_prefix`` before the chunk text (``{title}`` replaced by the record's title)."""
        return InputRecipe(prefix=self.config.document_prefix)

    def query_text(self, query: str) -> str:
        """``query_prefix`` + the query."""
        return self.config.query_prefix + query

    def space_parts(self) -> dict[str, Any]:
        config = self.config
        return {"query_prefix": config.query_prefix, "document_prefix": config.document_prefix, "task_types": False}


class CompatibleGeneration:
    """Chat completions (see the module docstring)."""

    def __init__(self, config: GenerationConfig) -> None:
        self.config = config

    def endpoint(self) -> Endpoint:
        return Endpoint("rag.generation", self.config.url, "bearer", self.config.api_key_env)

    def request(self, user: str, labels: Sequence[str], structured: StructuredOutput) -> dict[str, Any]:
        """The chat completions body: the system prompt, the user message, the output cap, no tools, no streaming,
        and ``response_format`` unless ``structured`` is ``none``.

        >>> config = GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m")
        >>> CompatibleGeneration(config).request("q", ["S1"], "json_object")["response_format"]
        {'type': 'json_object'}
        >>> sorted(CompatibleGeneration(config).request("q", ["S1"], "none"))
        ['max_tokens', 'messages', 'model', 'stream']
        """
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            self.config.max_tokens_field: self.config.max_output_tokens,
            "stream": False,
        }
        if structured == "json_schema":
            schema = {"name": "answer", "strict": True, "schema": answer_schema(labels)}
            body["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif structured == "json_object":
            body["response_format"] = {"type": "json_object"}
        return body

    def refusal(self, message: str, body: Any) -> Refusal | None:
        """The message, the error's ``param`` (OpenAI: ``"param": "response_format"``) or the provider's words that
        OpenRouter quotes (``error.metadata.raw``) name ``response_format``, a JSON schema or JSON object
        (``schema``), or JSON mode (``json``: Groq, Together).

        >>> config = GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m")
        >>> compatible = CompatibleGeneration(config)
        >>> compatible.refusal("'response_format.type' must be 'json_schema'", None)
        'schema'
        >>> compatible.refusal("x", {"error": {"message": "x", "param": "response_format"}})
        'schema'
        """
        found = body.get("error") if isinstance(body, dict) else None
        error: dict[str, Any] = found if isinstance(found, dict) else {}
        metadata: dict[str, Any] = error["metadata"] if isinstance(error.get("metadata"), dict) else {}
        named = [error.get("param"), metadata.get("raw")]  # OpenRouter quotes the provider's refusal in metadata.raw
        said = " ".join([message, *(text for text in named if isinstance(text, str))]).lower()
        if "json mode" in said:
            return "json"
        return "schema" if any(name in said for name in _COMPATIBLE_NAMES) else None

    def text(self, reply: Any) -> str:
        """``choices[0].message.content`` of a complete reply (see the module docstring).

        Raises:
            MemoriesError: ``invalid_model_output``: no choices, a truncated reply (``finish_reason: length``,
                naming the tokens used), a filtered one, the model's refusal, or no content outside the
                reasoning fields.
        """
        choices = reply.get("choices") if isinstance(reply, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            if isinstance(reply, dict) and isinstance(reply.get("message"), dict) and "done" in reply:
                raise invalid_output(
                    'the reply has no "choices": it is Ollama\'s own /api/chat shape; [rag.generation] url must be '
                    "the OpenAI-compatible http://<host>:11434/v1/chat/completions"
                )
            raise invalid_output('the reply has no "choices"')
        choice = choices[0]
        finish = choice.get("finish_reason")
        if finish == "length":
            usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
            used = usage.get("completion_tokens", "?")
            raise invalid_output(
                f"the reply was cut at the output limit (finish_reason: length, {used} tokens used of "
                f"max_output_tokens = {self.config.max_output_tokens})"
            )
        if finish == "content_filter":
            raise invalid_output("the service filtered the reply (finish_reason: content_filter)")
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal.strip():
            raise invalid_output(f"the model declined to answer: {' '.join(refusal.split())[:200]}")
        content = _content_text(message.get("content"))
        if not content.strip():
            field = next((name for name in REASONING_FIELDS if _content_text(message.get(name)).strip()), None)
            if field is not None:
                raise invalid_output(
                    f"the reply has no answer outside its reasoning ({field}); the model may have spent "
                    f"max_output_tokens = {self.config.max_output_tokens} on thinking, or the server's reasoning "
                    "parser kept the answer"
                )
            raise invalid_output("the reply is empty")
        return content


class CompatibleRerank:
    """The common rerank API (see the module docstring)."""

    def __init__(self, config: RerankConfig) -> None:
        self.config = config

    def endpoint(self) -> Endpoint:
        return Endpoint("rag.rerank", self.config.url, "bearer", self.config.api_key_env)

    def request(self, query: str, documents: Sequence[str], top_n: int) -> dict[str, Any]:
        """The request body.

        >>> config = RerankConfig(protocol="compatible", url="http://127.0.0.1/v1/rerank", model="bge-reranker")
        >>> CompatibleRerank(config).request("q", ["a", "b"], 1)
        {'model': 'bge-reranker', 'query': 'q', 'documents': ['a', 'b'], 'top_n': 1}
        """
        return {"model": self.config.model, "query": query, "documents": list(documents), "top_n": top_n}

    def order(self, reply: Any, count: int, top_n: int) -> list[tuple[int, float | None]]:
        """:func:`reranked_order` of the reply."""
        return reranked_order(reply, count, top_n)


def reranked_order(reply: Any, count: int, top_n: int) -> list[tuple[int, float | None]]:
    """Every candidate index ``0..count-1`` once, in the new order, with its score (``None``: not scored).

    >>> results = [{"index": 2, "relevance_score": 0.91}, {"index": 0, "relevance_score": 0.12}]
    >>> reranked_order({"results": results}, 3, 2)
    [(2, 0.91), (0, 0.12), (1, None)]

    Raises:
        MemoriesError: ``upstream_error`` naming the expected shape, for another schema, an index out of range or
            repeated, or a score that is not a finite number.
    """
    results = reply.get("results") if isinstance(reply, dict) else None
    if not isinstance(results, list):
        raise _bad(f"the reply is not in the rerank shape {EXPECTED_SHAPE}")
    scores: dict[int, float] = {}
    for entry in results:
        index = entry.get("index") if isinstance(entry, dict) else None
        score = entry.get("relevance_score") if isinstance(entry, dict) else None
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise _bad(f"a result has the index {index!r}, not one of 0..{count - 1} (expected {EXPECTED_SHAPE})")
        if index in scores:
            raise _bad(f"the index {index} is returned twice")
        if not isinstance(score, int | float) or isinstance(score, bool) or not math.isfinite(score):
            raise _bad(f"the result for index {index} has no finite relevance_score (expected {EXPECTED_SHAPE})")
        scores[index] = float(score)
    ranked = sorted(scores, key=lambda index: (-scores[index], index))[:top_n]
    chosen = set(ranked)
    return [(index, scores[index]) for index in ranked] + [(i, None) for i in range(count) if i not in chosen]


def _decode_base64(embedding: Any, index: int) -> Any:
    """A base64 ``embedding`` as a list of little-endian float32 values; anything else unchanged."""
    if not isinstance(embedding, str):
        return embedding
    try:
        raw = base64.b64decode(embedding, validate=True)
    except (binascii.Error, ValueError):
        raise invalid_vector(f"data item {index}: the embedding string is not base64") from None
    if len(raw) % 4:
        raise invalid_vector(
            f"data item {index}: the base64 embedding has {len(raw)} bytes, not a whole number of float32"
        )
    return np.frombuffer(raw, dtype="<f4").astype(float).tolist()


def _content_text(content: Any) -> str:
    """A message's text: a string, or the ``text`` of its ``text``/``output_text`` content parts (a list), never
    its ``thinking``/``reasoning`` parts."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(
        part["text"]
        for part in content
        if isinstance(part, dict)
        and part.get("type", "text") in ("text", "output_text")
        and isinstance(part.get("text"), str)
    )


def _bad(message: str) -> MemoriesError:
    return MemoriesError("upstream_error", f"rag.rerank: {message}", {"expected": EXPECTED_SHAPE})

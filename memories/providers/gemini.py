"""The Gemini API (R-28, R-30): embeddings and generation; Gemini has no rerank method, so no reranker.

Wire shapes, from the API reference:

- ``models.embedContent``: ``{"content": {"parts": [{"text"}]}, "taskType", "title", "outputDimensionality"}`` →
  ``{"embedding": {"values": [...]}}``; ``models.batchEmbedContents``: ``{"requests": [<embedContent body with
  "model": "models/<model>">, ...]}`` (at most 100) → ``{"embeddings": [{"values"}, ...]}`` in request order.
  ``title`` is sent only with ``taskType`` ``RETRIEVAL_DOCUMENT`` (the API refuses it otherwise).
- ``models.generateContent``: ``{"systemInstruction", "contents": [user], "generationConfig": {"maxOutputTokens",
  "responseMimeType": "application/json", "responseSchema": <answer schema, Gemini's OpenAPI subset>}}``;
  ``json_object`` leaves out ``responseSchema``, ``none`` both. The reply's text is
  ``candidates[0].content.parts[].text`` without parts marked ``"thought": true``; ``promptFeedback.blockReason``
  and ``candidates[0].finishReason`` say whether it is complete.

The key travels as ``x-goog-api-key``; the model is in the URL (``.../models/<model>:<operation>``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memories.config import EmbeddingConfig, GenerationConfig
from memories.http.api import Endpoint
from memories.providers.capabilities import EmbedText, Refusal, Task
from memories.providers.embedding import invalid_vector
from memories.rag.answers import SYSTEM_PROMPT
from memories.rag.replies import invalid_output
from memories.worker_protocol import InputRecipe, StructuredOutput

MAX_BATCH = 100
"""``batchEmbedContents`` takes at most 100 requests per call (Gemini API reference)."""

TASKS = {"query": "RETRIEVAL_QUERY", "document": "RETRIEVAL_DOCUMENT"}

FINISHED = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})
"""Finish reasons of a complete reply; ``MAX_TOKENS``, ``SAFETY``, ``RECITATION``… are not."""


class GeminiEmbedding:
    """``embedContent`` (one text per request) or ``batchEmbedContents``, as the URL names; task types, and the
    document title sent beside its text."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config

    def endpoint(self) -> Endpoint:
        return Endpoint("rag.embedding", self.config.url, "x-goog-api-key", self.config.api_key_env)

    def batch(self) -> bool:
        """The URL names ``batchEmbedContents`` (else ``embedContent``: one text per request)."""
        return self.config.url.endswith(":batchEmbedContents")

    def request_size(self) -> int:
        """1 for ``embedContent``, else ``batch_size`` up to :data:`MAX_BATCH`."""
        return min(self.config.batch_size, MAX_BATCH) if self.batch() else 1

    def request(self, inputs: Sequence[EmbedText], task: Task) -> dict[str, Any]:
        """The JSON body of one call for ``inputs`` (one input unless the URL is ``batchEmbedContents``).

        >>> config = EmbeddingConfig(protocol="gemini", url="https://g/v1beta/models/m:embedContent", model="m",
        ...                          dimensions=256)
        >>> gemini = GeminiEmbedding(config)
        >>> gemini.request([EmbedText("a note", "Title")], "document")  # doctest: +NORMALIZE_WHITESPACE
        {'content': {'parts': [{'text': 'a note'}]}, 'taskType': 'RETRIEVAL_DOCUMENT', 'title': 'Title',
         'outputDimensionality': 256}
        """

        def one(item: EmbedText) -> dict[str, Any]:
            body: dict[str, Any] = {"content": {"parts": [{"text": item.text}]}, "taskType": TASKS[task]}
            if task == "document" and item.title:
                body["title"] = item.title
            if self.config.dimensions is not None:
                body["outputDimensionality"] = self.config.dimensions
            return body

        if self.batch():
            return {"requests": [{"model": f"models/{self.config.model}", **one(item)} for item in inputs]}
        if len(inputs) != 1:
            raise ValueError("embedContent takes one input per request")
        return one(inputs[0])

    def vectors(self, reply: Any, count: int) -> list[Any]:
        """The raw vectors of a reply, in input order.

        Raises:
            MemoriesError: ``invalid_vector`` when the reply does not hold exactly ``count`` embeddings.
        """
        if self.batch():
            embeddings = reply.get("embeddings") if isinstance(reply, dict) else None
            if not isinstance(embeddings, list):
                raise invalid_vector(
                    'the reply has no "embeddings" list (expected {"embeddings": [{"values": [...]}, ...]})'
                )
        else:
            embedding = reply.get("embedding") if isinstance(reply, dict) else None
            if not isinstance(embedding, dict):
                raise invalid_vector('the reply has no "embedding" object (expected {"embedding": {"values": [...]}})')
            embeddings = [embedding]
        if len(embeddings) != count:
            raise invalid_vector(f"the reply holds {len(embeddings)} embeddings for {count} inputs")
        values = [item.get("values") if isinstance(item, dict) else None for item in embeddings]
        if any(value is None for value in values):
            raise invalid_vector('an embedding has no "values"')
        return values

    def recipe(self) -> InputRecipe:
        """The document title travels beside the text (``title``, with ``taskType`` ``RETRIEVAL_DOCUMENT``)."""
        return InputRecipe(title_field=True)

    def query_text(self, query: str) -> str:
        """The query as it is: ``taskType`` ``RETRIEVAL_QUERY`` marks it."""
        return query

    def space_parts(self) -> dict[str, Any]:
        return {"query_prefix": "", "document_prefix": "", "task_types": True}


class GeminiGeneration:
    """``generateContent`` (see the module docstring)."""

    def __init__(self, config: GenerationConfig) -> None:
        self.config = config

    def endpoint(self) -> Endpoint:
        return Endpoint("rag.generation", self.config.url, "x-goog-api-key", self.config.api_key_env)

    def request(self, user: str, labels: Sequence[str], structured: StructuredOutput) -> dict[str, Any]:
        """The ``generateContent`` body.

        >>> config = GenerationConfig(protocol="gemini", url="http://127.0.0.1/v1beta/models/m:generateContent",
        ...                           model="m")
        >>> sorted(GeminiGeneration(config).request("q", ["S1"], "json_schema")["generationConfig"])
        ['maxOutputTokens', 'responseMimeType', 'responseSchema']
        """
        settings: dict[str, Any] = {"maxOutputTokens": self.config.max_output_tokens}
        if structured != "none":
            settings["responseMimeType"] = "application/json"
        if structured == "json_schema":
            settings["responseSchema"] = {
                "type": "OBJECT",
                "properties": {
                    "answer": {"type": "STRING"},
                    "citations": {"type": "ARRAY", "items": {"type": "STRING", "format": "enum", "enum": list(labels)}},
                },
                "required": ["answer", "citations"],
                "propertyOrdering": ["answer", "citations"],
            }
        return {
            "systemInstruction": {"parts": [{"text": SYSTEM_PROMPT}]},
            "contents": [{"role": "user", "parts": [{"text": user}]}],
            "generationConfig": settings,
        }

    def refusal(self, message: str, body: Any) -> Refusal | None:
        """The message names JSON mode or the response MIME type (``json``: no JSON output at all, as Gemma models
        on the Gemini API answer) or the response schema (``schema``).

        >>> gemini = GeminiGeneration(GenerationConfig(protocol="gemini", url="https://g/m:generateContent", model="m"))
        >>> gemini.refusal("Json mode is not enabled for models/gemma-3-27b-it", None)
        'json'
        >>> gemini.refusal('Invalid JSON payload received. Unknown name "responseSchema"', None)
        'schema'
        """
        said = message.lower()
        if any(name in said for name in ("json mode", "mime type", "responsemimetype", "response_mime_type")):
            return "json"
        return "schema" if "schema" in said else None

    def text(self, reply: Any) -> str:
        """The text parts of ``candidates[0]`` (thought parts skipped) of a complete, unblocked reply.

        Raises:
            MemoriesError: ``invalid_model_output``: a blocked prompt (``promptFeedback.blockReason``), no
                candidates, a ``MAX_TOKENS`` (naming the tokens used) or other unfinished candidate, or no text.
        """
        if not isinstance(reply, dict):
            raise invalid_output("the reply is not a JSON object")
        feedback = reply.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            raise invalid_output(f"the service blocked the prompt (blockReason: {feedback['blockReason']})")
        candidates = reply.get("candidates")
        if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
            raise invalid_output("the reply has no candidates")
        candidate = candidates[0]
        finish = candidate.get("finishReason", "STOP")
        if finish == "MAX_TOKENS":
            metadata = reply.get("usageMetadata")
            usage: dict[str, Any] = metadata if isinstance(metadata, dict) else {}
            used = sum(
                v
                for k, v in usage.items()
                if k in ("candidatesTokenCount", "thoughtsTokenCount") and isinstance(v, int)
            )
            raise invalid_output(
                f"the reply was cut at the output limit (finishReason: MAX_TOKENS, {used or '?'} tokens used of "
                f"max_output_tokens = {self.config.max_output_tokens})"
            )
        if finish not in FINISHED:
            raise invalid_output(f"the service stopped the reply (finishReason: {finish})")
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        texts = [
            part["text"]
            for part in parts or []
            if isinstance(part, dict) and not part.get("thought") and isinstance(part.get("text"), str)
        ]
        text = "".join(texts)
        if not text.strip():
            raise invalid_output("the reply is empty")
        return text

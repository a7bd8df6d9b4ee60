"""The generation service of ``rag ask`` on the wire (R-30, R-43): request bodies, structured output, the reply's
text. Each wire format is one object (:data:`COMPATIBLE`, :data:`GEMINI`; :func:`wire_format` picks it).

What is sent, from the services' API references:

- OpenAI-compatible chat completions (OpenAI, vLLM, Ollama's ``/v1``, llama.cpp's ``llama-server``, LM Studio,
  OpenRouter, DeepSeek): ``{"model", "messages": [system, user], "<max_tokens_field>": N, "stream": false,
  "response_format": ...}`` (no tools). ``response_format`` is, by level (:data:`STRUCTURED_OUTPUTS`):
  ``json_schema``: ``{"type": "json_schema", "json_schema": {"name": "answer", "strict": true, "schema":
  <answer schema>}}``; ``json_object``: ``{"type": "json_object"}``; ``none``: left out.
- Gemini ``models.generateContent``: ``{"systemInstruction", "contents": [user], "generationConfig":
  {"maxOutputTokens", "responseMimeType": "application/json", "responseSchema": <answer schema, Gemini's
  OpenAPI subset>}}``; ``json_object`` leaves out ``responseSchema``, ``none`` both.

The answer schema (:func:`answer_schema`) is the reply object the system prompt asks for: ``answer`` a string,
``citations`` an array of this request's labels (an ``enum``, so a server that constrains decoding cannot write an
invented one), both required, nothing else.

**Falling back** (:class:`StructuredOutputLadder`). Servers differ in what they take: LM Studio refuses
``json_object`` (``'response_format.type' must be 'json_schema'``), llama.cpp's server before 2024-09 refused
``json_schema`` with a 500 (``response_format type must be one of "text" or "json_object"``), DeepSeek's API takes
``json_object`` only, Gemini refuses JSON mode for some models (``Json mode is not enabled for models/...``), older
servers refuse any unknown field with a bare 400. A refusal that names structured output (a 400, 422 or 500 whose
message or ``param`` says ``response_format``, ``json_schema``, ``responseSchema``…), or any 400/422 while the
server has not yet answered this daemon (``probing``) unless its message says what else is wrong (the context
length, the model, the token limit), makes the next request ask for one level less, and a refusal of JSON mode
itself (``Json mode is not enabled``) for none; a 400 for anything else never does. Each such request is a retry
of ``[rag.http] retries`` (R-39: a retry may cost money).

The reply's text:

- compatible: ``choices[0].message.content`` (a string, or a list of content parts whose ``text`` parts are
  joined, ``thinking``/``reasoning`` parts skipped: Mistral's Magistral) with ``choices[0].finish_reason``.
  The reasoning fields ``reasoning_content`` (DeepSeek, vLLM, llama.cpp, LM Studio), ``reasoning`` (Ollama,
  OpenRouter, LM Studio, vLLM) and ``thinking`` are never read as the answer; a reply whose only text is there
  says so. ``message.refusal`` (OpenAI's structured outputs) is the model declining.
- Gemini: ``candidates[0].content.parts[].text``, without parts marked ``"thought": true``;
  ``promptFeedback.blockReason`` and ``candidates[0].finishReason``.

A truncated, empty, filtered or blocked reply is ``invalid_model_output`` with the reason, and is never retried (a
retry would cost the same and end the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from memories.config import GenerationConfig
from memories.http.api import Endpoint
from memories.rag.answers import SYSTEM_PROMPT
from memories.rag.replies import invalid_output
from memories.worker_protocol import StructuredOutput

STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("json_schema", "json_object", "none")
"""The levels, most constrained first: a refusal steps one down."""

GEMINI_FINISHED = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})
"""Gemini finish reasons of a complete reply; ``MAX_TOKENS``, ``SAFETY``, ``RECITATION``… are not."""

REASONING_FIELDS = ("reasoning_content", "reasoning", "thinking")
"""Message fields in which compatible servers return a reasoning model's thinking, never read as the answer:
``reasoning_content`` (DeepSeek's API, vLLM's and llama.cpp's reasoning parsers, LM Studio), ``reasoning``
(Ollama's ``/v1``, OpenRouter, LM Studio, newer vLLM), ``thinking`` (Ollama's own API shape)."""

REFUSAL_STATUSES = frozenset({400, 422, 500})
"""Statuses of a refusal that names structured output: 400 (OpenAI, vLLM, LM Studio, Gemini), 422 (servers that
validate the body with a schema: FastAPI, Hugging Face TGI), 500 (llama.cpp's server before 2024-09)."""

PROBE_STATUSES = frozenset({400, 422})
"""Statuses that step down while the server has not answered yet, whatever the message (unless it names another
cause): the answer of a server that takes no unknown field."""

_OTHER_CAUSES = (
    "context",
    "token",
    "too long",
    "too large",
    "maximum",
    "model",
    "messages",
)
"""Words of a 400 about something other than structured output: the context length (``maximum context length``,
``exceeds the available context size``), the output limit (``max_tokens``), the model (``model `x` does not
exist``), the messages. Such a 400 never steps down, even while probing."""

_COMPATIBLE_NAMES = ("response_format", "response format", "json_schema", "json schema", "json_object")

Refusal = Literal["schema", "json"]
"""What a refusal refuses: the schema (the next request asks for one level less) or JSON output at all (the next
request asks for none)."""


def answer_schema(labels: Sequence[str]) -> dict[str, Any]:
    """The reply object as JSON Schema (the subset OpenAI's strict mode, vLLM, llama.cpp and LM Studio take).

    >>> answer_schema(["S1"])["properties"]["citations"]
    {'type': 'array', 'items': {'type': 'string', 'enum': ['S1']}}
    """
    return {
        "type": "object",
        "properties": {
            "answer": {"type": "string"},
            "citations": {"type": "array", "items": {"type": "string", "enum": list(labels)}},
        },
        "required": ["answer", "citations"],
        "additionalProperties": False,
    }


class WireFormat(Protocol):
    """What ``workers.remote`` needs of one wire format."""

    def endpoint(self, config: GenerationConfig) -> Endpoint:
        """Where the request goes and how the key travels."""
        ...

    def request(
        self, config: GenerationConfig, user: str, labels: Sequence[str], structured: StructuredOutput
    ) -> dict[str, Any]:
        """The request body."""
        ...

    def refusal(self, message: str, body: Any) -> Refusal | None:
        """What a failure's message (or its error body) says the server refused, if it names structured output."""
        ...

    def text(self, reply: Any, max_output_tokens: int) -> str:
        """The answer text of a complete reply (raises ``invalid_model_output``)."""
        ...


class Compatible:
    """OpenAI-compatible chat completions (see the module docstring)."""

    def endpoint(self, config: GenerationConfig) -> Endpoint:
        return Endpoint("rag.generation", config.url, "bearer", config.api_key_env)

    def request(
        self, config: GenerationConfig, user: str, labels: Sequence[str], structured: StructuredOutput
    ) -> dict[str, Any]:
        """The chat completions body: the system prompt, the user message, the output cap, no tools, no streaming,
        and ``response_format`` unless ``structured`` is ``none``.

        >>> config = GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m")
        >>> COMPATIBLE.request(config, "q", ["S1"], "json_object")["response_format"]
        {'type': 'json_object'}
        >>> sorted(COMPATIBLE.request(config, "q", ["S1"], "none"))
        ['max_tokens', 'messages', 'model', 'stream']
        """
        body: dict[str, Any] = {
            "model": config.model,
            "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
            config.max_tokens_field: config.max_output_tokens,
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

        >>> COMPATIBLE.refusal("'response_format.type' must be 'json_schema'", None)
        'schema'
        >>> COMPATIBLE.refusal("x", {"error": {"message": "x", "param": "response_format"}})
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

    def text(self, reply: Any, max_output_tokens: int) -> str:
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
                f"max_output_tokens = {max_output_tokens})"
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
                    f"max_output_tokens = {max_output_tokens} on thinking, or the server's reasoning parser kept "
                    "the answer"
                )
            raise invalid_output("the reply is empty")
        return content


class Gemini:
    """Gemini ``generateContent`` (see the module docstring); the model is in the URL."""

    def endpoint(self, config: GenerationConfig) -> Endpoint:
        return Endpoint("rag.generation", config.url, "x-goog-api-key", config.api_key_env)

    def request(
        self, config: GenerationConfig, user: str, labels: Sequence[str], structured: StructuredOutput
    ) -> dict[str, Any]:
        """The ``generateContent`` body.

        >>> config = GenerationConfig(protocol="gemini", url="http://127.0.0.1/v1beta/models/m:generateContent",
        ...                           model="m")
        >>> sorted(GEMINI.request(config, "q", ["S1"], "json_schema")["generationConfig"])
        ['maxOutputTokens', 'responseMimeType', 'responseSchema']
        """
        settings: dict[str, Any] = {"maxOutputTokens": config.max_output_tokens}
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

        >>> GEMINI.refusal("Json mode is not enabled for models/gemma-3-27b-it", None)
        'json'
        >>> GEMINI.refusal('Invalid JSON payload received. Unknown name "responseSchema"', None)
        'schema'
        """
        said = message.lower()
        if any(name in said for name in ("json mode", "mime type", "responsemimetype", "response_mime_type")):
            return "json"
        return "schema" if "schema" in said else None

    def text(self, reply: Any, max_output_tokens: int) -> str:
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
                f"max_output_tokens = {max_output_tokens})"
            )
        if finish not in GEMINI_FINISHED:
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


COMPATIBLE = Compatible()
GEMINI = Gemini()


def wire_format(protocol: Literal["gemini", "compatible"]) -> WireFormat:
    """The wire format of ``[rag.generation] protocol``."""
    return GEMINI if protocol == "gemini" else COMPATIBLE


class StructuredOutputLadder:
    """The structured output the next request of one ``rag ask`` asks for, one level less after each refusal.

    Args:
        wire: the wire format; start: the level to ask for first (what this server took before, else
            ``json_schema``); probing: the server has not answered this daemon yet, so any 400/422 not about
            something else counts as a refusal (see the module docstring).
    """

    def __init__(self, wire: WireFormat, start: StructuredOutput, *, probing: bool) -> None:
        self._wire = wire
        self.level = start
        self._probing = probing

    def refused(self, status: int, message: str, body: Any) -> bool:
        """Whether this failure refuses the current level and a lower one is left; if so, step down.

        >>> ladder = StructuredOutputLadder(COMPATIBLE, "json_schema", probing=False)
        >>> ladder.refused(400, "This model's maximum context length is 4096 tokens", None), ladder.level
        (False, 'json_schema')
        >>> ladder.refused(400, "'response_format.type' must be 'json_schema' or 'text'", None), ladder.level
        (True, 'json_object')
        """
        if self.level == "none":
            return False
        refused = self._wire.refusal(message, body) if status in REFUSAL_STATUSES else None
        said = message.lower()
        if refused is None and not (
            self._probing and status in PROBE_STATUSES and not any(word in said for word in _OTHER_CAUSES)
        ):
            return False
        lower = STRUCTURED_OUTPUTS.index(self.level) + 1
        self.level = "none" if refused == "json" else STRUCTURED_OUTPUTS[lower]
        return True


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

"""What every wire format of ``rag ask``'s generation service shares (R-30, R-43): the answer schema and the
structured output ladder. The wire formats themselves are :class:`memories.providers.gemini.GeminiGeneration` and
:class:`memories.providers.compatible.CompatibleGeneration`.

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

A truncated, empty, filtered or blocked reply is ``invalid_model_output`` with the reason, and is never retried (a
retry would cost the same and end the same).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memories.providers.capabilities import GenerationProvider
from memories.worker_protocol import StructuredOutput

STRUCTURED_OUTPUTS: tuple[StructuredOutput, ...] = ("json_schema", "json_object", "none")
"""The levels, most constrained first: a refusal steps one down."""

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


class StructuredOutputLadder:
    """The structured output the next request of one ``rag ask`` asks for, one level less after each refusal.

    Args:
        wire: the generation provider; start: the level to ask for first (what this server took before, else
            ``json_schema``); probing: the server has not answered this daemon yet, so any 400/422 not about
            something else counts as a refusal (see the module docstring).
    """

    def __init__(self, wire: GenerationProvider, start: StructuredOutput, *, probing: bool) -> None:
        self._wire = wire
        self.level = start
        self._probing = probing

    def refused(self, status: int, message: str, body: Any) -> bool:
        """Whether this failure refuses the current level and a lower one is left; if so, step down.

        >>> from memories.config import GenerationConfig
        >>> from memories.providers.compatible import CompatibleGeneration
        >>> config = GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m")
        >>> ladder = StructuredOutputLadder(CompatibleGeneration(config), "json_schema", probing=False)
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

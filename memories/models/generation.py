"""The generation service of ``rag ask`` on the wire (R-30, R-43): request bodies and the reply's text.

Shapes, from the services' API references:

- OpenAI-compatible chat completions (OpenAI, vLLM, Ollama's ``/v1``, llama.cpp, LM Studio):
  ``{"model", "messages": [system, user], "<max_tokens_field>": N, "stream": false}`` (no tools) →
  ``choices[0].message.content`` with ``choices[0].finish_reason``; ``reasoning_content``/``reasoning`` fields
  (DeepSeek, vLLM, Ollama) are never read.
- Gemini ``models.generateContent``: ``{"systemInstruction", "contents": [user], "generationConfig":
  {"maxOutputTokens", "responseMimeType": "application/json"}}`` → ``candidates[0].content.parts[].text``, without
  parts marked ``"thought": true``; ``promptFeedback.blockReason`` and ``candidates[0].finishReason``.

A truncated, empty or blocked reply is ``invalid_model_output`` with the reason, and is never retried (a retry
would cost the same and end the same).
"""

from __future__ import annotations

from typing import Any, Literal

from memories.errors import MemoriesError
from memories.rag.answers import SYSTEM_PROMPT

GEMINI_FINISHED = frozenset({"STOP", "FINISH_REASON_UNSPECIFIED"})
"""Gemini finish reasons of a complete reply; ``MAX_TOKENS``, ``SAFETY``, ``RECITATION``… are not."""


def compatible_request(
    model: str, user: str, *, max_output_tokens: int, max_tokens_field: Literal["max_tokens", "max_completion_tokens"]
) -> dict[str, Any]:
    """The chat completions body: the system prompt, the user message, the output cap, no tools, no streaming.

    >>> sorted(compatible_request("m", "q", max_output_tokens=64, max_tokens_field="max_tokens"))
    ['max_tokens', 'messages', 'model', 'stream']
    """
    return {
        "model": model,
        "messages": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}],
        max_tokens_field: max_output_tokens,
        "stream": False,
    }


def gemini_request(user: str, *, max_output_tokens: int) -> dict[str, Any]:
    """The ``generateContent`` body (the model is in the URL)."""
    return {
        "systemInstruction": {"parts": [{"text": SYSTEM_PROMPT}]},
        "contents": [{"role": "user", "parts": [{"text": user}]}],
        "generationConfig": {"maxOutputTokens": max_output_tokens, "responseMimeType": "application/json"},
    }


def compatible_text(reply: Any, max_output_tokens: int) -> str:
    """``choices[0].message.content`` of a complete reply.

    Raises:
        MemoriesError: ``invalid_model_output``: no choices, a truncated reply (``finish_reason: length``, naming the
            tokens used), or empty content.
    """
    choices = reply.get("choices") if isinstance(reply, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _invalid('the reply has no "choices"')
    choice = choices[0]
    if choice.get("finish_reason") == "length":
        usage = reply.get("usage") if isinstance(reply.get("usage"), dict) else {}
        used = usage.get("completion_tokens", "?")
        raise _invalid(
            f"the reply was cut at the output limit (finish_reason: length, {used} tokens used of "
            f"max_output_tokens = {max_output_tokens})"
        )
    message = choice.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, str) or not content.strip():
        raise _invalid("the reply is empty")
    return content


def gemini_text(reply: Any, max_output_tokens: int) -> str:
    """The text parts of ``candidates[0]`` (thought parts skipped) of a complete, unblocked reply.

    Raises:
        MemoriesError: ``invalid_model_output``: a blocked prompt (``promptFeedback.blockReason``), no candidates,
            a ``MAX_TOKENS`` (naming the tokens used) or other unfinished candidate, or no text.
    """
    if not isinstance(reply, dict):
        raise _invalid("the reply is not a JSON object")
    feedback = reply.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        raise _invalid(f"the service blocked the prompt (blockReason: {feedback['blockReason']})")
    candidates = reply.get("candidates")
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        raise _invalid("the reply has no candidates")
    candidate = candidates[0]
    finish = candidate.get("finishReason", "STOP")
    if finish == "MAX_TOKENS":
        metadata = reply.get("usageMetadata")
        usage: dict[str, Any] = metadata if isinstance(metadata, dict) else {}
        used = sum(
            v for k, v in usage.items() if k in ("candidatesTokenCount", "thoughtsTokenCount") and isinstance(v, int)
        )
        raise _invalid(
            f"the reply was cut at the output limit (finishReason: MAX_TOKENS, {used or '?'} tokens used of "
            f"max_output_tokens = {max_output_tokens})"
        )
    if finish not in GEMINI_FINISHED:
        raise _invalid(f"the service stopped the reply (finishReason: {finish})")
    content = candidate.get("content")
    parts = content.get("parts") if isinstance(content, dict) else None
    texts = [
        part["text"]
        for part in parts or []
        if isinstance(part, dict) and not part.get("thought") and isinstance(part.get("text"), str)
    ]
    text = "".join(texts)
    if not text.strip():
        raise _invalid("the reply is empty")
    return text


def _invalid(reason: str) -> MemoriesError:
    return MemoriesError("invalid_model_output", f"rag.generation: {reason}", {"reason": reason})

"""``rag ask``'s generation request against the loopback fake (issue 22): every reply shape real servers return,
named by the server and model family it comes from, and every structured-output fallback path.

Each test runs the remote worker's own handler (``workers.remote.generate``: the real HTTP client, retries and
wire formats) against :class:`~tests.fixtures.model_servers.ModelServer`, then reads the reply as ``rag ask``
does (:func:`memories.rag.answers.parse_answer`). The fake's records of what it received are the evidence.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from memories import worker_protocol as w
from memories.config import GenerationConfig, HttpConfig
from memories.errors import MemoriesError
from memories.rag.answers import parse_answer
from tests.fixtures.model_servers import ModelServer, Reply, chat_completion, gemini_content
from workers.remote import generate

LABELS = ["S1", "S2"]
ANSWER = {"answer": "At two [S1].", "citations": ["S1"]}
OBJECT = json.dumps(ANSWER)
DRAFT = '{"answer": "maybe [S9]", "citations": ["S9"]}'
"""A draft in the reasoning citing a label never sent: reading it would fail the ask."""


class _Context:
    """What the handler may do besides returning (``workers.loop.Context``): progress notes are kept."""

    def __init__(self) -> None:
        self.notes: list[str | None] = []

    def progress(self, done: int, total: int | None, unit: str, note: str | None = None) -> None:
        self.notes.append(note)

    def cancelled(self) -> bool:
        return False


def _generate(
    server: ModelServer,
    protocol: str = "compatible",
    *,
    retries: int = 2,
    start: w.StructuredOutput = "json_schema",
    probing: bool = True,
    context: _Context | None = None,
) -> w.GeneratedText:
    operation = "gemini_generate" if protocol == "gemini" else "chat"
    service = GenerationConfig(protocol=protocol, url=server.url(operation), model="fake-chat")  # type: ignore[arg-type]
    request = w.Generate(
        service=service,
        http=HttpConfig(retries=retries, backoff_ms=10),
        user=json.dumps({"question": "when?", "sources": []}),
        labels=LABELS,
        budget_seconds=60,
        structured_output=start,
        probing=probing,
    )
    return generate(request, context or _Context())  # type: ignore[arg-type]


def _ask(server: ModelServer, protocol: str = "compatible") -> tuple[str, list[str]]:
    return parse_answer(_generate(server, protocol).text, LABELS)


def _compatible(content: Any = None, **message: Any) -> Reply:
    return Reply(200, chat_completion(content, **message))


# -- item 2: replies as they really come --------------------------------------------------------------------------

SHAPES = {
    "structured output (OpenAI json_schema, LM Studio, vLLM guided decoding)": _compatible(OBJECT),
    "prose around a json fence (Llama 3.2 on LM Studio, the issue's reply)": _compatible(
        f"Based on your notes:\n```json\n{OBJECT}\n```\nHope that helps!"
    ),
    "bare fence (Gemma 3 on Ollama)": _compatible(f"```\n{OBJECT}\n```"),
    "tilde fence, upper-case tag (Mistral Nemo on llama.cpp)": _compatible(f"~~~JSON\n{OBJECT}\n~~~"),
    "object in prose, no fence (Phi-3 mini on Ollama)": _compatible(f"Here is the answer: {OBJECT} Let me know!"),
    "multi-line answer string (Llama 3.1 8B on llama.cpp)": _compatible(
        '{"answer": "At two [S1].\nNightly.", "citations": ["S1"]}'
    ),
    "the same object twice (Qwen2.5 7B on Ollama)": _compatible(f"{OBJECT}\n\nIn JSON:\n```json\n{OBJECT}\n```"),
    "think block, then the object (DeepSeek-R1 distill on Ollama before 0.9)": _compatible(
        f"<think>\nThe user asks when. A draft: {DRAFT}\n</think>\n\n{OBJECT}"
    ),
    "closing tag only, opened by the template (DeepSeek-R1-0528 on vLLM, R1 distills on llama.cpp)": _compatible(
        f"Okay, the note says two. {DRAFT}\n</think>\n\n```json\n{OBJECT}\n```"
    ),
    "empty think block (Qwen3 with /no_think on Ollama)": _compatible(f"<think>\n\n</think>\n\n{OBJECT}"),
    "thinking tags of a fine-tune (<reasoning>…</reasoning><answer>…)": _compatible(
        f"<reasoning>{DRAFT}</reasoning>\n<answer>{OBJECT}</answer>"
    ),
    "thought tags (EXAONE Deep on llama.cpp)": _compatible(f"<thought>\n{DRAFT}\n</thought>\n{OBJECT}"),
    "[THINK] tags (Magistral on llama.cpp)": _compatible(f"[THINK]{DRAFT}[/THINK]{OBJECT}"),
    "◁think▷ tags (Kimi-VL thinking on vLLM)": _compatible(f"◁think▷{DRAFT}◁/think▷{OBJECT}"),
    "begin/end_of_thought tokens (OpenThinker on llama.cpp)": _compatible(
        f"<|begin_of_thought|>{DRAFT}<|end_of_thought|>\n<|begin_of_solution|>{OBJECT}<|end_of_solution|>"
    ),
    "harmony channels left in the content (gpt-oss on an older llama.cpp)": _compatible(
        f"<|channel|>analysis<|message|>{DRAFT}<|end|><|start|>assistant<|channel|>final<|message|>{OBJECT}"
    ),
    "reasoning_content field (DeepSeek API deepseek-reasoner, vLLM/llama.cpp reasoning parsers)": _compatible(
        OBJECT, reasoning_content=DRAFT
    ),
    "reasoning field (Ollama /v1 since 0.9, OpenRouter, LM Studio)": _compatible(OBJECT, reasoning=DRAFT),
    "thinking field (Ollama's message shape)": _compatible(OBJECT, thinking=DRAFT),
    "content parts with a thinking part (Magistral on Mistral's API)": _compatible(
        [{"type": "thinking", "thinking": [{"type": "text", "text": DRAFT}]}, {"type": "text", "text": OBJECT}]
    ),
}


@pytest.mark.parametrize("reply", SHAPES.values(), ids=SHAPES.keys())
def test_a_compatible_reply_shape_is_read(model_server: ModelServer, reply: Reply) -> None:
    model_server.script("chat", reply)

    assert _ask(model_server)[1] == ["S1"]
    assert len(model_server.calls("chat")) == 1


GEMINI_SHAPES = {
    "thought parts (Gemini 2.5 with thinking)": gemini_content({"text": DRAFT, "thought": True}, {"text": OBJECT}),
    "json fence (Gemini without JSON mode)": gemini_content({"text": f"```json\n{OBJECT}\n```"}),
    "object split over parts (Gemini streaming-style parts)": gemini_content(
        {"text": OBJECT[:10]}, {"text": OBJECT[10:]}
    ),
}


@pytest.mark.parametrize("reply", GEMINI_SHAPES.values(), ids=GEMINI_SHAPES.keys())
def test_a_gemini_reply_shape_is_read(model_server: ModelServer, reply: dict[str, Any]) -> None:
    model_server.script("gemini_generate", Reply(200, reply))

    assert _ask(model_server, "gemini")[1] == ["S1"]


REFUSED = {
    "an object only inside the reasoning (vLLM's Qwen3 parser with thinking off)": (
        _compatible(None, reasoning_content=OBJECT),
        "no answer outside its reasoning (reasoning_content)",
    ),
    "a think block never closed (DeepSeek-R1 stopping inside its thinking)": (
        _compatible(f"<think>\nLet me think. {OBJECT}"),
        "only reasoning",
    ),
    "two different objects (a small model answering twice)": (
        _compatible(f'{OBJECT}\n{{"answer": "At three [S2].", "citations": ["S2"]}}'),
        "two different answer objects",
    ),
    "single quotes (Python-style dict from a small model)": (
        _compatible("{'answer': 'At two [S1].', 'citations': ['S1']}"),
        "not one JSON object",
    ),
    "an invented label after the reasoning": (
        _compatible(f"<think>ok</think>{DRAFT}"),
        "labels that were not sent: S9",
    ),
    "the model's refusal (OpenAI structured outputs)": (
        _compatible(None, refusal="I can't help with that."),
        "declined to answer",
    ),
    "Ollama's own /api/chat shape (a url without /v1)": (
        Reply(200, {"model": "m", "message": {"role": "assistant", "content": OBJECT}, "done": True}),
        "/v1/chat/completions",
    ),
    "a filtered reply (Azure OpenAI content filter)": (
        _compatible(OBJECT, finish_reason="content_filter"),
        "content_filter",
    ),
}


@pytest.mark.parametrize(("reply", "phrase"), REFUSED.values(), ids=REFUSED.keys())
def test_a_bad_reply_is_refused_and_not_retried(model_server: ModelServer, reply: Reply, phrase: str) -> None:
    model_server.script("chat", reply)

    with pytest.raises(MemoriesError) as caught:
        _ask(model_server)

    assert caught.value.code == "invalid_model_output" and phrase in caught.value.message
    assert len(model_server.calls("chat")) == 1


def test_a_lone_surrogate_in_a_reply_is_read_as_a_replacement_character(model_server: ModelServer) -> None:
    """JSON allows ``\\ud800``, which is no Unicode text: the worker could not send the reply back to the daemon,
    its handler thread died and ``rag ask`` waited out its budget (a new-user trial's hostile server)."""
    model_server.script("chat", _compatible('{"answer": "At two [S1] \ud800.", "citations": ["S1"]}'))

    generated = _generate(model_server)

    msgspec.msgpack.encode(generated)  # what the worker sends back
    assert parse_answer(generated.text, LABELS) == ("At two [S1] \ufffd.", ["S1"])


# -- item 1: structured output and its fallbacks ------------------------------------------------------------------


def _formats(server: ModelServer) -> list[Any]:
    return [call.body.get("response_format", {}).get("type") for call in server.calls("chat")]


def test_the_answer_schema_is_asked_for_first(model_server: ModelServer) -> None:
    reply = _generate(model_server)

    (call,) = model_server.calls("chat")
    schema = call.body["response_format"]["json_schema"]
    assert schema["strict"] is True and schema["schema"]["required"] == ["answer", "citations"]
    assert schema["schema"]["properties"]["citations"]["items"]["enum"] == LABELS
    assert reply.structured_output == "json_schema"


def test_json_schema_refused_falls_back_to_json_object(model_server: ModelServer) -> None:
    """llama.cpp's server before 2024-09 refused json_schema with a 500 naming it."""
    refusal = {"error": {"code": 500, "message": 'response_format type must be one of "text" or "json_object", '
                         "but got: json_schema", "type": "server_error"}}  # fmt: skip
    model_server.script("chat", Reply(500, refusal))
    context = _Context()

    reply = _generate(model_server, context=context)

    assert _formats(model_server) == ["json_schema", "json_object"]
    assert reply.structured_output == "json_object" and parse_answer(reply.text, LABELS)[1] == ["S1"]
    assert context.notes == ["retrying 2/3 after 500"]


def test_json_schema_then_json_object_refused_falls_back_to_none(model_server: ModelServer) -> None:
    """DeepSeek's API refuses json_schema; LM Studio refuses json_object: a server refusing both gets neither."""
    model_server.script(
        "chat",
        Reply(400, {"error": {"message": "This response_format type is unavailable now", "type": "invalid_request"}}),
        Reply(400, {"error": "'response_format.type' must be 'json_schema' or 'text'"}),
    )

    reply = _generate(model_server)

    assert _formats(model_server) == ["json_schema", "json_object", None]
    assert "response_format" not in model_server.calls("chat")[-1].body
    assert reply.structured_output == "none"


def test_a_bare_400_on_the_first_request_falls_back_but_not_later(model_server: ModelServer) -> None:
    """A server that takes no unknown field says only "Bad Request"; once it has answered, a 400 is its own."""
    model_server.script("chat", Reply(400, b"Bad Request"))
    assert _generate(model_server).structured_output == "json_object"

    model_server.script("chat", Reply(400, b"Bad Request"))
    with pytest.raises(MemoriesError) as caught:
        _generate(model_server, start="json_object", probing=False)

    assert caught.value.code == "upstream_error" and "Bad Request" in caught.value.message
    assert _formats(model_server) == ["json_schema", "json_object", "json_object"]


def test_openrouter_quotes_the_providers_refusal(model_server: ModelServer) -> None:
    """OpenRouter answers 400 "Provider returned error" and quotes the provider in error.metadata.raw."""
    raw = '{"error": {"message": "response_format json_schema is not supported for this model"}}'
    body = {"error": {"message": "Provider returned error", "code": 400, "metadata": {"raw": raw}}}
    model_server.script("chat", Reply(400, body))

    assert _generate(model_server, probing=False).structured_output == "json_object"


@pytest.mark.parametrize(
    "message",
    [
        "This model's maximum context length is 4096 tokens. However, you requested 5120 tokens.",  # vLLM, OpenAI
        "the request exceeds the available context size, try increasing it",  # llama.cpp
        "The model `fake-chat` does not exist.",  # vLLM
    ],
)
def test_a_400_about_something_else_never_downgrades(model_server: ModelServer, message: str) -> None:
    model_server.script("chat", Reply(400, {"error": {"message": message}}))

    with pytest.raises(MemoriesError) as caught:
        _generate(model_server)  # probing: the very first request to this server

    assert caught.value.code == "upstream_error" and message in caught.value.message
    assert _formats(model_server) == ["json_schema"]
    assert "structured_output" not in caught.value.details


def test_each_fallback_is_a_retry(model_server: ModelServer) -> None:
    """R-39: with no retry left the refusal is the error; the level it reached is kept for the next ask."""
    model_server.script("chat", Reply(400, {"error": {"message": "response_format json_schema is not supported"}}))

    with pytest.raises(MemoriesError) as caught:
        _generate(model_server, retries=0)

    assert caught.value.code == "upstream_error" and "json_schema is not supported" in caught.value.message
    assert caught.value.details["structured_output"] == "json_object"
    assert len(model_server.calls("chat")) == 1


def test_a_fallback_and_a_429_share_the_retries(model_server: ModelServer) -> None:
    model_server.script(
        "chat",
        Reply(400, {"error": {"message": "Invalid parameter: 'response_format' of type 'json_schema'"}}),
        Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "1"}),
        Reply(429, {"error": {"message": "rate limited"}}),
    )
    context = _Context()

    with pytest.raises(MemoriesError) as caught:
        _generate(model_server, context=context)

    assert caught.value.code == "upstream_unavailable" and len(model_server.calls("chat")) == 3
    assert context.notes == ["retrying 2/3 after 400", "retrying 3/3 after 429, waiting 1 s"]


def test_gemini_asks_for_the_schema_in_generation_config(model_server: ModelServer) -> None:
    _generate(model_server, "gemini")

    (call,) = model_server.calls("gemini_generate")
    config = call.body["generationConfig"]
    assert config["responseMimeType"] == "application/json"
    schema = config["responseSchema"]
    assert schema["type"] == "OBJECT" and schema["required"] == ["answer", "citations"]
    assert schema["properties"]["answer"] == {"type": "STRING"}
    assert schema["properties"]["citations"]["items"]["enum"] == LABELS


def test_gemini_json_mode_refused_falls_back_to_plain_text(model_server: ModelServer) -> None:
    """Gemma models on the Gemini API: 400 INVALID_ARGUMENT "Json mode is not enabled for models/…"."""
    refusal = {"error": {"code": 400, "message": "Json mode is not enabled for models/gemma-3-27b-it",
                         "status": "INVALID_ARGUMENT"}}  # fmt: skip
    model_server.script("gemini_generate", Reply(400, refusal))

    reply = _generate(model_server, "gemini")

    first, second = (call.body["generationConfig"] for call in model_server.calls("gemini_generate"))
    assert "responseSchema" in first and second == {"maxOutputTokens": 1024}
    assert reply.structured_output == "none"

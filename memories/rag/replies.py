"""A generation reply as servers really return it: the one answer object in what the model wrote (R-43).

The reasoning a model writes before its answer is removed first, and nothing inside it is ever read (a draft
there may cite labels that were never sent); then every JSON object written outside it is found, in a Markdown
fence or in the prose around one. Exactly one answer object (an object with ``answer`` or ``citations``) must
remain: the same object written twice counts once, two different ones are refused.

Shapes accepted, with the server and model family each comes from (``tests/unit/test_replies.py`` holds one
reply of each):

==================================================  ========================================================
the reply                                           where it comes from
==================================================  ========================================================
the object alone                                    structured output (``json_schema``/``json_object``,
                                                    Gemini's ``responseSchema``); any instruct model
the object in a ````json`` (or bare, or ``~~~``)     Llama, Gemma, Mistral, Qwen instruct models on Ollama,
fence, with prose before and after it               llama.cpp, LM Studio, vLLM; Gemini without JSON mode
the object in prose without a fence                 small local models ("Here is the answer: {...} Hope that
                                                    helps!")
``<think>…</think>`` then the answer                DeepSeek-R1 (and its Qwen/Llama distills), Qwen3, QwQ,
                                                    GLM-4.5+, Phi-4-reasoning on Ollama before 0.9, llama.cpp
                                                    with ``--reasoning-format none``, vLLM without a
                                                    reasoning parser
``…</think>`` then the answer (no opening tag)      the same models when the chat template opens the tag in
                                                    the prompt (DeepSeek-R1-0528, R1 distills, Qwen3 on vLLM
                                                    and llama.cpp)
an empty ``<think>\\n\\n</think>`` first             Qwen3 with thinking off (``/no_think``), DeepSeek-R1 on
                                                    Ollama when it skips thinking
``<thinking>``, ``<reasoning>``, ``<thought>``        fine-tunes trained on those tags (``<reasoning>…
                                                    </reasoning><answer>…``), EXAONE Deep
``[THINK]…[/THINK]``                                Mistral's Magistral on llama.cpp, vLLM, Ollama
``◁think▷…◁/think▷``                                Moonshot's Kimi-VL thinking models
``<|begin_of_thought|>…<|end_of_thought|>``         Sky-T1, OpenThinker and Bespoke-Stratos distills
``<|channel|>analysis<|message|>…<|end|>`` then     OpenAI's gpt-oss (harmony format) when the server does not
the ``final`` channel                               parse it into a reasoning field
reasoning in ``reasoning_content``, ``reasoning``   DeepSeek's API, vLLM and llama.cpp reasoning parsers,
or ``thinking``; Gemini's ``"thought": true``       LM Studio, Ollama's ``/v1``, OpenRouter; Gemini 2.5
parts                                               (never read: :mod:`memories.providers`)
==================================================  ========================================================

An opening tag that is never closed makes the rest of the reply reasoning (a reply cut inside its thinking has no
answer). Refused as before: no object, an object that is not an answer, two different answer objects, malformed
JSON (single quotes, trailing commas, a cut object). A JSON string may hold raw line breaks (``strict=False``):
small models write multi-line answers that way.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from typing import Any

from memories.errors import MemoriesError

_TAGS = ("think", "thinking", "reasoning", "thought")
_REASONING = [
    (re.compile(rf"<{tag}>", re.IGNORECASE), re.compile(rf"</{tag}>", re.IGNORECASE), True) for tag in _TAGS
] + [
    (re.compile(re.escape("[THINK]")), re.compile(re.escape("[/THINK]")), True),
    (re.compile(re.escape("◁think▷")), re.compile(re.escape("◁/think▷")), True),
    (re.compile(re.escape("<|begin_of_thought|>")), re.compile(re.escape("<|end_of_thought|>")), True),
    # gpt-oss ends every message with <|end|>; only the analysis channel's is the end of reasoning.
    (re.compile(re.escape("<|channel|>analysis<|message|>")), re.compile(re.escape("<|end|>")), False),
]
"""(opening, closing, may the opening be in the prompt) markers of inline reasoning, for the families in the
module docstring's table."""

MAX_OBJECT_STARTS = 256
"""Most places at which a JSON object is tried: each failed try may read to the end of the reply (and its error
counts lines up to where it stopped), so a reply of prose full of ``{"`` stays cheap to read."""

MAX_REPLY_CHARS = 1024 * 1024
"""Longest reply read, in code points once its reasoning is removed: a reply of ``max_output_tokens`` (at most
65,536 tokens) is far shorter; a longer one is not read (with :data:`MAX_OBJECT_STARTS`, the reading stays
bounded whatever a server sends)."""

_OBJECT_START = re.compile(r'\{\s*+["}]')

_DECODER = json.JSONDecoder(strict=False)


def invalid_output(reason: str, details: dict[str, object] | None = None) -> MemoriesError:
    """``invalid_model_output`` with ``reason`` (also in ``details.reason``)."""
    return MemoriesError("invalid_model_output", f"rag.generation: {reason}", {"reason": reason, **(details or {})})


def without_reasoning(reply: str) -> str:
    """The reply without the reasoning written inline (see the module docstring); linear in its length.

    >>> without_reasoning("<think>draft {}</think> A")
    ' A'
    >>> without_reasoning("the template opened it</think>A")
    'A'
    >>> without_reasoning("A<think>cut in the middle")
    'A'
    """
    text = reply
    for opening, closing, opened_in_prompt in _REASONING:
        position = 0
        first_close = closing.search(text) if opened_in_prompt else None
        if first_close is not None and opening.search(text, 0, first_close.start()) is None:
            position = first_close.end()  # the opening tag was in the prompt
        pieces: list[str] = []
        while (start := opening.search(text, position)) is not None:
            pieces.append(text[position : start.start()])
            end = closing.search(text, start.end())
            position = len(text) if end is None else end.end()
        pieces.append(text[position:])
        text = "".join(pieces)
    return text


def answer_object(reply: str) -> dict[str, Any]:
    """The one answer object of ``reply`` (see the module docstring); its fields are not checked here.

    Raises:
        MemoriesError: ``invalid_model_output``: no JSON object outside the reasoning, JSON that is not an object,
            or different answer objects.

    >>> answer_object('Sure.\\n```json\\n{"answer": "Yes [S1].", "citations": ["S1"]}\\n```\\nHope that helps!')
    {'answer': 'Yes [S1].', 'citations': ['S1']}
    """
    text = without_reasoning(reply).strip()
    if not text:
        raise invalid_output("the reply holds only reasoning, no answer after it")
    if len(text) > MAX_REPLY_CHARS:
        raise invalid_output(f"the reply is longer than {MAX_REPLY_CHARS:,} characters outside its reasoning")
    try:
        whole = _DECODER.decode(text)
    except (ValueError, RecursionError):
        pass
    else:
        if not isinstance(whole, dict):
            raise invalid_output("the reply is JSON but not an object")
        return whole
    answers: list[dict[str, Any]] = []
    others: list[dict[str, Any]] = []
    for found in _objects(text):
        kept = answers if "answer" in found or "citations" in found else others
        if len(kept) < 2 and found not in kept:  # only "one" or "two different" matters: never quadratic
            kept.append(found)
        if len(answers) > 1:
            raise invalid_output("the reply holds two different answer objects")
    if answers:
        return answers[0]
    if len(others) == 1:
        return others[0]  # not an answer: the field checks name what is missing
    raise invalid_output("the reply is not one JSON object")


def _objects(text: str) -> Iterator[dict[str, Any]]:
    """Every JSON object written in ``text`` at the top level (not inside another one), in order, tried at the
    first :data:`MAX_OBJECT_STARTS` places that can start one (``{`` then ``"`` or ``}``)."""
    position = 0
    for start in itertools.islice((match.start() for match in _OBJECT_START.finditer(text)), MAX_OBJECT_STARTS):
        if start < position:
            continue  # inside an object already found
        try:
            value, end = _DECODER.raw_decode(text, start)
        except (ValueError, RecursionError):  # not JSON, or nested past the interpreter's limit
            continue
        if isinstance(value, dict):
            yield value
        position = end

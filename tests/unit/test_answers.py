"""``rag ask`` pieces as plain functions: evidence, sources, reply checks (R-43), generation replies of both
protocols, and the learned reranker's reply (R-36; issue 8, acceptance 5's reply cases and 6). The reply shapes of
real servers are tested against the loopback fake in ``tests/integration/test_generation.py``."""

from __future__ import annotations

import doctest
import json

import pytest

from memories.errors import MemoriesError
from memories.models import generation, rerank
from memories.models.generation import COMPATIBLE, GEMINI
from memories.models.rerank import reranked_order
from memories.rag import answers, replies
from memories.rag.answers import is_evidence, parse_answer, select_sources


@pytest.mark.parametrize("module", [answers, replies, generation, rerank])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


def test_evidence_needs_half_of_the_longer_terms_or_the_similarity() -> None:
    assert is_evidence(["postgres", "vacuum", "a"], frozenset({"vacuum"}), None, None)
    assert not is_evidence(["postgres", "vacuum", "tuning"], frozenset({"vacuum"}), None, None)
    assert is_evidence(["postgres", "vacuum", "tuning"], frozenset(), 0.7, 0.6)
    assert not is_evidence(["栈", "堆"], frozenset({"栈"}), None, None)
    assert is_evidence(["栈", "堆"], frozenset({"栈", "堆"}), None, None)


def test_sources_stop_at_the_context_limit() -> None:
    sources = select_sources([("t", "x" * 600), ("t", "y" * 600), ("t", "z")], 1000)

    assert [source.label for source in sources] == ["S1"]


@pytest.mark.parametrize(
    ("reply", "phrase"),
    [
        ('{"answer": "Yes [S3].", "citations": ["S1"]}', "S3"),
        ('{"answer": "Yes.", "citations": ["S9"]}', "S9"),
        ("Sure! Here you go.", "not one JSON object"),
        ('["S1"]', "not an object"),
        ('{"answer": 3, "citations": []}', '"answer"'),
        ('{"answer": "x", "citations": "S1"}', '"citations"'),
        ('<think>{"answer": "x", "citations": []}', "only reasoning"),
        ('{"answer": "x", "citations": []} {"answer": "y", "citations": []}', "two different answer objects"),
        ('{"answer": "x", "citations": [],}', "not one JSON object"),
    ],
)
def test_bad_replies_are_invalid_model_output(reply: str, phrase: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_answer(reply, ["S1", "S2"])

    assert caught.value.code == "invalid_model_output" and phrase in caught.value.message


def test_inline_labels_join_the_citations() -> None:
    assert parse_answer('{"answer": "A [S2] and [S1].", "citations": ["S2"]}', ["S1", "S2"]) == (
        "A [S2] and [S1].",
        ["S2", "S1"],
    )


@pytest.mark.parametrize(
    "answer", ["A [S1, S9].", "A [S1,S9].", "A [S1; S9].", "甲［S9］。", "甲【S9】。", "甲【S1、S9】。"]
)
def test_an_invented_label_in_a_list_or_in_full_width_brackets_is_refused(answer: str) -> None:
    """Models write several labels in one bracket, and Chinese answers use full-width brackets: an invented label
    there is as invented as in ``[S9]``."""
    with pytest.raises(MemoriesError) as caught:
        parse_answer(json.dumps({"answer": answer, "citations": ["S1"]}), ["S1", "S2"])
    assert caught.value.details["invented"] == ["S9"]


def test_labels_in_lists_and_full_width_brackets_join_the_citations() -> None:
    answer = "甲【S2】，乙［S1、S3］ and [S2, S1] (not [Section 4] or [S3 bucket])."
    reply = json.dumps({"answer": answer, "citations": []})
    assert parse_answer(reply, ["S1", "S2", "S3"])[1] == ["S2", "S1", "S3"]


def test_a_truncated_chat_completion_names_the_tokens() -> None:
    reply = {
        "choices": [{"finish_reason": "length", "message": {"content": '{"ans'}}],
        "usage": {"completion_tokens": 64},
    }

    with pytest.raises(MemoriesError) as caught:
        COMPATIBLE.text(reply, 64)

    assert "finish_reason: length" in caught.value.message and "64 tokens used" in caught.value.message


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "thinking"])
def test_reasoning_fields_are_never_read(field: str) -> None:
    reply = {"choices": [{"finish_reason": "stop", "message": {"content": None, field: "{}"}}]}

    with pytest.raises(MemoriesError, match=f"no answer outside its reasoning \\({field}\\)"):
        COMPATIBLE.text(reply, 64)


def test_reasoning_blocks_anywhere_are_removed_and_never_read() -> None:
    reply = '<think>{"answer": "a", "citations": ["S9"]}</think>{"answer": "b", "citations": []}<think>c</think>'

    assert parse_answer(reply, ["S1"]) == ("b", [])


@pytest.mark.parametrize(
    ("reply", "phrase"),
    [
        (
            {"candidates": [{"finishReason": "MAX_TOKENS"}], "usageMetadata": {"thoughtsTokenCount": 60}},
            "MAX_TOKENS, 60",
        ),
        ({"promptFeedback": {"blockReason": "SAFETY"}}, "blockReason: SAFETY"),
        ({"candidates": []}, "no candidates"),
        ({"candidates": [{"finishReason": "SAFETY", "content": {"parts": [{"text": "x"}]}}]}, "SAFETY"),
    ],
)
def test_bad_gemini_replies(reply: object, phrase: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        GEMINI.text(reply, 64)

    assert caught.value.code == "invalid_model_output" and phrase in caught.value.message


def test_gemini_thought_parts_are_skipped() -> None:
    reply = {"candidates": [{"content": {"parts": [{"text": "I think", "thought": True}, {"text": "{}"}]}}]}

    assert GEMINI.text(reply, 64) == "{}"


@pytest.mark.parametrize(
    "results",
    [
        [{"index": 2, "relevance_score": 0.91}, {"index": 0, "relevance_score": 0.12}],
        [
            {"index": 0, "relevance_score": 0.12},
            {"index": 2, "relevance_score": 0.91},
            {"index": 1, "relevance_score": 0.01},
        ],
        [
            {"index": 0, "relevance_score": -2.3},
            {"index": 1, "relevance_score": -11.0},
            {"index": 2, "relevance_score": 7.7},
        ],
    ],
)
def test_rerank_orders_by_score_then_keeps_the_fused_order(results: list[dict[str, float]]) -> None:
    assert [index for index, _ in reranked_order({"results": results}, 3, 2)] == [2, 0, 1]


@pytest.mark.parametrize(
    ("reply", "phrase"),
    [
        ([{"index": 0, "score": 0.9}], '{"results": [{"index": <int>, "relevance_score": <number>}, ...]}'),
        ({"results": [{"index": 0, "relevance_score": 1}, {"index": 0, "relevance_score": 2}]}, "twice"),
        ({"results": [{"index": 3, "relevance_score": 1}]}, "index 3"),
        ({"results": [{"index": 0, "relevance_score": "high"}]}, "finite relevance_score"),
    ],
)
def test_bad_rerank_replies_fail(reply: object, phrase: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        reranked_order(reply, 3, 2)

    assert phrase in caught.value.message

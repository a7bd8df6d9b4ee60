"""``rag ask`` pieces as plain functions: evidence, sources, reply checks (R-43), generation replies of both
protocols, and the learned reranker's reply (R-36; issue 8, acceptance 5's reply cases and 6). The reply shapes of
real servers are tested against the loopback fake in ``tests/integration/test_generation.py``."""

from __future__ import annotations

import doctest
import json

import pytest

from memories import worker_protocol as w
from memories.config import GenerationConfig
from memories.errors import MemoriesError
from memories.providers import compatible, gemini, generation
from memories.providers.compatible import CompatibleGeneration, reranked_order
from memories.providers.gemini import GeminiGeneration
from memories.rag import answers, replies, stopwords
from memories.rag.analysis import analyze_query
from memories.rag.answers import QuestionTerms, is_evidence, parse_answer, select_sources
from memories.rag.fusion import Candidate
from memories.rag.pipeline import VaultCache

COMPATIBLE = CompatibleGeneration(
    GenerationConfig(protocol="compatible", url="http://127.0.0.1/v1/chat/completions", model="m", max_output_tokens=64)
)
GEMINI = GeminiGeneration(
    GenerationConfig(
        protocol="gemini", url="http://127.0.0.1/v1beta/models/m:generateContent", model="m", max_output_tokens=64
    )
)


@pytest.mark.parametrize("module", [answers, replies, stopwords, generation, gemini, compatible])
def test_doctests(module: object) -> None:
    assert doctest.testmod(module).failed == 0  # type: ignore[arg-type]


def test_evidence_needs_half_of_the_longer_terms_or_the_similarity() -> None:
    def asked(terms: list[str]) -> QuestionTerms:
        return QuestionTerms.of(terms, 1, {})

    assert is_evidence(asked(["postgres", "vacuum", "a"]), Candidate("c", {"vacuum"}), None, None)
    assert not is_evidence(asked(["postgres", "vacuum", "tuning"]), Candidate("c", {"vacuum"}), None, None)
    assert is_evidence(asked(["postgres", "vacuum", "tuning"]), Candidate("c", ()), 0.7, 0.6)
    assert not is_evidence(asked(["栈", "堆"]), Candidate("c", {"栈"}), None, None)
    assert is_evidence(asked(["栈", "和", "堆"]), Candidate("c", {"栈", "堆"}), None, None)


def _terms(text: str) -> list[str]:
    return list(analyze_query(text).terms)


@pytest.mark.parametrize(
    ("question", "note"),
    [
        (
            "What does the evidence say about ZEBRAMARK calibration?",
            "ZEBRAMARK calibration evidence: drift under 0.2 %",
        ),
        ("How do I restore a restic snapshot on the NAS?", "Restore: restic restore latest --target /srv (NAS)"),
        (
            "Could you tell me whether my notes mention Kubernetes ingress?",
            "Kubernetes ingress: nginx, TLS via cert-manager",
        ),
        ("数据库迁移是什么？", "数据库迁移：先备份，再运行脚本"),
        ("為什麼要用哪些方法做資料庫遷移？", "数据库迁移的方法：蓝绿部署"),
        ("如何配置反向代理？", "反向代理配置：nginx 的 proxy_pass"),
    ],
)
def test_question_words_carry_nothing(question: str, note: str) -> None:
    """Issue 22 item 3: a one-note vault whose note holds every content word of a natural question is evidence;
    the question's words of asking (what, does, say; 什么, 为什么, 哪些, 如何) no longer count against it."""
    asked = QuestionTerms.of(_terms(question), 1, dict.fromkeys(_terms(note), 1))

    assert asked.held_by(set(_terms(note))), asked.weights


def test_a_word_most_chunks_hold_weighs_little_in_a_large_vault() -> None:
    """The project's name in every note is not what a question about it asks; in a vault of three notes it still
    counts as much as any word (three notes cannot tell which words are common)."""
    question = _terms("Kubernetes ingress certificates")
    large = QuestionTerms.of(question, 2000, {"kubernetes": 1900, "ingress": 12, "certificates": 30})
    small = QuestionTerms.of(question, 3, {"kubernetes": 3, "ingress": 1})

    assert not large.held_by({"kubernetes", "pods"}) and large.held_by({"ingress", "certificates"})
    assert small.held_by({"kubernetes", "certificates"})
    assert large.weights["certificates"] < large.weights["ingress"]


def test_a_word_no_chunk_holds_weighs_as_the_rarest_one() -> None:
    """A question in other words than the note (calibrate, calibration) keeps half: the absent word is not the
    most telling one."""
    asked = QuestionTerms.of(_terms("calibrate zebramark"), 500, {"zebramark": 1})

    assert asked.weights["calibrate"] == asked.weights["zebramark"] and asked.held_by({"zebramark"})


def test_a_question_of_stop_words_only_is_never_lexical_evidence() -> None:
    asked = QuestionTerms.of(_terms("What is this about?"), 10, {"what": 10, "this": 10})

    assert asked.weights == {} and not is_evidence(asked, Candidate("c", {"what", "is", "this", "about"}), None, None)


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
        COMPATIBLE.text(reply)

    assert "finish_reason: length" in caught.value.message and "64 tokens used" in caught.value.message


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning", "thinking"])
def test_reasoning_fields_are_never_read(field: str) -> None:
    reply = {"choices": [{"finish_reason": "stop", "message": {"content": None, field: "{}"}}]}

    with pytest.raises(MemoriesError, match=f"no answer outside its reasoning \\({field}\\)"):
        COMPATIBLE.text(reply)


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
        GEMINI.text(reply)

    assert caught.value.code == "invalid_model_output" and phrase in caught.value.message


def test_gemini_thought_parts_are_skipped() -> None:
    reply = {"candidates": [{"content": {"parts": [{"text": "I think", "thought": True}, {"text": "{}"}]}}]}

    assert GEMINI.text(reply) == "{}"


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


def _ask_bm25(notes: dict[str, str], question: str) -> list[str]:
    """The record ids ``rag ask`` shows for ``question`` in bm25 mode: the index worker's own cache and query."""
    cache = VaultCache("v")
    cache.apply([w.IndexRecord(id=i, revision=1, kind="card", title=i, body=body) for i, body in notes.items()], [])
    cache.stamp(1)
    request = w.IndexQuery(
        vault="v", epoch=1, query=question, mode="bm25", match_mode="any", limit=8, cards_only=False,
        no_rerank=False, evidence=w.Evidence(),
    )  # fmt: skip
    return [hit.asset_id for hit in cache.search(request)]


def test_the_one_note_question_of_the_issue_is_evidence_in_bm25_mode() -> None:
    """Issue 22: what, does, the, say, about counted as query words, so the note holding every content word held
    three of eight and the ask was insufficient_evidence without calling the service."""
    notes = {"n1": "ZEBRAMARK calibration evidence: drift stayed under 0.2 % across three runs."}

    assert _ask_bm25(notes, "What does the evidence say about ZEBRAMARK calibration?") == ["n1"]
    assert _ask_bm25(notes, "What does the evidence say about kubernetes ingress?") == []


def test_rag_asks_bm25_query_is_its_content_words() -> None:
    """A chunk that shares only the question's words of asking is not found, let alone shown."""
    notes = {"asking": "What does it say? How about that.", "answer": "Restic snapshots are pruned weekly."}

    assert _ask_bm25(notes, "What does the note say about restic snapshots?") == ["answer"]
    assert _ask_bm25(notes, "什么是什么？") == []

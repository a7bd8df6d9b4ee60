"""Reciprocal Rank Fusion and the lightweight reranker (issue 4, acceptance 5; R-34, R-35)."""

from __future__ import annotations

import doctest
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memories.rag import fusion
from memories.rag.fusion import RerankCandidate, reciprocal_rank_fusion, rerank

documents = st.sampled_from([f"d{index}" for index in range(12)])
rankings_strategy = st.lists(st.lists(documents, unique=True, max_size=10), min_size=0, max_size=4)


def test_docstring_examples() -> None:
    assert doctest.testmod(fusion).failed == 0


# --- RRF against hand-computed values ---------------------------------------------------------------------------


def test_rank_one_in_both_lists_scores_two_sixty_firsts() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["a", "c", "d"]])
    assert fused[0] == ("a", 2 / 61)
    scores = dict(fused)
    assert scores["c"] == 1 / 63 + 1 / 62
    assert scores["b"] == 1 / 62
    assert scores["d"] == 1 / 63
    assert [document for document, _ in fused] == ["a", "c", "b", "d"]


def test_k_is_60_by_default_and_can_change() -> None:
    assert fusion.RRF_K == 60
    assert reciprocal_rank_fusion([["a"]], k=1) == [("a", 0.5)]
    with pytest.raises(ValueError):
        reciprocal_rank_fusion([["a"]], k=0)


@pytest.mark.parametrize("empty_first", [True, False])
def test_one_empty_ranking_leaves_the_other_unchanged(empty_first: bool) -> None:
    ranking = ["e", "a", "d", "b", "c"]
    rankings = [[], ranking] if empty_first else [ranking, []]
    fused = reciprocal_rank_fusion(rankings)
    assert [document for document, _ in fused] == ranking
    assert [score for _, score in fused] == [1 / (60 + rank) for rank in range(1, 6)]


def test_no_rankings_or_only_empty_ones_fuse_to_nothing() -> None:
    assert reciprocal_rank_fusion([]) == []
    assert reciprocal_rank_fusion([[], []]) == []


def test_ties_go_to_the_better_best_rank() -> None:
    # An exact tie needs k = 1: ranks (1, 5) give 1/2 + 1/6 = 2/3, ranks (2, 2) give 1/3 + 1/3 = 2/3.
    fused = reciprocal_rank_fusion([["x", "y", "p", "q", "r"], ["s", "y", "t", "u", "x"]], k=1)
    scores = dict(fused)
    assert scores["x"] == scores["y"] == 2 / 3
    order = [document for document, _ in fused]
    assert order.index("x") < order.index("y")  # best rank 1 beats best rank 2


def test_ties_with_the_same_best_rank_go_to_the_earlier_list() -> None:
    # "v" is first in the second list only, "b" first in the first list only: both 1/61.
    fused = reciprocal_rank_fusion([["b", "c"], ["v", "w"]])
    assert [document for document, _ in fused] == ["b", "v", "c", "w"]
    fused = reciprocal_rank_fusion([["v", "w"], ["b", "c"]])
    assert [document for document, _ in fused] == ["v", "b", "w", "c"]


def test_repeats_within_a_ranking_count_once_at_the_best_position() -> None:
    assert reciprocal_rank_fusion([["a", "b", "a"]]) == [("a", 1 / 61), ("b", 1 / 62)]


# --- RRF properties --------------------------------------------------------------------------------------------


@given(rankings_strategy)
def test_rrf_scores_follow_the_formula(rankings: list[list[str]]) -> None:
    fused = reciprocal_rank_fusion(rankings)
    union = {document for ranking in rankings for document in ranking}
    assert [document for document, _ in fused] == list(dict.fromkeys(document for document, _ in fused))
    assert {document for document, _ in fused} == union
    for document, score in fused:
        expected = sum(
            (Fraction(1, 60 + ranking.index(document) + 1) for ranking in rankings if document in ranking),
            Fraction(0),
        )
        assert score == float(expected)


@given(rankings_strategy)
def test_rrf_order_is_by_score_then_best_rank_then_list_order(rankings: list[list[str]]) -> None:
    fused = reciprocal_rank_fusion(rankings)

    def key(document: str) -> tuple[Fraction, int, tuple[float, ...]]:
        ranks = [ranking.index(document) + 1 if document in ranking else float("inf") for ranking in rankings]
        exact = sum((Fraction(1, 60 + int(rank)) for rank in ranks if rank != float("inf")), Fraction(0))
        return (-exact, int(min(ranks)), tuple(float(rank) for rank in ranks))

    keys = [key(document) for document, _ in fused]
    assert keys == sorted(keys)
    assert len(set(keys)) == len(keys)  # the tie rule is total
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)


@given(st.lists(documents, unique=True, max_size=10), st.integers(0, 3), st.integers(1, 4))
def test_a_single_non_empty_ranking_comes_back_unchanged(ranking: list[str], position: int, lists: int) -> None:
    rankings: list[list[str]] = [[] for _ in range(lists)]
    rankings.insert(min(position, lists), ranking)
    assert [document for document, _ in reciprocal_rank_fusion(rankings)] == ranking


@given(rankings_strategy)
def test_rrf_is_deterministic(rankings: list[list[str]]) -> None:
    assert reciprocal_rank_fusion(rankings) == reciprocal_rank_fusion([list(r) for r in rankings])


# --- Reranker --------------------------------------------------------------------------------------------------


def test_rerank_values_by_hand() -> None:
    query_terms = ["git", "rebase", "branch", "git"]
    candidates = [
        RerankCandidate("none", 0.030, {"commit"}, "a commit"),
        RerankCandidate("half", 0.020, {"git", "rebase", "merge"}, "git merge then rebase"),
        RerankCandidate("phrase", 0.016, {"git", "rebase", "branch"}, "to git rebase branch onto main"),
    ]
    result = dict(rerank(query_terms, "git rebase branch", candidates))
    assert result["none"] == pytest.approx(0.030)
    assert result["half"] == pytest.approx(0.020 * (1 + 0.5 * 2 / 3))
    assert result["phrase"] == pytest.approx(0.016 * (1 + 0.5 + 0.25))
    assert [document for document, _ in rerank(query_terms, "git rebase branch", candidates)] == [
        "none",
        "phrase",
        "half",
    ]


def test_rerank_moves_negative_cosines_up_too() -> None:
    candidates = [
        RerankCandidate("plain", -0.20, set(), ""),
        RerankCandidate("covered", -0.30, {"rust"}, "rust"),
    ]
    result = dict(rerank(["rust"], "rust", candidates))
    assert result["covered"] == pytest.approx(-0.30 / 1.75)
    assert result["covered"] > result["plain"] == -0.20


def test_rerank_without_query_terms_or_phrase_changes_nothing() -> None:
    candidates = [RerankCandidate(str(index), score, {"a"}, "a") for index, score in enumerate([0.5, 0.3, 0.3])]
    assert rerank([], "", candidates) == [("0", 0.5), ("1", 0.3), ("2", 0.3)]


def test_rerank_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        rerank(["a"], "a", [RerankCandidate("x", float("nan"), set(), "")])
    with pytest.raises(ValueError):
        rerank(["a"], "a", [], coverage_weight=-1)


candidate_strategy = st.builds(
    RerankCandidate,
    document=st.uuids().map(str),
    # Away from the subnormal range, where scaling by a power of two is no longer exact.
    score=st.floats(-1, 1).filter(lambda score: score == 0 or abs(score) > 1e-300),
    terms=st.sets(st.sampled_from(["a", "b", "c", "d"])),
    phrase_key=st.sampled_from(["", "a b", "x a b y", "c"]),
)


@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4),
    st.sampled_from(["", "a b", "c"]),
    st.lists(candidate_strategy, max_size=8, unique_by=lambda candidate: candidate.document),
)
def test_rerank_never_lowers_a_score_and_stays_sorted(
    terms: list[str], phrase: str, candidates: list[RerankCandidate[str]]
) -> None:
    result = rerank(terms, phrase, candidates)
    original = {candidate.document: candidate.score for candidate in candidates}
    assert sorted(document for document, _ in result) == sorted(original)
    for document, score in result:
        assert score >= original[document]
        assert (score >= 0) == (original[document] >= 0)
    scores = [score for _, score in result]
    assert scores == sorted(scores, reverse=True)


@given(
    st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=4),
    st.lists(candidate_strategy, max_size=8, unique_by=lambda candidate: candidate.document),
    st.sampled_from([2.0, 1024.0]),
)
def test_rerank_is_scale_free(terms: list[str], candidates: list[RerankCandidate[str]], factor: float) -> None:
    """Scaling every score by a constant scales the results and keeps the order.

    Powers of two scale floats exactly, so the comparison can be exact too.
    """
    scaled = [
        RerankCandidate(candidate.document, candidate.score * factor, candidate.terms, candidate.phrase_key)
        for candidate in candidates
    ]
    expected = [(document, score * factor) for document, score in rerank(terms, "a b", candidates)]
    assert rerank(terms, "a b", scaled) == expected

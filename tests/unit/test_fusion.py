"""Reciprocal Rank Fusion and the lightweight reranker (issue 4, acceptance 5; R-34, R-35)."""

from __future__ import annotations

import doctest
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memories.rag import fusion
from memories.rag.fusion import Candidate, QueryFacts, coverage, fuse, prefer_script, reciprocal_rank_fusion, rerank

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


# --- Fusion rules (issue 11, acceptance 2) ----------------------------------------------------------------------


def _facts(*terms: str, weights: dict[str, float] | None = None, **kwargs: object) -> QueryFacts:
    return QueryFacts(weights=weights or dict.fromkeys(terms, 1.0), **kwargs)  # type: ignore[arg-type]


def _ranking(*documents: str, language: str | None = None) -> list[Candidate[str]]:
    return [Candidate(document, set(), language=language) for document in documents]  # type: ignore[arg-type]


def test_a_confidently_wrong_lexical_list_keeps_the_vector_answer_first() -> None:
    # "How did Nadal do in the 2019 final?" over paragraphs in two languages: BM25 is led by English paragraphs
    # that share only the name and the number; the vector arm puts the Chinese answer first.
    weights = {"how": 0.8, "did": 0.9, "nadal": 4.0, "do": 0.7, "2019": 3.0, "final": 2.5, "in": 0.1, "the": 0.01}
    query = _facts(weights=weights, language="latin")
    lexical = [Candidate(f"distractor{i}", {"nadal", "2019", "the", "in"}, language="latin") for i in range(5)]
    vector = _ranking("answer", language="han") + _ranking("distractor3", "distractor0", language="latin")
    fused = fuse(query, lexical, vector)
    # The answer keeps its place; the distractors hold 59 % of the query's weight, so BM25 does not reorder them.
    assert [document for document, _ in fused][:3] == ["answer", "distractor3", "distractor0"]
    candidates = {c.document: c for c in [*lexical, *vector]}
    reranked = rerank(query, [(candidates[document], score) for document, score in fused])
    assert reranked[0][0] == "answer"


def test_a_confidently_wrong_lexical_list_on_sentences_keeps_the_vector_answer_first() -> None:
    # "where was hillary clinton born" over the sentences of one article (issue 24: wikiqa-sent-en): every sentence
    # holds the article's title words, BM25 ranks those that also hold "where" and "was" first, and the answer
    # ("... born October 26, 1947") holds 3/4 of the query's weight at BM25 rank 4. None holds the whole question,
    # so BM25's order among them is no evidence: neither in the fusion nor in the reranker.
    weights = {"where": 1.5, "was": 0.2, "hillary": 2.0, "clinton": 2.0, "born": 2.0}
    query = _facts(weights=weights, phrase="where was hillary clinton born", language="latin")
    title = {"hillary", "clinton"}
    lexical = [
        Candidate("where-was", title | {"where", "was"}, "hillary clinton was where", "latin"),
        Candidate("was-1", title | {"was"}, "hillary clinton was", "latin"),
        Candidate("was-2", title | {"was"}, "hillary clinton was", "latin"),
        Candidate("answer", title | {"born"}, "hillary clinton born october 26, 1947", "latin"),
    ]
    assert all(coverage(weights, fusion.held(query, c)) < fusion.LEXICAL_FLOOR for c in lexical)
    by_name = {c.document: c for c in lexical}
    vector = [by_name[name] for name in ["answer", "where-was", "was-1", "was-2"]]
    fused = fuse(query, lexical, vector)
    assert [document for document, _ in fused] == ["answer", "where-was", "was-1", "was-2"]
    reranked = rerank(query, [(by_name[document], score) for document, score in fused])
    assert [document for document, _ in reranked] == ["answer", "where-was", "was-1", "was-2"]
    # The vector mode's reranker alike: a sentence holding more of the question (80 %, not all of it) no longer
    # overturns the answer's better cosine (it did with the boost for any share: 0.575 x 1.40 > 0.580 x 1.39).
    was_born = Candidate("was-born", title | {"was", "born"}, "hillary clinton was born to", "latin")
    assert rerank(query, [(by_name["answer"], 0.580), (was_born, 0.575)])[0][0] == "answer"


def test_a_vague_vector_list_keeps_the_exact_lexical_match_first() -> None:
    query = _facts("dynamic", "port", "forwarding", phrase="dynamic port forwarding", language="latin")
    exact = Candidate("exact", {"dynamic", "port", "forwarding"}, "ssh dynamic port forwarding with -d", "latin")
    lexical = [exact, Candidate("ports", {"port"}, language="latin"), Candidate("dynamic", {"dynamic"})]
    vector = _ranking("vague1", "vague2", "vague3", "ports", "dynamic", *[f"v{i}" for i in range(20)], "exact")
    fused = fuse(query, lexical, vector)
    assert fused[0][0] == "exact"
    assert [document for document, _ in fused][1:4] == ["vague1", "vague2", "vague3"]
    candidates = {c.document: c for c in [*vector, *lexical]}
    assert rerank(query, [(candidates[document], score) for document, score in fused])[0][0] == "exact"


@pytest.mark.parametrize("empty", ["lexical", "vector"])
def test_one_empty_list_keeps_the_others_order(empty: str) -> None:
    query = _facts("a", "b")
    # "y" holds half of the query: under the floor, yet with no vector ranking there is nothing to outvote.
    lexical = [Candidate("x", {"a", "b"}), Candidate("y", {"a"}), Candidate("z", {"a", "b"})]
    if empty == "lexical":
        assert [document for document, _ in fuse(query, [], _ranking("z", "x", "y"))] == ["z", "x", "y"]
    else:
        assert [document for document, _ in fuse(query, lexical, [])] == ["x", "y", "z"]


@given(
    st.lists(documents, unique=True, max_size=10),
    st.dictionaries(documents, st.sets(st.sampled_from(["a", "b", "c"]))),
    st.dictionaries(documents, st.sampled_from([None, "han", "latin", "mixed"])),
    st.sampled_from([None, "han", "latin", "mixed"]),
    st.booleans(),
)
def test_with_one_arm_empty_the_others_order_comes_back_unchanged(
    order: list[str],
    terms: dict[str, set[str]],
    languages: dict[str, str | None],
    language: str | None,
    lexical_empty: bool,
) -> None:
    query = _facts(weights={"a": 2.0, "b": 1.0, "c": 0.5}, language=language)
    arm = [Candidate(d, terms.get(d, set()), language=languages.get(d)) for d in order]  # type: ignore[arg-type]
    fused = fuse(query, [], arm) if lexical_empty else fuse(query, arm, [])
    assert [document for document, _ in fused] == order
    assert [score for _, score in fused] == [1 / (fusion.RRF_K + rank) for rank in range(1, len(order) + 1)]


def test_a_bm25_rank_counts_only_for_a_chunk_that_holds_the_query() -> None:
    query = _facts(weights={"git": 3.0, "rebase": 2.0, "onto": 1.0, "the": 0.01})
    assert coverage(query.weights, {"git", "rebase", "the"}) == pytest.approx(5.01 / 6.01)
    assert 5.01 / 6.01 < fusion.LEXICAL_FLOOR <= 6.0 / 6.01
    lexical = [
        Candidate("stopword", {"the"}),
        Candidate("most", {"git", "rebase", "the"}),
        Candidate("all", {"git", "rebase", "onto"}),
    ]
    vector = _ranking("v1", "v2", "all", "most")
    traces: dict[str, fusion.Trace] = {}
    fused = fuse(query, lexical, vector, traces=traces)
    assert [document for document, _ in fused] == ["all", "v1", "v2", "most"]  # only "all" has a BM25 vote
    assert [traces[d].vote for d in ["stopword", "most", "all"]] == [0.0, 0.0, 1.0]
    assert dict(fused)["all"] == 1 / 63 + 1 / 61  # vector rank 3, first among the chunks that count
    assert any("under the floor" in rule for rule in traces["most"].rules)
    assert [d for d, _ in fuse(query, lexical, vector, floor=0.0)][:2] == ["most", "all"]  # the old rule's floor 0


def test_a_han_word_written_in_the_chunk_counts_whatever_jiebas_cut() -> None:
    # The chunk was cut into 中国人民银行 and its sub-words; the query asks for 人民银行 (its rarest word).
    query = _facts(weights={"人民银行": 4.0, "人民": 1.0, "银行": 1.0, "通知": 1.0}, language="han")
    bank = Candidate("bank", {"中国人民银行", "人民", "银行", "发布"}, "中国人民银行发布", "han")
    assert fusion.held(query, bank) == {"人民银行", "人民", "银行"}
    assert [document for document, _ in fuse(query, [bank], [])] == ["bank"]  # 6/7 of the weight, not 2/7
    latin = Candidate("latin", {"rust"}, "rust 人民银行", "latin")
    assert fusion.held(_facts("rust", "银", language="latin"), latin) == {"rust", "银"}


def test_chunks_of_another_language_keep_the_places_the_vector_arm_gave_them() -> None:
    # An English question over a vault that holds the answer in Chinese (vector rank 2) and English notes that
    # share its words: BM25 lifts its own candidates but neither lifts nor buries the Chinese chunks.
    query = _facts("ownership", "rules", language="latin")
    lexical = [Candidate(name, {"ownership", "rules"}, language="latin") for name in ["en-a", "en-b", "en-c"]]
    vector = [
        Candidate("en-x", set(), language="latin"),
        Candidate("zh-answer", set(), language="han"),
        Candidate("en-c", {"ownership", "rules"}, language="latin"),
        Candidate("zh-other", set(), language="han"),
        Candidate("mixed", {"ownership"}, language="mixed"),
    ]
    fused = fuse(query, lexical, vector)
    # en-x (vector rank 1) and en-a (BM25 rank 1) tie at 1/61: the vector rank decides.
    assert [document for document, _ in fused] == ["en-c", "zh-answer", "en-x", "zh-other", "en-a", "en-b", "mixed"]
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)
    assert dict(fused)["zh-answer"] == pytest.approx(1 / 61)  # raised from 1/62 to the score of en-x below it
    # With the vector arm's first chunk in another language, that chunk stays first.
    assert fuse(query, lexical, [vector[1], *vector[2:]])[0][0] == "zh-answer"


@given(
    query_strategy := st.builds(
        QueryFacts,
        weights=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.floats(1e-6, 10), max_size=4),
        phrase=st.sampled_from(["", "a b", "c"]),
        language=st.sampled_from([None, "han", "latin", "mixed"]),
    ),
    st.lists(documents, unique=True, max_size=10),
    st.lists(documents, unique=True, max_size=10),
    st.dictionaries(documents, st.sampled_from([None, "han", "latin", "mixed"])),
    st.dictionaries(documents, st.sets(st.sampled_from(["a", "b", "c", "d"]))),
)
def test_fusion_never_moves_a_chunk_of_another_language(
    query: QueryFacts,
    lexical_order: list[str],
    vector_order: list[str],
    languages: dict[str, str | None],
    terms: dict[str, set[str]],
) -> None:
    def candidate(document: str) -> Candidate[str]:
        return Candidate(document, terms.get(document, set()), language=languages.get(document))  # type: ignore[arg-type]

    vector = [candidate(document) for document in vector_order]
    fused = fuse(query, [candidate(document) for document in lexical_order], vector)
    order = [document for document, _ in fused]
    assert sorted(order) == sorted(set(vector_order) | {d for d in lexical_order if d in order})
    for position, item in enumerate(vector):
        if not fusion.comparable(query, item) and position < len(order):
            assert order[position] == item.document
    scores = [score for _, score in fused]
    assert scores == sorted(scores, reverse=True)


# --- Reranker --------------------------------------------------------------------------------------------------


def test_rerank_values_by_hand() -> None:
    query = _facts(weights={"git": 2.0, "rebase": 1.0, "branch": 1.0}, phrase="git rebase branch")
    scored = [
        (Candidate("none", {"commit"}, "a commit"), 0.030),
        (Candidate("most", {"git", "rebase", "merge"}, "git merge then rebase"), 0.020),
        (Candidate("phrase", {"git", "rebase", "branch"}, "to git rebase branch onto main"), 0.016),
    ]
    result = dict(rerank(query, scored))
    assert result["none"] == pytest.approx(0.030)
    assert fusion.LEXICAL_FLOOR > 3 / 4  # three quarters of the query is not the query: no boost
    assert result["most"] == pytest.approx(0.020)
    assert result["phrase"] == pytest.approx(0.016 * (1 + fusion.COVERAGE_WEIGHT + fusion.PHRASE_WEIGHT))
    assert dict(rerank(query, scored, floor=0.5))["most"] == pytest.approx(0.020 * (1 + fusion.COVERAGE_WEIGHT * 3 / 4))


def test_rerank_keeps_chunks_of_another_language_in_place() -> None:
    query = _facts(weights={"ownership": 1.0, "rules": 1.0}, language="latin")
    scored = [
        (Candidate("zh-first", set(), language="han"), 0.030),
        (Candidate("en-weak", set(), language="latin"), 0.029),
        (Candidate("zh-third", set(), language="han"), 0.0285),
        (Candidate("en-full", {"ownership", "rules"}, language="latin"), 0.028),
        (Candidate("mixed", {"ownership"}, language="mixed"), 0.020),
    ]
    result = rerank(query, scored)
    assert [document for document, _ in result] == ["zh-first", "en-full", "zh-third", "en-weak", "mixed"]
    assert dict(result)["en-full"] == pytest.approx(0.028 * (1 + fusion.COVERAGE_WEIGHT))
    assert dict(result)["mixed"] == 0.020  # half of the query: under the floor, no boost
    assert dict(result)["zh-first"] == dict(result)["en-full"]  # raised to the score of the chunk below it
    assert dict(result)["zh-third"] == pytest.approx(0.029)  # en-weak's, below it
    with pytest.raises(ValueError, match="best first"):
        rerank(query, list(reversed(scored)))


def test_rerank_moves_negative_cosines_up_too() -> None:
    query = _facts("rust", phrase="rust")
    result = dict(rerank(query, [(Candidate("plain", set()), -0.20), (Candidate("covered", {"rust"}, "rust"), -0.30)]))
    assert result["covered"] == pytest.approx(-0.30 / (1 + fusion.COVERAGE_WEIGHT + fusion.PHRASE_WEIGHT))
    assert result["plain"] == -0.20


def test_rerank_without_query_terms_or_phrase_changes_nothing() -> None:
    scored = [(Candidate(str(index), {"a"}, "a"), score) for index, score in enumerate([0.5, 0.3, 0.3])]
    assert rerank(_facts(), scored) == [("0", 0.5), ("1", 0.3), ("2", 0.3)]


def test_rerank_refuses_bad_input() -> None:
    with pytest.raises(ValueError):
        rerank(_facts("a"), [(Candidate("x", set()), float("nan"))])
    with pytest.raises(ValueError):
        rerank(_facts("a"), [], coverage_weight=-1)


def test_words_held_only_through_script_folding_count_less_in_bm25() -> None:
    # A Simplified query over a Traditional translation that repeats 遷移 and a Simplified note that keeps the
    # English word: the translation scores a third higher in BM25, all of it through folding (the sample corpus).
    weights = {"数据库": 1.0, "迁移": 2.0, "回滚": 1.0}
    query = _facts(weights=weights, forms={term: {term} for term in weights})
    tw = Candidate("zh-tw", {"数据库", "迁移", "回滚"}, written=["Active Record 遷移", "資料庫遷移會回滾"])
    cn = Candidate("zh-cn", {"数据库", "回滚"}, written=["Active Record Migrations", "回滚数据库 migration"])
    en = Candidate("en", {"rollback"}, written=["Active Record Migrations", "rollback the migration"])
    assert fusion.folded_share(query, tw) == 1.0 and fusion.folded_share(query, cn) == 0.0
    assert fusion.folded_share(query, en) == 0.0  # nothing held: nothing to discount
    result = prefer_script(query, [(tw, 10.0), (cn, 7.5), (en, 1.0)])
    assert [document for document, _ in result] == ["zh-cn", "zh-tw", "en"]
    assert dict(result)["zh-tw"] == pytest.approx(10.0 * (1 - fusion.SCRIPT_DISCOUNT))
    # Characters the two scripts share count as written; only the words that needed folding are discounted.
    shared = Candidate("shared", {"回滚", "数据库"}, written=["回滾 数据库"])
    assert fusion.folded_share(query, shared) == pytest.approx(0.5)
    # Far apart, the better match still wins, whatever its script.
    assert prefer_script(query, [(tw, 10.0), (cn, 5.0)])[0][0] == "zh-tw"
    # A query without Han (no written forms) changes nothing.
    latin = [(Candidate("a", {"x"}, written=["x"]), 2.0), (Candidate("b", {"x"}, written=["X"]), 1.0)]
    assert prefer_script(_facts("x"), latin) == [("a", 2.0), ("b", 1.0)]
    with pytest.raises(ValueError):
        prefer_script(query, [], discount=1.0)


def test_the_reranker_counts_words_held_only_through_folding_less() -> None:
    query = _facts(weights={"迁移": 1.0, "回滚": 1.0}, forms={"迁移": {"迁移"}, "回滚": {"回滚"}})
    tw = Candidate("zh-tw", {"迁移", "回滚"}, written=["遷移 回滾"])
    cn = Candidate("zh-cn", {"迁移", "回滚"}, written=["迁移 回滚"])
    result = dict(rerank(query, [(tw, 0.030), (cn, 0.029)]))
    assert result["zh-tw"] == pytest.approx(0.030 * (1 + fusion.COVERAGE_WEIGHT * (1 - fusion.SCRIPT_DISCOUNT)))
    assert result["zh-cn"] == pytest.approx(0.029 * (1 + fusion.COVERAGE_WEIGHT))
    assert max(result, key=result.__getitem__) == "zh-cn"


candidate_strategy = st.tuples(
    st.builds(
        Candidate,
        document=st.uuids().map(str),
        terms=st.sets(st.sampled_from(["a", "b", "c", "d"])),
        phrase_key=st.sampled_from(["", "a b", "x a b y", "c"]),
        language=st.sampled_from([None, "han", "latin", "mixed"]),
    ),
    # Away from the subnormal range, where scaling by a power of two is no longer exact.
    st.floats(-1, 1).filter(lambda score: score == 0 or abs(score) > 1e-300),
)


@given(query_strategy, st.lists(candidate_strategy, max_size=8, unique_by=lambda item: item[0].document))
def test_rerank_never_lowers_a_score_and_stays_sorted(
    query: QueryFacts, scored: list[tuple[Candidate[str], float]]
) -> None:
    scored.sort(key=lambda item: -item[1])
    result = rerank(query, scored)
    original = {candidate.document: score for candidate, score in scored}
    assert sorted(document for document, _ in result) == sorted(original)
    for document, score in result:
        assert score >= original[document]
        assert (score >= 0) == (original[document] >= 0)
    scores = [score for _, score in result]
    assert scores == sorted(scores, reverse=True)


@given(
    query_strategy,
    st.lists(candidate_strategy, max_size=8, unique_by=lambda item: item[0].document),
    st.sampled_from([2.0, 1024.0]),
)
def test_rerank_is_scale_free(query: QueryFacts, scored: list[tuple[Candidate[str], float]], factor: float) -> None:
    """Scaling every score by a constant scales the results and keeps the order.

    Powers of two scale floats exactly, so the comparison can be exact too.
    """
    scored.sort(key=lambda item: -item[1])
    scaled = [(candidate, score * factor) for candidate, score in scored]
    expected = [(document, score * factor) for document, score in rerank(query, scored)]
    assert rerank(query, scaled) == expected

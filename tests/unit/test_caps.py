"""The result cap of MCP tools (issue 9): token estimate, whole hits kept, answers cut to snippets."""

from __future__ import annotations

import msgspec

from memories import protocol as p
from memories.caps import (
    MAX_ANSWER_CHARS,
    MAX_ANSWER_TOKENS,
    MAX_RESULT_CHARS,
    MAX_RESULT_TOKENS,
    Cost,
    cost_of,
    cut_answer,
    fit_hits,
    page,
)
from memories.daemon.grants.tools import fit_answer


def test_chinese_counts_one_token_a_character_and_other_text_one_a_quarter() -> None:
    assert cost_of("农业发展").tokens == 4 + 1  # the quotes: 2 characters, a quarter token each, rounded up
    assert cost_of("a" * 400).tokens == 101
    assert cost_of("a\nb").chars == 6  # "a\\nb" with its quotes


def test_hits_are_kept_whole_in_rank_order_until_the_cap() -> None:
    hits = [{"text": "农" * 700, "n": n} for n in range(100)]
    kept, omitted = fit_hits(hits, Cost(0, 100))
    assert kept == hits[: len(kept)] and omitted == 100 - len(kept) and 0 < len(kept) < 100
    assert (cost_of(kept) + Cost(0, 100)).fits()


def test_a_page_ends_at_the_cap_and_takes_at_least_one_character() -> None:
    body = "农业" * 10_000
    end = page(body, 0, Cost())
    assert MAX_RESULT_TOKENS - 2 <= end <= MAX_RESULT_TOKENS
    assert page("x", 0, Cost(MAX_RESULT_TOKENS, MAX_RESULT_CHARS)) == 1


def _citation(n: int, text: str) -> p.Citation:
    return p.Citation(
        label=f"S{n}",
        asset_id="a" * 16,
        revision=1,
        chunk_hash="0" * 64,
        byte_start=0,
        byte_end=3,
        title="t",
        text=text,
    )


def _answer(answer: str, citations: list[p.Citation], *, cut: bool = False) -> p.AskReport:
    return p.AskReport(status="answered", answer=answer, answer_truncated=cut, citations=citations, mode="bm25")


def test_a_long_answer_is_cut_to_snippets_and_says_so() -> None:
    small = fit_answer(_answer("yes [S1]", [_citation(1, "短")]))
    assert small.truncated is False and small.answer_truncated is False
    big = _answer("见 [S1]", [_citation(n, "农" * 768) for n in range(1, 101)])
    fitted = fit_answer(big)
    assert fitted.truncated and fitted.omitted == 100 and cost_of(fitted).fits() and not fitted.answer_truncated
    assert [c.label for c in fitted.citations] == [c.label for c in big.citations]  # every cited label stays
    # an answer within the answer cap, with citations whose titles alone take most of the result: cut further
    titled = [msgspec.structs.replace(_citation(n, ""), title="标" * 30) for n in range(1, 101)]
    cut = fit_answer(_answer("农" * 3_999, titled))
    assert cut.truncated and cut.answer_truncated and cost_of(cut).fits() and cut.answer and cut.answer.endswith("…")


def test_an_answer_over_the_answer_cap_is_cut_once_for_every_client() -> None:
    answer, cut = cut_answer("农" * 50_000)
    assert cut and answer.endswith("…") and cost_of(answer).tokens == MAX_ANSWER_TOKENS
    latin, cut = cut_answer("a" * 50_000)
    assert cut and cost_of(latin).chars == MAX_ANSWER_CHARS
    assert cut_answer("农" * 3_998) == ("农" * 3_998, False)  # 3,998 + the quotes: 3,999 tokens
    # memory_ask keeps the answer the daemon cut, and says so, as rag ask does
    fitted = fit_answer(_answer(answer, [_citation(1, "农" * 768)], cut=True))
    assert fitted.answer == answer and fitted.answer_truncated and fitted.truncated and fitted.omitted == 0

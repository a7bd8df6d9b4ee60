"""The result cap of MCP tools (issue 9): token estimate, whole hits kept, answers cut to snippets."""

from __future__ import annotations

from memories import protocol as p
from memories.caps import MAX_RESULT_CHARS, MAX_RESULT_TOKENS, Cost, cost_of, fit_hits, page
from memories.daemon.tools import fit_answer


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


def test_a_long_answer_is_cut_to_snippets_and_says_so() -> None:
    small = p.AskReport(status="answered", answer="yes [S1]", citations=[_citation(1, "短")], mode="bm25")
    assert fit_answer(small).truncated is False
    big = p.AskReport(
        status="answered", answer="见 [S1]", citations=[_citation(n, "农" * 768) for n in range(1, 101)], mode="bm25"
    )
    fitted = fit_answer(big)
    assert fitted.truncated and fitted.omitted == 100 and cost_of(fitted).fits()
    assert [c.label for c in fitted.citations] == [c.label for c in big.citations]  # every cited label stays
    huge = p.AskReport(status="answered", answer="农" * 50_000, citations=[], mode="bm25")
    cut = fit_answer(huge)
    assert cut.truncated and cost_of(cut).fits() and cut.answer and cut.answer.endswith("…")

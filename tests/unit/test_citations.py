"""Every citation-like form in a generated answer is checked against the labels sent (issue 29, item 14): before,
only ``[S<digits>]`` (and lists of it) was read, so ``(S7)``, ``[S1-S7]``, ``[s7]``, ``[S 7]`` and ``[Ｓ７]`` passed
when only S1 was sent. A form that does not resolve refuses the reply (``invalid_model_output``); nothing is
stripped."""

from __future__ import annotations

import json

import pytest

from memories.errors import MemoriesError
from memories.rag.answers import parse_answer
from tests.unit.test_hostile_text import ceiling, mib


def _reply(answer: str, citations: list[str] | None = None) -> str:
    return json.dumps({"answer": answer, "citations": ["S1"] if citations is None else citations}, ensure_ascii=False)


@pytest.mark.parametrize(
    ("answer", "invented"),
    [
        ("Yes (S7).", ["S7"]),
        ("Yes [S1-S7].", ["S2", "S3", "S4", "S5", "S6", "S7"]),
        ("Yes [S1–3].", ["S2", "S3"]),
        ("Yes [S1 to S2].", ["S2"]),
        ("Yes [S1, S3].", ["S3"]),
        ("Yes [S1 and S3].", ["S3"]),
        ("Yes [S1/S3].", ["S3"]),
        ("Yes [s7].", ["S7"]),
        ("Yes [S 7].", ["S7"]),
        ("Yes [S#7].", ["S7"]),
        ("Yes [Source 7].", ["S7"]),
        ("是［Ｓ７］。", ["S7"]),
        ("是[Ｓ７]。", ["S7"]),
        ("是（S7）。", ["S7"]),
        ("是【S7】。", ["S7"]),
        ("是【S1至S3】。", ["S2", "S3"]),
        ("是〔S7〕。", ["S7"]),
        ("Yes [Ѕ7].", ["S7"]),
        ("Yes [S٧].", ["S7"]),
        ("Yes [S0].", ["S0"]),
        ("Yes [S1-S999999999].", ["S1-S999999999"]),
    ],
)
def test_a_citation_in_any_form_that_was_not_sent_is_refused(answer: str, invented: list[str]) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_answer(_reply(answer), ["S1"])

    assert caught.value.code == "invalid_model_output" and caught.value.details["invented"] == invented
    assert "cites labels that were not sent" in caught.value.message


@pytest.mark.parametrize("entry", ["S7", "s7", "[S7]", "Ｓ７", "S1-S7", "the second note", "1"])
def test_a_citations_entry_that_is_not_a_sent_label_is_refused(entry: str) -> None:
    with pytest.raises(MemoriesError) as caught:
        parse_answer(_reply("Yes.", [entry]), ["S1"])

    assert caught.value.code == "invalid_model_output"


def test_forms_that_resolve_are_read_as_their_labels() -> None:
    answer = "A (s2), B [S1–S3], C 【Ｓ４、S5】, D [S 6], E {S7}."
    sources = [f"S{n}" for n in range(1, 8)]

    assert parse_answer(_reply(answer, ["s2", "[S4]", "S5-S6"]), sources) == (
        answer,
        ["S2", "S4", "S5", "S6", "S1", "S3", "S7"],
    )


@pytest.mark.parametrize(
    "answer",
    ["Amazon S3 and the Galaxy S7.", "See [Section 4].", "An [S3 bucket].", "(S3 is a storage service)", "[1]"],
)
def test_words_that_look_like_labels_cite_nothing(answer: str) -> None:
    assert parse_answer(_reply(answer), ["S1"]) == (answer, ["S1"])


@pytest.mark.parametrize("run", ["[S1", "(s", "[S1-", "【S1、", "[" + "S1 " * 60])
def test_reading_citations_is_linear(run: str) -> None:
    answer = mib("", run, "]")
    with ceiling("reading citations"), pytest.raises(MemoriesError):
        parse_answer(_reply(answer), [])

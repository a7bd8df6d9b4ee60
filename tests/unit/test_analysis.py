"""Normalization, segmentation, query limits and highlighting (R-12, R-17, issue 3 acceptance 4)."""

from __future__ import annotations

import itertools
import logging
import re
import unicodedata

import jieba
import pytest
import rjieba
from hypothesis import given, settings
from hypothesis import strategies as st

from memories.errors import MemoriesError
from memories.rag.analysis import (
    MAX_QUERY_TERMS,
    analyze_query,
    analyze_text,
    highlight_spans,
    normalize,
    phrase_key,
)
from ops.corpus import load_notes

_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U000323af]")


def _finds(query: str, document: str) -> bool:
    """Whether every term of ``query`` is a term of ``document`` (what ``all`` mode asks of a chunk)."""
    terms = analyze_query(query).terms
    return bool(terms) and set(terms) <= set(analyze_text(document).terms)


@pytest.mark.parametrize(
    ("query", "document"),
    [
        ("2012", "２０１２年报告"),
        ("abc", "ＡＢＣ公司"),
        ("ABC", "abc公司"),
        ("資料庫", "数据库"),
        ("数据库", "資料庫"),
        ("內存", "記憶體"),
        ("农业", "中国农业发展银行"),
        ("發展銀行", "中国农业发展银行"),
        ("itgc", "重跑gen-itgc后"),
        ("gen", "重跑gen-itgc后"),
        ("栈", "栈（Stack）与堆（Heap）"),
        ("堆", "栈（Stack）与堆（Heap）"),
        ("c", "C++ tutorial"),
        ("BENCH-100821", "Order BENCH-100821 shipped"),
        ("parse", "call parse_args() first"),
        ("parse_args", "call parse_args() first"),
        ("strasse", "Straße"),
        ("café", "CAFE\u0301"),
        # Invisible format characters inside a word (pasted from web pages, or in the sample corpus's
        # the-art-of-command-line README-zh-Hant.md: 靈\u200b\u200b活) do not split it.
        ("information", "infor\u00admation"),
        ("靈活", "非常靈\u200b\u200b活的工具"),
        ("database", "data\u2060base"),
        ("rtl", "r\u200ft\u202el"),
        ("ab", "a\ufeffb"),
        # Latin letters without their accents, as SQLite FTS5's default tokenizer (remove_diacritics) finds them.
        ("cafe", "Café"),
        ("café", "cafe"),
        ("resume", "RÉSUMÉ"),
        ("zurich", "Zu\u0308rich"),
        ("istanbul", "İstanbul"),
        ("tieng viet", "Tiếng Việt"),
    ],
)
def test_query_finds_document(query: str, document: str) -> None:
    assert _finds(query, document)


@pytest.mark.parametrize(
    ("query", "document"),
    # other scripts keep their marks: и is not й, か is not が
    [("use", "because"), ("arg", "parse_args"), ("foo", "foobar"), ("и", "й"), ("か", "が")],
)
def test_query_does_not_find_document(query: str, document: str) -> None:
    assert not _finds(query, document)


def test_traditional_and_simplified_fold_to_one_form() -> None:
    assert normalize("資料庫").text == normalize("数据库").text == "数据库"
    assert normalize("記憶體").text == "内存"
    assert analyze_query("資料庫").terms == analyze_query("数据库").terms


def test_segmentation() -> None:
    assert analyze_text("中国农业发展银行").terms == ["中国", "农业", "发展", "银行", "农业发展银行"]
    assert analyze_text("重跑gen-itgc后").terms == ["重跑", "gen", "itgc", "后"]
    assert analyze_text("C++ / BENCH-100821 __init__ _").terms == ["c", "bench", "100821", "__init__", "init"]
    assert analyze_query("所有权 栈 堆").terms == ("所有", "有权", "所有权", "栈", "堆")


def test_query_terms_are_distinct_in_order_and_keep_underscores() -> None:
    query = analyze_query("Foo_bar foo FOO 数据库 資料庫")
    assert query.terms == ("foo_bar", "foo", "数据", "据库", "数据库")
    assert query.phrase == "foo_bar foo foo数据库数据库"


@pytest.mark.parametrize("query", ["", "   ", "?!", "「」……", "-- / * ( ) \" '", "\u3000"])
def test_empty_or_punctuation_query_has_no_terms(query: str) -> None:
    assert analyze_query(query).terms == ()


def test_query_byte_limit() -> None:
    analyze_query("a" * 1024)
    analyze_query("测" * 341)  # 1,023 bytes
    with pytest.raises(MemoriesError) as error:
        analyze_query("a" * 1025)
    assert error.value.code == "query_too_long"
    with pytest.raises(MemoriesError) as error:
        analyze_query("测" * 342)  # 1,026 bytes, 342 code points
    assert error.value.code == "query_too_long"
    assert error.value.details == {"max": 1024, "value": 1026}


def test_query_term_limit() -> None:
    words = [f"w{index}" for index in range(MAX_QUERY_TERMS)]
    assert len(analyze_query(" ".join(words)).terms) == MAX_QUERY_TERMS
    assert len(analyze_query(" ".join(words + words)).terms) == MAX_QUERY_TERMS  # distinct terms count
    with pytest.raises(MemoriesError) as error:
        analyze_query(" ".join([*words, "one_more"]))
    assert error.value.code == "too_many_terms"


def test_phrase_key_collapses_whitespace_and_drops_it_beside_han() -> None:
    assert phrase_key("  Do NOT\n\t use   FIND / ") == "do not use find /"
    assert phrase_key("SSH 端口\n轉發") == phrase_key("SSH端口转发") == "ssh端口转发"
    assert analyze_query("SSH   端口 转发").phrase == "ssh端口转发"


def test_phrase_key_folds_typographic_quotes_and_dashes() -> None:
    """macOS and iOS type ’ “ ” and – for ' " and - by default: a phrase typed either way finds the other."""
    typed = phrase_key("Don\u2019t panic \u2014 it\u2018s \u201cquoted\u201d, co\u2013operate")
    plain = "Don't panic - it's \"quoted\", co-operate"
    assert typed == phrase_key(plain) == plain.lower()
    assert analyze_query("say “quoted”").phrase == 'say "quoted"'
    assert analyze_query("“quoted”").phrase == "quoted"  # one pair around the whole query is not part of the phrase


def test_highlight_spans_point_into_the_original() -> None:
    text = "先看 ＳＱＬ 的記憶體與資料庫，再看 because use。"
    terms = analyze_query("sql 内存 数据库 use").terms
    spans = highlight_spans(text, terms)
    assert [text[start:end] for start, end in spans] == ["ＳＱＬ", "記憶體", "資料庫", "use"]


def test_highlight_covers_whole_expanded_characters() -> None:
    assert highlight_spans("ﬁle", ["fi"]) == []  # "fi" is not a whole word of "file"
    assert highlight_spans("ﬁ le", ["fi"]) == [(0, 1)]
    assert highlight_spans("Straße", ["strasse"]) == [(0, 6)]
    assert highlight_spans("中国农业发展银行", ["农业", "发展", "农业发展银行"]) == [(2, 8)]


def _reference_fold(text: str) -> str:
    """NFKC + casefold of each character together with its combining marks, the slow obvious way."""
    units: list[str] = []
    for char in text:
        if units and unicodedata.combining(char):
            units[-1] += char
        else:
            units.append(char)
    folded = "".join(_reference_unit(unit) for unit in units)
    return re.sub("[\ud800-\udfff]", "\ufffd", folded)


def _reference_unit(unit: str) -> str:
    """One unit: NFKC, casefold, no format characters, and a Latin letter's combining marks dropped (recomposed)."""
    folded = unicodedata.normalize("NFKC", unit).casefold()
    folded = "".join(char for char in folded if unicodedata.category(char) != "Cf")
    kept, base = "", ""
    for char in unicodedata.normalize("NFD", folded):
        if not unicodedata.combining(char):
            base = char
        if unicodedata.combining(char) == 0 or not (base and unicodedata.name(base, "").startswith("LATIN ")):
            kept += char
    return folded if kept == unicodedata.normalize("NFD", folded) else unicodedata.normalize("NFC", kept)


_TEXTS = st.one_of(
    st.text(),
    st.lists(
        st.sampled_from(["資料庫", "記憶體", "数据库", "中国农业", "ＡＢＣ", "ß", "ﬁ", "…", "e\u0301", "\u0301", "İ",
                         "😀", " ", "\n", "x", "Ω", "ǰ", "ｶﾞ", "①⑩", "\uffff", "\ufeff", "\ud800", "\u200b", "\u00ad"]),
        max_size=60,
    ).map("".join),
)  # fmt: skip


@settings(deadline=None, max_examples=400)
@given(text=_TEXTS)
def test_origin_map_is_monotonic_and_in_range(text: str) -> None:
    normalized = normalize(text)
    origin = list(normalized.origin)
    assert len(origin) == len(normalized.text) + 1
    assert origin[-1] == len(text)
    assert origin == sorted(origin)
    assert all(0 <= index < len(text) for index in origin[:-1])
    if not _HAN.search(text):
        assert normalized.text == _reference_fold(text)


@settings(deadline=None, max_examples=200)
@given(text=_TEXTS)
def test_highlight_spans_are_sorted_disjoint_and_in_range(text: str) -> None:
    spans = highlight_spans(text, analyze_text(text).terms)
    assert spans == sorted(spans)
    assert all(0 <= start < end <= len(text) for start, end in spans)
    assert all(previous[1] < current[0] for previous, current in itertools.pairwise(spans))


def _corpus_han_runs(limit: int) -> list[str]:
    """Normalized Han runs from every note (what the analyzer hands to rjieba), in jieba's Han range."""
    runs: dict[str, None] = {}
    for note in load_notes():
        for run in re.findall("[\u4e00-\u9fd5]{2,}", normalize(note.body[:4000]).text):
            runs.setdefault(run)
    return list(runs)[:limit]


def test_rjieba_agrees_with_python_jieba_on_the_corpus() -> None:
    jieba.setLogLevel(logging.WARNING)
    runs = _corpus_han_runs(limit=5000)
    assert len(runs) > 3000
    disagreements = [run for run in runs if rjieba.cut_for_search(run) != list(jieba.cut_for_search(run))]
    assert disagreements == []

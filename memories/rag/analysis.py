"""Text analysis: one analyzer for documents and queries (R-12, R-17, DESIGN "Analyze").

Matching happens on a normalized copy of the text; what users see points into the original::

    original ─ NFKC + casefold, per character and its combining marks, format characters dropped ─▶ folded
    folded   ─ OpenCC tw2sp (phrase level, Taiwan → Simplified) on runs of Han characters ─▶ normalized
    origin[i] = the original code point index that normalized character i came from, plus an end sentinel

Terms are cut from the normalized text:

- runs of Han characters go through rjieba (jieba-rs: the dictionary and algorithm of Python jieba) in search
  mode, which gives words and their dictionary sub-words, so ``农业`` finds ``中国农业发展银行``;
- other runs give words of Unicode word characters, so ``重跑gen-itgc后`` gives 重跑, gen, itgc, 后 and ``C++``
  gives ``c``; on the document side a word with ``_`` also gives its parts (``parse_args`` → parse_args, parse,
  args);
- punctuation and whitespace give nothing; single Han characters (栈, 堆) are terms like any other.

>>> analyze_query("資料庫 Migration").terms
('数据', '据库', '数据库', 'migration')
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec
import opencc
import rjieba

from memories.errors import MemoriesError
from memories.limits import MAX_QUERY_BYTES

MAX_QUERY_TERMS = 64
"""Most distinct analyzed terms in one query (R-17)."""

# Unicode script Han: CJK Unified Ideographs and extensions A-I, compatibility ideographs.
_HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U000323af"
_HAN_RUN = re.compile(f"[{_HAN}]+")
_HAN_SPLIT = re.compile(f"([{_HAN}]+)")
_WORD = re.compile(r"\w+")
_WORD_CHAR = re.compile(rf"[^\W_{_HAN}]")
_SPACE_BESIDE_HAN = re.compile(f"(?<=[{_HAN}]) | (?=[{_HAN}])")
_SURROGATE = re.compile("[\ud800-\udfff]")
_IRREGULAR_MARK = "\uffff"
_IRREGULAR_RUN = re.compile(f"{_IRREGULAR_MARK}+")
_RUN_SEPARATOR = "\n"  # neither Han nor changed by OpenCC, and a segment break for jieba and OpenCC
_WORD_SEPARATOR = "\x1f"  # never inside a word jieba returns for a Han run


class Normalized(msgspec.Struct, frozen=True):
    """Text as it is matched, with the way back to the original.

    Attributes:
        text: NFKC, case-folded, Traditional folded to Simplified.
        origin: ``len(text) + 1`` code point offsets into the original text: ``origin[i]`` is where normalized
            character ``i`` came from, ``origin[-1]`` is the original length. Never decreasing, and every entry
            but the sentinel is a valid index of the original. A ``range`` when nothing changed length.
    """

    text: str
    origin: Sequence[int]


class AnalyzedText(msgspec.Struct, frozen=True):
    """A document text (chunk, title or metadata) ready for indexing.

    Attributes:
        terms: every term in text order, repeated as often as it occurs (BM25 counts them).
        phrase_key: the text as :func:`phrase_key` gives it, for ``phrase`` matching.
    """

    terms: list[str]
    phrase_key: str


class AnalyzedQuery(msgspec.Struct, frozen=True):
    """A query ready for the lexical index.

    Attributes:
        terms: distinct analyzed terms in query order; empty for an empty or punctuation-only query.
        phrase: the normalized query for ``phrase`` matching (see :func:`phrase_key`), without one pair of quotes
            around it all.
    """

    terms: tuple[str, ...]
    phrase: str


def normalize(text: str) -> Normalized:
    """Fold ``text`` for matching: NFKC and ``casefold()`` without format characters (``infor\u00admation`` →
    ``information``), then Traditional → Simplified Chinese.

    NFKC and case folding apply to each character together with its combining marks, so one unit of the
    original maps to a known run of the result. Script folding uses OpenCC's ``tw2sp`` (phrase level: 資料庫 →
    数据库, 記憶體 → 内存) on runs of Han characters; where a run changes length, its characters are aligned to
    the original through a character-level ``t2s`` rendering. Lone surrogates become U+FFFD.

    >>> normalize("ＡＢＣ資料庫").text
    'abc数据库'
    >>> list(normalize("記憶體").origin)
    [0, 1, 3]
    """
    folded, origin = _fold_case_and_width(text)
    return _fold_script(folded, origin)


def analyze_text(text: str) -> AnalyzedText:
    """Terms and phrase key of a document text (a chunk, a title, a source path or a tag).

    >>> analyze_text("中国农业发展银行 parse_args").terms
    ['中国', '农业', '发展', '银行', '农业发展银行', 'parse_args', 'parse', 'args']
    """
    normalized = normalize(text).text
    return AnalyzedText(terms=_terms(normalized, split_underscores=True), phrase_key=_phrase(normalized))


def analyze_query(query: str) -> AnalyzedQuery:
    """Terms and phrase of a search query, analyzed exactly like documents (without ``_`` parts).

    Raises:
        MemoriesError: ``query_too_long`` over :data:`memories.limits.MAX_QUERY_BYTES` (1,024) UTF-8 bytes of
            the query as received; ``too_many_terms`` over :data:`MAX_QUERY_TERMS` distinct terms. Nothing
            else, whatever the query.

    >>> analyze_query('C++ -tutorial "unbalanced')
    AnalyzedQuery(terms=('c', 'tutorial', 'unbalanced'), phrase='c++ -tutorial "unbalanced')
    """
    size = len(query.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise MemoriesError(
            "query_too_long",
            f"the query has {size} bytes; at most {MAX_QUERY_BYTES} are accepted",
            {"max": MAX_QUERY_BYTES, "value": size},
        )
    normalized = normalize(query).text
    terms = tuple(dict.fromkeys(_terms(normalized, split_underscores=False)))
    if len(terms) > MAX_QUERY_TERMS:
        raise MemoriesError(
            "too_many_terms",
            f"the query has {len(terms)} distinct terms; at most {MAX_QUERY_TERMS} are accepted",
            {"max": MAX_QUERY_TERMS, "value": len(terms)},
        )
    return AnalyzedQuery(terms=terms, phrase=_phrase(_unquoted(normalized)))


_QUOTE_PAIRS = {'"': '"”', "'": "'’", "“": '”"', "‘": "’'", "„": '“”"', "「": "」", "『": "』"}
"""Opening quote -> the closing quotes that end it: straight, curly (as smart punctuation types them, or one of each
when only one was made curly), German low-high, and the CJK corner brackets Chinese quotes a phrase with."""


def _unquoted(query: str) -> str:
    """The query without one pair of quotes around all of it (people type a phrase as ``"like this"``), so a
    ``phrase`` search looks for what is inside them; otherwise unchanged.

    >>> _unquoted("“do not use”"), _unquoted('say "hi"'), _unquoted("「所有權」")
    ('do not use', 'say "hi"', '所有權')
    """
    text = query.strip()
    if len(text) >= 2 and text[-1] in _QUOTE_PAIRS.get(text[0], ""):
        return text[1:-1]
    return query


def is_han(term: str) -> bool:
    """Whether an analyzed term is Han characters (a Jieba word), as opposed to a word of other letters or digits.

    >>> is_han("银行"), is_han("git")
    (True, False)
    """
    return _HAN_RUN.match(term) is not None


Language = Literal["han", "latin", "mixed"]
"""What a text is mostly written in: Han characters, words of other letters, or both."""

_LETTER_WORD = re.compile(rf"[^\W\d_{_HAN}]+")


def text_language(text: str) -> Language | None:
    """``han`` or ``latin`` when one has at least twice the other's count, else ``mixed``; ``None`` without letters.

    Counts Han characters against words of other letters (a Chinese character carries about as much as an
    English word), so a Chinese note with some code stays ``han`` and an English note naming 中文 stays ``latin``.

    >>> text_language("如果指定了目標版本"), text_language("git rebase onto main"), text_language("用 git rebase 整理")
    ('han', 'latin', 'mixed')
    """
    han = sum(len(run) for run in _HAN_RUN.findall(text))
    latin = len(_LETTER_WORD.findall(text))
    if not han and not latin:
        return None
    if han >= 2 * latin:
        return "han"
    if latin >= 2 * han:
        return "latin"
    return "mixed"


def phrase_key(text: str) -> str:
    """``text`` normalized for ``phrase`` matching: whitespace runs become one space, none beside Han, and
    typographic quotes and dashes (’ “ ” –) are the ASCII ones.

    A phrase query matches a chunk when its phrase is a substring of the chunk's key. Spaces next to Han
    characters are dropped on both sides because Chinese writing puts them there or not at will
    (``SSH 端口转发`` and ``SSH端口转发``, or a line wrapped inside a sentence).

    >>> phrase_key("  Do NOT\\n use  SSH 端口 轉發 ")
    'do not use ssh端口转发'
    """
    return _phrase(normalize(text).text)


def highlight_spans(text: str, terms: Iterable[str]) -> list[tuple[int, int]]:
    """Where analyzed ``terms`` occur in ``text``, as merged, sorted, half-open code point spans of the original.

    Han terms match anywhere; other terms only as whole words (a term ``use`` does not light up ``because``).
    Spans cover whole original characters, so a term matching part of a folded expansion (``ﬁ`` → ``fi``) or a
    script conversion that changed length covers the characters it came from.

    >>> highlight_spans("資料庫 and ＳＱＬ", ["数据库", "sql"])
    [(0, 3), (8, 11)]
    """
    normalized = normalize(text)
    spans = sorted(span for term in set(terms) for span in _term_spans(normalized, term))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def written_forms(text: str, terms: Iterable[str]) -> dict[str, frozenset[str]]:
    """How ``text`` writes each Han term of ``terms`` before script folding: term → the original substrings it
    was cut from (a Simplified term of a Traditional query maps to its Traditional writing). Terms without Han
    characters, and terms ``text`` does not hold, are left out.

    >>> written_forms("資料庫遷移 rollback", ["数据库", "迁移", "rollback"])
    {'数据库': frozenset({'資料庫'}), '迁移': frozenset({'遷移'})}
    """
    normalized = normalize(text)
    forms = {
        term: frozenset(text[start:end] for start, end in _term_spans(normalized, term))
        for term in dict.fromkeys(terms)
        if _HAN_RUN.search(term)
    }
    return {term: written for term, written in forms.items() if written}


def _term_spans(normalized: Normalized, term: str) -> Iterable[tuple[int, int]]:
    """Original code point spans of each occurrence of an analyzed term in ``normalized`` text (Han terms
    anywhere, other terms as whole words only), in text order, unmerged."""
    folded, origin = normalized.text, normalized.origin
    whole_word = _HAN_RUN.search(term) is None
    index = folded.find(term)
    while term and index >= 0:
        end = index + len(term)
        if not whole_word or not (_is_word_char(folded, index - 1) or _is_word_char(folded, end)):
            yield origin[index], _original_end(origin, end)
        index = folded.find(term, index + 1)


class _RegularFoldTable(dict[int, str]):
    """``str.translate`` table: a character → its NFKC + casefold, or :data:`_IRREGULAR_MARK`; filled on first use.

    A character is irregular when it does not fold to exactly one character on its own: it expands (``ﬁ`` →
    ``fi``, ``…`` → ``...``) or is a combining mark that folds together with the character before it. Only runs
    of irregular characters need the slow, unit-by-unit path; the mark itself (a noncharacter) is irregular, so
    a mark in the output always means an irregular character at the same index of the input.
    """

    def __missing__(self, code: int) -> str:
        char = chr(code)
        folded = _fold_unit(char)
        regular = len(folded) == 1 and unicodedata.combining(char) == 0 and char != _IRREGULAR_MARK
        self[code] = folded if regular else _IRREGULAR_MARK
        return self[code]


_REGULAR_FOLD = _RegularFoldTable()


def _fold_case_and_width(text: str) -> tuple[str, Sequence[int]]:
    """NFKC + casefold of each character with its combining marks, and the origin map of the result."""
    if text.isascii():
        return text.lower(), range(len(text) + 1)
    regular = text.translate(_REGULAR_FOLD)  # one character per character, so indexes still match the input
    if _IRREGULAR_MARK not in regular:
        return regular, range(len(text) + 1)
    pieces: list[str] = []
    origin: list[int] = []
    done = 0
    for match in _IRREGULAR_RUN.finditer(regular):
        start, end = match.span()
        if start > done and unicodedata.combining(text[start]):
            start -= 1  # the base character folds together with its marks
        pieces.append(regular[done:start])
        origin.extend(range(done, start))
        _fold_units(text, start, end, pieces, origin)
        done = end
    pieces.append(regular[done:])
    origin.extend(range(done, len(text) + 1))
    return "".join(pieces), origin


def _fold_units(text: str, start: int, end: int, pieces: list[str], origin: list[int]) -> None:
    """Fold ``text[start:end]`` one unit (a character and its combining marks) at a time, appending the results."""
    index = start
    while index < end:
        unit_end = index + 1
        while unit_end < end and unicodedata.combining(text[unit_end]):
            unit_end += 1
        folded = _fold_unit(text[index:unit_end])
        pieces.append(folded)
        origin.extend([index] * len(folded))
        index = unit_end


@functools.lru_cache(maxsize=4096)
def _fold_unit(unit: str) -> str:
    """NFKC, then ``casefold()``, of one character with its combining marks, without format characters (Unicode
    category Cf: soft hyphen, zero-width space and joiners, bidirectional marks, BOM), which are invisible and
    would split a word, as NFKC_Casefold drops default ignorables; lone surrogates become U+FFFD."""
    folded = unicodedata.normalize("NFKC", unit).casefold()
    visible = "".join(char for char in folded if unicodedata.category(char) != "Cf")
    return _SURROGATE.sub("\ufffd", _without_latin_marks(visible))


def _without_latin_marks(text: str) -> str:
    """``text`` without the combining marks of Latin letters (``é`` → ``e``, ``i̇`` → ``i``), recomposed; other
    scripts keep theirs (``й``, ``が``). SQLite FTS5's default tokenizer folds the same way (remove_diacritics), so
    ``cafe`` finds ``café`` as users of FTS5-based note search expect.

    >>> _without_latin_marks("résumé ǰ й")
    'resume j й'
    """
    decomposed = unicodedata.normalize("NFD", text)
    kept: list[str] = []
    base = ""
    for char in decomposed:
        if not unicodedata.combining(char):
            base = char
        elif base and unicodedata.name(base, "").startswith("LATIN "):
            continue
        kept.append(char)
    return text if len(kept) == len(decomposed) else unicodedata.normalize("NFC", "".join(kept))


def _fold_script(text: str, origin: Sequence[int]) -> Normalized:
    """Traditional → Simplified on the Han runs of ``text``, with ``origin`` carried through."""
    parts = _HAN_SPLIT.split(text)  # other, Han, other, ..., other
    others, sources = parts[0::2], parts[1::2]
    if not sources:
        return Normalized(text, origin)
    converted = _converter("tw2sp").convert(_RUN_SEPARATOR.join(sources)).split(_RUN_SEPARATOR)
    if converted == sources:
        return Normalized(text, origin)
    parts[1::2] = converted
    if all(len(run) == len(source) for run, source in zip(converted, sources, strict=True)):
        return Normalized("".join(parts), origin)
    new_origin: list[int] = []
    position = 0
    for other, source, run in zip(others, sources, converted, strict=False):
        new_origin.extend(origin[position : position + len(other)])
        position += len(other)
        if len(run) == len(source):
            new_origin.extend(origin[position : position + len(source)])
        else:
            new_origin.extend(origin[position + offset] for offset in _align(source, run))
        position += len(source)
    new_origin.extend(origin[position:])
    return Normalized("".join(parts), new_origin)


def _align(source: str, converted: str) -> list[int]:
    """For each character of ``converted``, the index in ``source`` it came from (never decreasing).

    Characters are matched against the ``t2s`` rendering of ``source`` (character by character in effect, so
    more characters line up; ``source`` itself should that rendering change the length); where nothing matches,
    a replaced stretch maps proportionally onto the stretch it replaced.
    """
    rendered = _converter("t2s").convert(source)
    if len(rendered) != len(source):
        rendered = source
    last = len(source) - 1
    offsets: list[int] = []
    matcher = difflib.SequenceMatcher(None, rendered, converted, autojunk=False)
    for tag, start, end, converted_start, converted_end in matcher.get_opcodes():
        if tag == "equal":
            offsets.extend(range(start, end))
        elif tag != "delete":
            width = converted_end - converted_start
            offsets.extend(min(start + k * (end - start) // width, last) for k in range(width))
    return offsets


@functools.cache
def _converter(config: str) -> opencc.OpenCC:
    """One OpenCC converter per configuration, made on first use (``tw2sp`` and ``t2s`` ship with OpenCC)."""
    return opencc.OpenCC(config)


def _terms(normalized: str, *, split_underscores: bool) -> list[str]:
    """The terms of a normalized text, in order, with repeats."""
    parts = _HAN_SPLIT.split(normalized)  # other, Han, other, ..., other
    han_words = _cut_for_search(parts[1::2])
    han_words.append([])
    terms: list[str] = []
    for other, words in zip(parts[0::2], han_words, strict=True):
        if other:
            terms.extend(_words(other, split_underscores=split_underscores))
        terms.extend(words)
    return terms


def _words(text: str, *, split_underscores: bool) -> list[str]:
    """Words of a text without Han characters; ``_`` alone is punctuation, ``a_b`` may also give its parts."""
    words = _WORD.findall(text)
    if "_" not in text:
        return words
    terms: list[str] = []
    for word in words:
        if word.strip("_"):
            terms.append(word)
            if split_underscores and "_" in word:
                terms.extend(part for part in word.split("_") if part)
    return terms


def _cut_for_search(runs: list[str]) -> list[list[str]]:
    """``rjieba.cut_for_search`` of each Han run, in one call: runs are joined by a separator jieba splits on."""
    if not runs:
        return []
    joined = _WORD_SEPARATOR.join(rjieba.cut_for_search(_RUN_SEPARATOR.join(runs)))
    return [run.split(_WORD_SEPARATOR) for run in joined.split(_WORD_SEPARATOR + _RUN_SEPARATOR + _WORD_SEPARATOR)]


_TYPOGRAPHIC = str.maketrans(
    dict.fromkeys("\u2018\u2019\u201a\u201b\u2032", "'")
    | dict.fromkeys("\u201c\u201d\u201e\u201f\u2033", '"')
    | dict.fromkeys("\u2010\u2012\u2013\u2014\u2015\u2212", "-")
)
"""Quotes and dashes that smart punctuation (macOS, iOS, word processors) types for ``'``, ``"`` and ``-``, as
those: a phrase typed one way finds the note written the other."""


def _phrase(normalized: str) -> str:
    """The phrase key of an already normalized text (see :func:`phrase_key`)."""
    collapsed = " ".join(normalized.translate(_TYPOGRAPHIC).split())
    return _SPACE_BESIDE_HAN.sub("", collapsed) if _HAN_RUN.search(collapsed) else collapsed


def _is_word_char(text: str, index: int) -> bool:
    """Whether ``text[index]`` exists and would continue a non-Han word (``_`` separates, so it does not)."""
    return 0 <= index < len(text) and _WORD_CHAR.match(text, index) is not None


def _original_end(origin: Sequence[int], end: int) -> int:
    """Original end of a normalized span ending at ``end``: past every character the last one came from."""
    last = origin[end - 1]
    while origin[end] == last:
        end += 1
    return origin[end]

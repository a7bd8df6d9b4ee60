"""Lexical retrieval: BM25 over an in-memory SQLite FTS5 table of term ids (R-13, R-14, R-15).

Analyzed terms never reach FTS5 as text. Each distinct term gets a per-index id (``t0``, ``t1``, …) from a
vocabulary; columns hold space-separated ids, split by FTS5's ``ascii`` tokenizer, and a query is a list of
quoted ids joined by ``OR`` or ``AND``. A query term missing from the vocabulary matches nothing (single
characters aside, below). Whatever a user types, FTS5 only ever parses ``"t12" OR "t40"``, so no user text can
be FTS5 syntax (R-15).

Match modes (R-14)::

    any     chunks with at least one query term (OR)
    all     chunks with at least one query term that hold every query term: a Han term as an indexed term of
            any column or as a substring of the chunk's or the title's phrase key, any other term as an
            indexed term of any column
    phrase  chunks with at least one query term whose phrase key, or whose title's phrase key, contains the
            query phrase as one contiguous run; ranked like ``any``

``all`` checks Han terms by substring because Jieba may cut a note and a query differently: the note
``中国人民银行发布通知`` is cut into ``中国人民银行`` and its dictionary sub-words (``人民``, ``银行``, not
``人民银行``), while the query ``人民银行`` gives ``人民``, ``银行`` and ``人民银行``. Chinese has no word boundaries
to respect, so a Han term that is written in the chunk is in it; Latin words stay whole words (``use`` is not in
``because``).

A single Han character is a word of its own only where Jieba leaves it alone (``栈`` in ``栈与堆``), so a query
of one character would miss every note that writes it inside a word (``发`` in ``开发``, ``发布``). When no chunk
holds any query term, each single Han character of the query stands for the words of the vocabulary that
contain it (at most :data:`MAX_EXPANSION`, those held by the most chunks), in every match mode. Only a query
that would otherwise find nothing changes.

Scores are ``-bm25(chunk_fts, 5.0, 1.0, 2.0)``: column weights title 5, body 1, metadata 2 (R-13), negated so
higher is better. Ties rank by record id, then by byte offset, so equal scores always come out in one order.
Nothing here is ever written to disk (R-20): the database is SQLite's ``:memory:``.

Ranking skips work without changing results. SQLite's ``bm25()`` (``fts5_aux.c``) adds, for each query term,
``idf × f × (k1 + 1) / (f + k1 × (1 − b + b × D / avgdl))`` with ``f`` the column-weighted count of the term in
the row; whatever ``f`` is, that stays below ``idf × (k1 + 1)`` (k1 = 1.2), the term's *bound*. A chunk holding
only terms of a set therefore scores below the sum of their bounds. ``any`` and ``phrase`` searches first rank
only the chunks that hold one of the rarest query terms (about :data:`_FIRST_PASS_ROWS` chunks); if the k-th
score beats the summed bounds of the other terms, no other chunk can reach the top k and the ranking is final.
Otherwise that k-th score is a floor for the true one: the rarest terms are widened until the bounds of the rest
sum below the floor and the search runs once more (over every match when no term can be left out). On a
10,000-chunk vault this keeps queries full of common words (``a``, ``the``, ``与``) from scoring every chunk.
"""

from __future__ import annotations

import math
import sqlite3
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from typing import Literal

import msgspec

from memories.protocol import MatchMode
from memories.rag.analysis import AnalyzedQuery, is_han

_SCHEMA = """
CREATE VIRTUAL TABLE chunk_fts USING fts5(
    title,                  -- term ids of the record title
    body,                   -- term ids of the chunk text
    meta,                   -- term ids of the safe metadata: source path and tags
    tokenize = 'ascii'
);
CREATE TABLE chunks (           -- plain columns: reading them from FTS5 rows would cost more than bm25()
    rowid INTEGER PRIMARY KEY,  -- the chunk_fts rowid
    record_id TEXT NOT NULL,    -- ties rank by record id, then byte offset
    byte_start INTEGER NOT NULL,
    kind TEXT NOT NULL          -- 'memory' or 'card'
);
CREATE TABLE chunk_phrases (    -- apart from chunks, whose small rows every ranked match reads
    rowid INTEGER PRIMARY KEY,
    phrase_key TEXT NOT NULL,   -- analysis.phrase_key of the chunk text
    title_key TEXT NOT NULL     -- analysis.phrase_key of the title
);
CREATE TABLE admitted (         -- the chunks a search filter admits, filled per search (memories.rag.filters)
    rowid INTEGER PRIMARY KEY
);
"""

_INSERT = (
    "INSERT INTO chunk_fts (rowid, title, body, meta) VALUES (:rowid, :title, :body, :meta)",
    "INSERT INTO chunks (rowid, record_id, byte_start, kind) VALUES (:rowid, :record_id, :byte_start, :kind)",
    "INSERT INTO chunk_phrases (rowid, phrase_key, title_key) VALUES (:rowid, :phrase_key, :title_key)",
)

_DELETE = (
    "DELETE FROM chunk_fts WHERE rowid = ?",
    "DELETE FROM chunks WHERE rowid = ?",
    "DELETE FROM chunk_phrases WHERE rowid = ?",
)

_MOVE = "UPDATE chunks SET kind = :kind, byte_start = :byte_start WHERE rowid = :rowid"

_TERM_IDS = "SELECT title || ' ' || body || ' ' || meta FROM chunk_fts WHERE rowid = ?"

_ANALYSIS = """
SELECT chunk_fts.title || ' ' || chunk_fts.body || ' ' || chunk_fts.meta, chunk_phrases.phrase_key
FROM chunk_fts JOIN chunk_phrases ON chunk_phrases.rowid = chunk_fts.rowid
WHERE chunk_fts.rowid = ?
"""

# :essential, when not NULL, keeps only chunks holding one of those terms (the first pass of the ranking above);
# the unary + keeps SQLite from handing that rowid list to FTS5, which would rerun the MATCH once per rowid.
_MATCHING = """
FROM chunk_fts JOIN chunks ON chunks.rowid = chunk_fts.rowid
WHERE chunk_fts MATCH :match
  AND (NOT :cards_only OR chunks.kind = 'card')
  AND (NOT :filtered OR +chunk_fts.rowid IN (SELECT rowid FROM admitted))
  AND (:essential IS NULL OR +chunk_fts.rowid IN (SELECT rowid FROM chunk_fts WHERE chunk_fts MATCH :essential))
  AND (:phrase IS NULL OR EXISTS (
        SELECT 1 FROM chunk_phrases
        WHERE chunk_phrases.rowid = chunk_fts.rowid
          AND (instr(chunk_phrases.phrase_key, :phrase) > 0 OR instr(chunk_phrases.title_key, :phrase) > 0)))
  {required}
"""

# One per query term in ``all`` mode (parameters named per term): the row holds the term, or, for a Han term, its
# text or title contains it.
_HOLDS_TERM = "+chunk_fts.rowid IN (SELECT rowid FROM chunk_fts WHERE chunk_fts MATCH :{name})"
_CONTAINS_HAN = """EXISTS (
        SELECT 1 FROM chunk_phrases
        WHERE chunk_phrases.rowid = chunk_fts.rowid
          AND (instr(chunk_phrases.phrase_key, :{name}) > 0 OR instr(chunk_phrases.title_key, :{name}) > 0))"""

_SEARCH = f"""
SELECT chunk_fts.rowid, -bm25(chunk_fts, 5.0, 1.0, 2.0) AS score
{_MATCHING}
ORDER BY score DESC, chunks.record_id, chunks.byte_start
LIMIT :limit
"""

_FILTER = f"SELECT chunk_fts.rowid {_MATCHING}"

_K1 = 1.2
"""BM25 ``k1`` of SQLite's ``bm25()`` (``fts5_aux.c``); its ``b`` (0.75) does not enter the bounds."""

_MIN_IDF = 1e-6
"""``bm25()`` raises a negative idf (a term in more than half of the rows) to this."""

MAX_EXPANSION = 64
"""Most words a single Han character of a query stands for (the most held first; R-17's term limit)."""

_FIRST_PASS_ROWS = 300
"""About how many chunks the first ranking pass scores; a speed knob only, results never depend on it."""


class LexicalEntry(msgspec.Struct, frozen=True):
    """One chunk as the lexical index stores it.

    Attributes:
        rowid: the chunk's row id, unique within the index.
        record_id, kind, byte_start: the chunk's record, its kind and the chunk's UTF-8 start (for ties).
        title_terms, body_terms, meta_terms: analyzed terms with repeats (``analysis.analyze_text``).
        phrase_key, title_key: phrase keys of the chunk text and of the title.
    """

    rowid: int
    record_id: str
    kind: Literal["memory", "card"]
    byte_start: int
    title_terms: Sequence[str]
    body_terms: Sequence[str]
    meta_terms: Sequence[str]
    phrase_key: str
    title_key: str


class KeptChunk(msgspec.Struct, frozen=True):
    """A stored chunk whose text, title and metadata did not change in an edit: only its kind and offset may."""

    rowid: int
    kind: Literal["memory", "card"]
    byte_start: int


class LexicalState(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """A :class:`LexicalIndex` as bytes can carry it (a sealed index snapshot, :mod:`memories.rag.snapshots`).

    Attributes:
        database: ``sqlite3.Connection.serialize()`` of the in-memory database (the FTS5 table and its side tables).
        vocabulary: the terms in id order (term ``i`` has id ``t{i}``, as :meth:`LexicalIndex._ids` gives them).
        rows_with: term id -> chunks holding it; row_count: chunks in the index.
    """

    database: bytes
    vocabulary: list[str]
    rows_with: dict[str, int]
    row_count: int


class LexicalIndex:
    """An FTS5 table of chunks and the vocabulary of term ids, in memory, for one vault; one caller at a time.

    The vocabulary only grows: a term whose last chunk was deleted keeps its id and matches nothing, which is
    what a missing term does too. The whole index goes away with the vault's cache.
    """

    def __init__(self) -> None:
        self._connection = sqlite3.connect(":memory:", check_same_thread=False)
        self._connection.executescript(_SCHEMA)
        self._vocabulary: dict[str, str] = {}  # term -> id
        self._terms: list[str] = []  # id number -> term (term ``t{i}`` is ``self._terms[i]``)
        self._rows_with: Counter[str] = Counter()  # term id -> chunks holding it, as bm25() counts them
        self._row_count = 0

    def state(self) -> LexicalState:
        """The whole index as :class:`LexicalState` (a copy: later changes do not touch it)."""
        self._connection.execute("DELETE FROM admitted")  # per search, and not worth keeping
        self._connection.commit()  # a search's rows of ``admitted`` sit in an implicit transaction
        return LexicalState(self._connection.serialize(), list(self._terms), dict(self._rows_with), self._row_count)

    @classmethod
    def restored(cls, state: LexicalState) -> LexicalIndex:
        """The index :meth:`state` described: the same rankings, with no text analyzed again.

        Raises:
            sqlite3.DatabaseError: ``state.database`` is not a database of this schema.
        """
        index = cls()
        index._connection.deserialize(state.database)
        index._connection.execute("SELECT count(*) FROM chunk_fts").fetchone()  # fails now if it is not one
        index._vocabulary = {term: f"t{number}" for number, term in enumerate(state.vocabulary)}
        index._terms = list(state.vocabulary)
        index._rows_with = Counter(state.rows_with)
        index._row_count = state.row_count
        return index

    def analysis(self, rowid: int) -> tuple[frozenset[str], str]:
        """The distinct analyzed terms of a chunk's title, text and metadata, and its text's phrase key (what the
        reranker's coverage reads for a candidate). Kept only here, in the database, rather than on every
        :class:`~memories.rag.vault_index.ChunkRow`: at 100,000 chunks a frozenset of terms per row cost more than
        the chunk text (issue 28 item 4).

        Raises:
            KeyError: no chunk has ``rowid``.
        """
        found = self._connection.execute(_ANALYSIS, (rowid,)).fetchone()
        if found is None:
            raise KeyError(rowid)
        term_ids, phrase_key = found
        terms = self._terms
        return frozenset([terms[int(term_id[1:])] for term_id in set(term_ids.split())]), phrase_key

    def replace(
        self, delete_rowids: Iterable[int], entries: Iterable[LexicalEntry], kept: Iterable[KeptChunk] = ()
    ) -> None:
        """Delete rows, insert entries and update kept chunks in one transaction: on failure nothing changes."""
        deleted = [(rowid,) for rowid in delete_rowids]
        removed_terms = Counter[str]()
        for parameters in deleted:
            for (term_ids,) in self._connection.execute(_TERM_IDS, parameters):
                removed_terms.update(set(term_ids.split()))
        rows = [self._row(entry) for entry in entries]
        added_terms = Counter[str]()
        for row in rows:
            added_terms.update(set(f"{row['title']} {row['body']} {row['meta']}".split()))
        deleted_count = 0
        with self._connection:
            for statement in _DELETE:
                deleted_count = self._connection.executemany(statement, deleted).rowcount
            for statement in _INSERT:
                self._connection.executemany(statement, rows)
            self._connection.executemany(_MOVE, (msgspec.structs.asdict(chunk) for chunk in kept))
        self._rows_with.subtract(removed_terms)
        self._rows_with.update(added_terms)
        for term_id in removed_terms:
            if not self._rows_with[term_id]:
                del self._rows_with[term_id]
        self._row_count += len(rows) - deleted_count

    def search(
        self,
        query: AnalyzedQuery,
        *,
        match_mode: MatchMode,
        limit: int | None,
        cards_only: bool,
        admitted: Collection[int] | None = None,
    ) -> list[tuple[int, float]]:
        """``(rowid, score)`` of the best matching chunks, best first; at most ``limit`` (``None``: all); only among
        the row ids ``admitted`` when given (a search filter: restricted in SQL, so ``limit`` counts admitted chunks
        and each keeps the score it has unfiltered).

        Score is ``-bm25`` with weights 5/1/2, higher is better. Returns ``[]`` when no query term is in the
        vocabulary (or, for ``all``, when a non-Han term is missing).
        """
        parameters = self._parameters(query, match_mode, cards_only, admitted)
        if parameters is None:
            return []
        term_ids = self._term_ids(query)
        if match_mode == "all" or limit is None:
            return self._ranked(parameters, None, limit)
        by_rarity = sorted(term_ids, key=self._rows_with.__getitem__)
        bound = {term_id: self._score_bound(term_id) for term_id in term_ids}
        essential = by_rarity[:1]
        rows = self._rows_with[by_rarity[0]]
        for term_id in by_rarity[1:]:
            rows += self._rows_with[term_id]
            if rows > _FIRST_PASS_ROWS:
                break
            essential.append(term_id)
        while True:
            rest = by_rarity[len(essential) :]
            if not rest:
                return self._ranked(parameters, None, limit)
            ranked = self._ranked(parameters, essential, limit)
            floor = ranked[-1][1] if len(ranked) == limit else 0.0
            if floor > sum(bound[term_id] for term_id in rest):
                return ranked
            while rest and sum(bound[term_id] for term_id in rest) >= floor:
                essential.append(rest.pop(0))

    def filter_rowids(
        self, query: AnalyzedQuery, *, match_mode: MatchMode, cards_only: bool, admitted: Collection[int] | None = None
    ) -> set[int]:
        """Row ids of every chunk that ``match_mode`` (and ``admitted``, when given) admits, unranked (what strict
        modes pass to vectors)."""
        parameters = self._parameters(query, match_mode, cards_only, admitted)
        if parameters is None:
            return set()
        sql = _FILTER.format(required=parameters.pop("required"))
        return {rowid for (rowid,) in self._connection.execute(sql, parameters | {"essential": None})}

    def _term_ids(self, query: AnalyzedQuery) -> list[str]:
        """Ids of the query terms some chunk holds, in query order; when there are none, the words that contain a
        single Han character of the query (:meth:`_words_containing`), so ``发`` finds ``开发`` and ``发布``."""
        ids = [self._vocabulary.get(term) for term in query.terms]
        held = [term_id for term_id in ids if term_id is not None and self._rows_with[term_id]]
        if held:
            return held
        characters = [term for term in query.terms if len(term) == 1 and is_han(term)]
        return list(dict.fromkeys(term_id for character in characters for term_id in self._words_containing(character)))

    def widened(self, query: AnalyzedQuery) -> dict[str, list[str]]:
        """The words each single Han character of ``query`` stands for when no chunk holds any query term (as
        :meth:`search` widens it), most held first; ``{}`` when some chunk holds a query term."""
        if any(self._rows_with[term_id] for term in query.terms if (term_id := self._vocabulary.get(term))):
            return {}
        words = {term_id: term for term, term_id in self._vocabulary.items()}
        characters = [term for term in query.terms if len(term) == 1 and is_han(term)]
        return {character: [words[word] for word in self._words_containing(character)] for character in characters}

    def term_chunks(self, terms: Iterable[str]) -> dict[str, int]:
        """How many chunks hold each term (0 for a term no chunk holds)."""
        return {term: self._rows_with[term_id] if (term_id := self._vocabulary.get(term)) else 0 for term in terms}

    def _words_containing(self, character: str) -> list[str]:
        """Ids of the :data:`MAX_EXPANSION` words held by the most chunks that contain ``character``."""
        words = [
            term_id for term, term_id in self._vocabulary.items() if character in term and self._rows_with[term_id]
        ]
        return sorted(words, key=lambda term_id: -self._rows_with[term_id])[:MAX_EXPANSION]

    def _parameters(
        self, query: AnalyzedQuery, match_mode: MatchMode, cards_only: bool, admitted: Collection[int] | None
    ) -> dict[str, object] | None:
        """Bound parameters of :data:`_MATCHING` (except ``essential``) and its ``required`` SQL, with the table
        ``admitted`` filled; ``None`` when nothing can match (no query term in the vocabulary, or ``all`` with a
        missing non-Han term, or nothing admitted)."""
        term_ids = self._term_ids(query)
        if not term_ids or (admitted is not None and not admitted):
            return None
        self._connection.execute("DELETE FROM admitted")
        if admitted is not None:
            self._connection.executemany("INSERT INTO admitted (rowid) VALUES (?)", ((rowid,) for rowid in admitted))
        parameters: dict[str, object] = {
            "match": " OR ".join(f'"{term_id}"' for term_id in term_ids),
            "cards_only": cards_only,
            "filtered": admitted is not None,
            "phrase": query.phrase if match_mode == "phrase" else None,
        }
        required = []
        if match_mode == "all":
            for number, term in enumerate(query.terms):
                conditions = []
                if term in self._vocabulary:
                    parameters[f"term{number}"] = f'"{self._vocabulary[term]}"'
                    conditions.append(_HOLDS_TERM.format(name=f"term{number}"))
                if is_han(term):
                    parameters[f"text{number}"] = term
                    conditions.append(_CONTAINS_HAN.format(name=f"text{number}"))
                if not conditions:
                    return None
                required.append(f"AND ({' OR '.join(conditions)})")
        return parameters | {"required": "\n  ".join(required)}

    def _ranked(
        self, parameters: dict[str, object], essential: list[str] | None, limit: int | None
    ) -> list[tuple[int, float]]:
        """Run :data:`_SEARCH`, over the chunks holding an ``essential`` term if given."""
        essential_match = None if essential is None else " OR ".join(f'"{term_id}"' for term_id in essential)
        arguments = parameters | {"essential": essential_match, "limit": -1 if limit is None else limit}
        sql = _SEARCH.format(required=arguments.pop("required"))
        return self._connection.execute(sql, arguments).fetchall()

    def term_weights(self, terms: Iterable[str]) -> dict[str, float]:
        """Each term's inverse document frequency as ``bm25()`` computes it (``fts5_aux.c``), floored at 1e-6::

            idf(t) = max(ln((N − n(t) + 0.5) / (n(t) + 0.5)), 1e-6)     N chunks, n(t) chunks holding t

        A term no chunk holds gets ``ln((N + 0.5) / 0.5)``, the rarest possible. Fusion weighs a chunk's coverage
        of the query with these, so words most chunks hold (``the``, ``的``) count for almost nothing.
        """
        return {term: self._idf(self._vocabulary.get(term)) for term in terms}

    def _score_bound(self, term_id: str) -> float:
        """What one term can add to a chunk's score at most: ``idf × (k1 + 1)``, idf as ``bm25()`` computes it."""
        return self._idf(term_id) * (_K1 + 1)

    def _idf(self, term_id: str | None) -> float:
        holding = 0 if term_id is None else self._rows_with[term_id]
        return max(math.log((self._row_count - holding + 0.5) / (holding + 0.5)), _MIN_IDF)

    def _row(self, entry: LexicalEntry) -> dict[str, object]:
        """Bound parameters of :data:`_INSERT` for one entry."""
        return {
            "rowid": entry.rowid,
            "title": self._ids(entry.title_terms),
            "body": self._ids(entry.body_terms),
            "meta": self._ids(entry.meta_terms),
            "kind": entry.kind,
            "record_id": entry.record_id,
            "byte_start": entry.byte_start,
            "phrase_key": entry.phrase_key,
            "title_key": entry.title_key,
        }

    def _ids(self, terms: Sequence[str]) -> str:
        """Space-separated term ids of ``terms``, giving new terms the next id."""
        vocabulary = self._vocabulary
        new_terms = set(terms).difference(vocabulary)  # costs len(terms), not len(vocabulary)
        if new_terms:
            for term in dict.fromkeys(terms):  # in text order, so ids never depend on string hashing
                if term in new_terms:
                    vocabulary[term] = f"t{len(vocabulary)}"
                    self._terms.append(term)
        return " ".join(map(vocabulary.__getitem__, terms))

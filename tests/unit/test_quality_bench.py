"""The quality benchmark's scoring and set loading (``ops/bench/quality.py``), and the corpus's relevance cells."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memories.rag.metrics import mrr_at, ndcg_at, recall_at
from ops.bench.quality import Query, load_set, paired_difference, write_files
from ops.corpus import load_queries, note_paths, resolve_also_relevant


def test_metrics_count_graded_relevance_at_ten() -> None:
    relevance = {"a": 2, "b": 1}
    assert ndcg_at(["a", "b"], relevance) == pytest.approx(1.0)
    assert ndcg_at(["b", "a"], relevance) == pytest.approx((1 + 2 / 1.5849625) / (2 + 1 / 1.5849625))
    assert ndcg_at(["x"] * 10 + ["a"], relevance) == 0.0
    assert recall_at(["x", "b"], relevance) == 0.5
    assert mrr_at(["x", "x2", "b"], relevance) == pytest.approx(1 / 3)
    assert mrr_at([f"x{i}" for i in range(10)] + ["a"], relevance) == 0.0


def test_paired_differences_have_a_seeded_bootstrap_interval() -> None:
    hybrid, arm = [1.0, 0.5, 1.0, 0.0] * 25, [1.0, 1.0, 0.5, 0.0] * 25
    mean, low, high = paired_difference(hybrid, arm)
    assert mean == 0.0 and low < 0 < high
    assert paired_difference(hybrid, arm) == (mean, low, high)  # the same seed, the same interval
    assert paired_difference([1.0] * 10, [0.5] * 10) == (0.5, 0.5, 0.5)


def test_subsets_are_the_query_id_prefix() -> None:
    assert Query("zht2zhs-38", "", {}).subset == "zht2zhs"
    assert Query("T12", "", {}).subset == "T"


def _write_set(folder: Path, documents: list[dict[str, str]], queries: list[dict[str, str]], qrels: list[str]) -> None:
    folder.mkdir()
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\n" + "".join(line + "\n" for line in qrels))


def test_bounded_sets_keep_the_relevant_documents_of_the_kept_queries(tmp_path: Path) -> None:
    documents = [{"id": f"en-{i}", "title": "", "text": f"text {i}"} for i in range(10)]
    queries = [{"id": f"q-{i}", "text": f"text {i}"} for i in (9, 8, 1)]
    _write_set(tmp_path / "set", documents, queries, ["q-9\ten-9\t1", "q-8\ten-8\t1", "q-1\ten-1\t1"])
    bounded = load_set(tmp_path / "set", docs=3, queries=2)
    assert [query.id for query in bounded.queries] == ["q-9", "q-8"]
    assert [document.id for document in bounded.documents] == ["en-0", "en-8", "en-9"]


def test_documents_are_written_as_notes_named_by_id(tmp_path: Path) -> None:
    documents = [{"id": "a", "title": "", "text": "untitled"}, {"id": "b", "title": "Heading", "text": "body"}]
    _write_set(tmp_path / "set", documents, [], [])
    write_files(load_set(tmp_path / "set").documents, tmp_path)
    assert (tmp_path / "a.md").read_text() == "untitled\n"
    assert (tmp_path / "b.md").read_text() == "# Heading\n\nbody\n"


def test_a_qrel_naming_an_unknown_document_is_refused(tmp_path: Path) -> None:
    _write_set(tmp_path / "set", [{"id": "a", "title": "", "text": "x"}], [{"id": "q", "text": "x"}], ["q\tb\t1"])
    with pytest.raises(ValueError, match=r"not in corpus\.jsonl"):
        load_set(tmp_path / "set")


def test_every_also_relevant_cell_of_the_corpus_names_notes() -> None:
    notes = set(note_paths())
    rows = load_queries()
    assert all(row.expected in notes and notes.issuperset(row.also_relevant) for row in rows)
    by_id = {row.id: row.also_relevant for row in rows}
    assert by_id["E1"] == (
        "opensource-guide/_articles/zh-hans/code-of-conduct.md",
        "opensource-guide/_articles/zh-hant/code-of-conduct.md",
    )
    assert by_id["S7"][1] == "rails-guides-zh/guides/edge/migrations.md"


def test_an_ambiguous_relevance_item_is_refused() -> None:
    notes = ["a/x/README.md", "a/y/README.md", "a/z/note.md"]
    assert resolve_also_relevant("— ", "a/z/note.md", notes) == ()
    with pytest.raises(ValueError, match="names 2 notes"):
        resolve_also_relevant("README.md (either)", "a/z/note.md", notes)

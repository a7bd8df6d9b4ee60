"""The quality and evidence-threshold benchmarks end to end on the tiny model, bounded (issues 11 and 8): the code
paths, not the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.bench import evidence, quality
from tests.fixtures.tiny_model import TinyModel

pytest_plugins = ["tests.fixtures.tiny_model"]


def _write_set(folder: Path) -> None:
    folder.mkdir()
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    documents = [
        {"id": f"en-{i}", "title": "", "text": f"{words[i % 10]} {words[(i * 3) % 10]} note {i} 第{i}篇 筆記"}
        for i in range(120)
    ]
    queries = [{"id": f"en2en-{i}", "text": documents[i]["text"]} for i in range(40)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    qrels = "".join(f"en2en-{i}\ten-{i}\t1\n" for i in range(40))
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\n" + qrels)


def test_quality_benchmark_runs_every_mode_and_the_bare_reference(
    tmp_path: Path, tiny_model: TinyModel, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "set"
    _write_set(folder)

    status = quality.main(
        [str(folder), "--model-dir", str(tiny_model.model_dir), "--docs", "100", "--queries", "30", "--json"]
    )
    assert status == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["documents"], figures["queries"], figures["index"]["records"]) == (100, 30, 100)
    rows = figures["subsets"]["all"]
    assert figures["paired"]["better_arm"] == "bm25"  # each query is its document's text
    assert set(figures["paired"]["hybrid"]) == {"ndcg@10", "recall@10", "mrr@10"}
    assert set(rows) == {"n", "bm25", "vector", "hybrid", "hybrid --no-rerank", "vector --no-rerank", quality.BARE}
    assert all(0 <= rows[label][metric] <= 1 for label in rows if label != "n" for metric in rows[label])
    # Each query is its document's whole text, so BM25 finds it first: the record-level scoring is right.
    assert rows["bm25"] == {"ndcg@10": 1.0, "recall@10": 1.0, "mrr@10": 1.0}
    assert set(figures["p50_ms"]) == {"bm25", "vector", "hybrid", "hybrid --no-rerank", "vector --no-rerank"}


def _write_corpus(folder: Path) -> None:
    notes = {
        "book/en/ownership.md": ("en", "# Ownership\n\n## Ownership rules\n\nEach value has an owner.\n"),
        "book/zh-tw/ownership.md": ("zh-Hant", "# 所有權\n\n## 所有權規則\n\n每個值都有一個擁有者。\n"),
        "notes/git.md": ("en", "# Git\n\n## Split a subdirectory\n\nUse git subtree.\n\n## Summary\n\nDone.\n"),
        "notes/sql.md": ("en", "# SQL\n\n## Summary\n\nPhantom reads.\n"),
    }
    rows = ["path\tsource\tlang"]
    for path, (language, body) in notes.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(body)
        rows.append(f"{path}\t{path.split('/')[0]}\t{language}")
    (folder / "MANIFEST.tsv").write_text("\n".join(rows) + "\n")
    (folder / "queries.md").write_text(
        "| # | query | expected top | also relevant | why |\n|---|---|---|---|---|\n"
        "| E1 | owner of a value | book/en/ownership.md | book/zh-tw/ownership.md | the rules |\n"
    )


def test_the_sample_corpus_with_the_heading_check(
    tmp_path: Path, tiny_model: TinyModel, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "corpus"
    _write_corpus(folder)
    status = quality.main([str(folder), "--model-dir", str(tiny_model.model_dir), "--headings", "--json"])
    assert status == 0
    figures = json.loads(capsys.readouterr().out)
    assert (figures["queries"], figures["index"]["records"], list(figures["subsets"])) == (1, 4, ["all", "E"])
    headings = figures["headings"]
    # "Summary" heads two notes, so it is no query; the translated pair gives HE and HT, the git note HN.
    assert set(headings["subsets"]) == {"all", "HE", "HT", "HN"} and headings["queries"] == 3
    assert set(headings["per_query"]["bm25"]) == {"HE1", "HT2", "HN3"}
    assert headings["subsets"]["HN"]["bm25"]["ndcg@10"] == 1.0


def test_the_heading_check_applies_to_the_sample_corpus_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "set"
    _write_set(folder)
    assert quality.main([str(folder), "--headings"]) == 2
    assert "sample corpus" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        quality.main([str(folder), "--queries", "0"])
    assert exit_info.value.code == 2 and "at least 1" in capsys.readouterr().err


def test_evidence_benchmark_reports_each_threshold_and_the_distributions(
    tmp_path: Path, tiny_model: TinyModel, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "set"
    _write_set(folder)
    status = evidence.main(
        [str(folder), "--model-dir", str(tiny_model.model_dir), "--docs", "100", "--queries", "30", "--json"]
    )
    assert status == 0
    figures = json.loads(capsys.readouterr().out)["sets"]["set"]
    assert [row["threshold"] for row in figures["thresholds"]] == list(evidence.THRESHOLDS)
    assert all(0 <= row[key] <= 1 for row in figures["thresholds"] for key in ("recall", "precision", "false_evidence"))
    # A higher bar never finds more: recall and false evidence can only fall as the threshold rises.
    for key in ("recall", "false_evidence"):
        values = [row[key] for row in figures["thresholds"]]
        assert values == sorted(values, reverse=True), key
    percentiles = figures["distributions"]["all"]["relevant"]
    assert len(percentiles) == len(evidence.PERCENTILES) and percentiles == sorted(percentiles)
    assert set(figures["distributions"]) == {"all", "en2en"}
    # The whole rule, per mode: each query's own note holds its every word, so bm25 finds it, and a higher bar
    # never lets more through.
    rule = figures["rule"]
    assert rule["bm25"]["found"] == 1.0
    for mode in ("vector", "hybrid"):
        reaching = [rule[f"{mode}@{t:.2f}"]["reaches_without_answer"] for t in evidence.RULE_THRESHOLDS]
        assert reaching == sorted(reaching, reverse=True), mode

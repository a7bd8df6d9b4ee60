"""Issue 24 end to end with the tiny model: ``rag explain`` and ``rag bench``, text and ``--json``, one test per mode,
on one shared daemon and vault (the figures mean nothing on the tiny model; the code paths do); and issue 30's
``weak_matches`` through the CLI."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fixtures.daemon import FAST_KDF, HomeDir, initialize, with_hooks
from tests.fixtures.tiny_model import TinyModel

pytest_plugins = ["tests.fixtures.tiny_model"]

NOTES = {
    "ownership.md": "# Ownership\n\nRust ownership rules: each value has an owner; dropped when the owner leaves.",
    "borrowing.md": "# Borrowing\n\nReferences borrow a value without taking ownership; the borrow checker checks.",
    "threads.md": "# Threads\n\nSpawn threads with thread::spawn and wait for them with join on the JoinHandle.",
    "subtree.md": "# Git subtree\n\nSplit a subdirectory with git subtree and push changes back upstream.",
    "isolation.md": "# 交易隔離\n\n交易隔離等級：讀已提交、可重複讀、可序列化；幻讀。",
    "forwarding.md": "# SSH 端口转发\n\n本地转发、远程转发和动态转发，ssh -D 建立 SOCKS 代理。",
}


@dataclass
class Lab:
    """The shared daemon with the notes ingested and embedded, and where the test files go."""

    home: HomeDir
    root: Path
    ids: dict[str, str]
    """Source path → record id."""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory, tiny_model: TinyModel) -> Iterator[Lab]:
    root = tmp_path_factory.mktemp("explain-bench")
    home = HomeDir(root / "home")
    home.path.mkdir(mode=0o700)
    # The evidence cosine out of the tiny model's reach: its cosines are noise, so only a note's words are evidence.
    home.config.write_text(FAST_KDF + "[rag]\nlocal_threads = 1\nauto_index = 'off'\nlocal_min_similarity = 0.999\n")
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    notes = root / "notes"
    notes.mkdir()
    for name, body in NOTES.items():
        (notes / name).write_text(body + "\n", encoding="utf-8")
    try:
        initialize(home)
        home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
        results = home.ok("rag", "ingest", "notes", str(notes))["results"]
        home.ok("rag", "index", "notes")
        yield Lab(home, root, {result["source"]: result["id"] for result in results})
    finally:
        home.stop()


def _fixture(lab: Lab, name: str, rows: list[object]) -> str:
    path = lab.root / name
    lines = [row if isinstance(row, str) else json.dumps(row, ensure_ascii=False) for row in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_explain_gives_each_results_stages_in_the_searched_order(lab: Lab, mode: str) -> None:
    home = lab.home
    query = "ownership rules of a value"
    searched = home.ok("rag", "search", "notes", query, "--mode", mode)["results"]
    threads = lab.ids["threads.md"]
    report = home.ok("rag", "explain", "notes", query, "--mode", mode, "--chunk", threads)
    assert report["mode"] == mode and report["match_mode"] == "any"
    explained = report["results"]
    assert [(c["asset_id"], c["chunk_hash"]) for c in explained] == [(h["asset_id"], h["chunk_hash"]) for h in searched]
    assert [c["label"] for c in explained] == [h["label"] for h in searched]
    assert [c["rank"] for c in explained] == list(range(1, len(searched) + 1))
    terms = {term["term"]: term for term in report["query"]["terms"]}
    assert set(terms) == {"ownership", "rules", "of", "a", "value"}
    assert terms["ownership"]["chunks"] == 2 and terms["of"]["chunks"] == 0  # a word no chunk holds weighs most
    assert terms["of"]["weight"] == max(term["weight"] for term in terms.values()) > terms["ownership"]["weight"]
    first = explained[0]
    assert first["asset_id"] == lab.ids["ownership.md"] or mode == "vector"  # the tiny model ranks at random
    assert (first["position"], first["chunks"]) == (1, 1)
    assert (first["bm25"] is None) == (mode == "vector") and (first["vector"] is None) == (mode == "bm25")
    assert (first["fusion"] is None) == (mode != "hybrid") and (first["rerank"] is None) == (mode == "bm25")
    if mode == "bm25":
        assert [c["bm25"]["rank"] for c in explained] == list(range(1, len(explained) + 1))
        assert [c["bm25"]["score"] for c in explained] == [h["score"] for h in searched]
        assert report["notes"] == ["bm25 mode: no vector ranking, fusion or reranker"]
    else:
        assert [c["rerank"]["score"] for c in explained] == pytest.approx([h["score"] for h in searched])
        assert all(c["vector"]["cosine"] is not None for c in explained)
        assert report["missing_vectors"] == 0
    if mode == "hybrid":
        assert any("Reciprocal Rank Fusion" in rule for rule in first["fusion"]["rules"])
    named = report["chunk"]
    assert named["asset_id"] == threads and named["title"] == "Threads"
    if named["rank"] is None:
        assert named["label"] is None
    if mode != "vector":
        assert named["bm25"]["rank"] is None and named["bm25"]["note"] == "holds none of the query's words"
        assert named["bm25"]["coverage"] == 0
    text = home.run("rag", "explain", "notes", query, "--mode", mode, "--chunk", f"{threads}:1", json_output=False)
    assert text.code == 0 and "Traceback" not in text.stderr
    assert text.stdout.startswith(f"{mode}, match any, language latin\n")
    assert "  term ownership: idf " in text.stdout and "[S1] " in text.stdout
    assert f"--chunk {threads}:1: " in text.stdout
    for stage in ("bm25", "vector", "fusion", "rerank"):
        present = {"bm25": mode != "vector", "vector": mode != "bm25", "fusion": mode == "hybrid"}
        assert (f"     {stage} " in text.stdout) == present.get(stage, mode != "bm25"), (stage, text.stdout)


def test_explain_names_chunks_by_position_and_hash_and_refuses_the_rest(lab: Lab) -> None:
    home = lab.home
    record = lab.ids["subtree.md"]
    found = home.ok("rag", "search", "notes", "subtree", "--mode", "bm25")["results"][0]
    by_hash = home.ok("rag", "explain", "notes", "push changes", "--mode", "bm25", "--chunk", found["chunk_hash"][:8])
    assert by_hash["chunk"]["chunk_hash"] == found["chunk_hash"] and by_hash["chunk"]["asset_id"] == record
    assert by_hash["query"]["dropped"] == [] and by_hash["query"]["widened"] == {}
    by_source = home.ok("rag", "explain", "notes", "push changes", "--mode", "bm25", "--chunk", "subtree.md:1")
    assert by_source["chunk"]["asset_id"] == record and by_source["chunk"]["rank"] == 1
    home.fails("invalid_argument", "rag", "explain", "notes", "push", "--chunk", f"{record}:2")
    home.fails("record_not_found", "rag", "explain", "notes", "push", "--chunk", "nothing")
    home.fails("invalid_argument", "rag", "explain", "notes", "push", "--chunk", "00000000")
    punctuation = home.ok("rag", "explain", "notes", "? !", "--mode", "hybrid")
    assert punctuation["results"] == [] and punctuation["query"]["dropped"] == ["?", "!"]


@pytest.mark.parametrize("mode", ["bm25", "vector", "hybrid"])
def test_bench_scores_each_mode_over_distinct_records(lab: Lab, mode: str) -> None:
    fixture = _fixture(
        lab,
        f"bench-{mode}.jsonl",
        [
            {"query": "Rust ownership rules each value has an owner", "relevant": ["ownership.md"]},  # source path
            {"query": "Split a subdirectory with git subtree", "relevant": ["Git subtree"]},  # title
            "",  # blank lines are skipped
            {"query": "交易隔離 幻讀", "relevant": [lab.ids["isolation.md"]], "note": "ignored"},  # record id
            {"query": "zebra crossing", "relevant": ["threads.md"]},  # no chunk holds it: missed
        ],
    )
    report = lab.home.ok("rag", "bench", "notes", fixture, "--modes", mode)
    assert report["questions"] == 4 and report["learned_rerank"] is False
    assert list(report["modes"]) == [mode]
    figures = report["modes"][mode]
    assert set(figures) == {"ndcg@10", "recall@10", "mrr@10", "missed"}
    assert all(0 <= figures[metric] <= 1 for metric in ("ndcg@10", "recall@10", "mrr@10"))
    if mode == "bm25":  # the tiny model ranks at random; BM25 finds the three notes that hold the words first
        assert figures == {"ndcg@10": 0.75, "recall@10": 0.75, "mrr@10": 0.75, "missed": ["zebra crossing"]}
    text = lab.home.run("rag", "bench", "notes", fixture, "--modes", mode, json_output=False)
    assert text.code == 0 and "Traceback" not in text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "4 questions, without the learned reranker"
    assert lines[1].split() == ["mode", "nDCG@10", "Recall@10", "MRR@10", "missed"]
    assert lines[2].split()[0] == mode and lines[2].split()[1] == f"{figures['ndcg@10']:.3f}"
    assert ("zebra crossing" in text.stdout) == ("zebra crossing" in figures["missed"])


def test_bench_refuses_a_bad_fixture_naming_the_line(lab: Lab, tmp_path: Path) -> None:
    home = lab.home
    bad_json = _fixture(lab, "bad-json.jsonl", [{"query": "a", "relevant": ["ownership.md"]}, "{not json"])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", bad_json)
    assert error["details"] == {"line": 2} and "line 2: not JSON" in error["message"]
    no_list = _fixture(lab, "no-list.jsonl", [{"query": "a", "relevant": "ownership.md"}])
    assert home.fails("invalid_fixture", "rag", "bench", "notes", no_list)["details"] == {"line": 1}
    unknown = _fixture(lab, "unknown.jsonl", ["", {"query": "a", "relevant": ["ownership.md", "nothing.md"]}])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", unknown, "--modes", "bm25")
    assert error["details"] == {"line": 2, "entry": "nothing.md"} and "names no searchable record" in error["message"]
    added = home.ok("memory", "add", "notes", "--kind", "card", "--title", "Threads", "--body", "Also titled Threads.")
    ambiguous = _fixture(lab, "ambiguous.jsonl", [{"query": "threads", "relevant": ["Threads"]}])
    error = home.fails("invalid_fixture", "rag", "bench", "notes", ambiguous, "--modes", "bm25")
    assert error["details"]["line"] == 1 and len(error["details"]["records"]) == 2
    # The new note has no vector yet: vector and hybrid are refused with the count, bm25 still runs.
    good = _fixture(lab, "good.jsonl", [{"query": "threads", "relevant": ["threads.md"]}])
    error = home.fails("vectors_missing", "rag", "bench", "notes", good, "--modes", "bm25,hybrid")
    assert error["details"]["missing"] == 1 and "rag index notes" in error["message"]
    assert list(home.ok("rag", "bench", "notes", good, "--modes", "bm25")["modes"]) == ["bm25"]
    usage = home.run("rag", "bench", "notes", good, "--modes", "bm25,fuzzy")
    assert usage.code == 2 and "'fuzzy' is not one of bm25, vector, hybrid" in usage.stderr
    home.ok("memory", "delete", "notes", added["id"])


def test_a_query_no_note_answers_is_marked_weak_in_the_cli(lab: Lab) -> None:
    """Issue 30 item 4 (acceptance 5): ``rag search notes zzzqqqxyz`` in the default mode shows the nearest notes,
    marked weak, with a warning; a query a note holds is not marked; ``rag explain`` says the same."""
    home = lab.home
    weak = home.ok("rag", "search", "notes", "zzzqqqxyz")
    assert weak["mode"] == "hybrid" and weak["results"] and weak["weak_matches"] is True
    assert any(warning.startswith("weak matches: ") for warning in weak["warnings"])
    text = home.run("rag", "search", "notes", "zzzqqqxyz", json_output=False)
    assert text.code == 0 and "[S1]" in text.stdout
    assert "warning: weak matches: " in text.stderr
    answered = home.ok("rag", "search", "notes", "rust ownership rules owner")
    assert answered["results"][0]["asset_id"] == lab.ids["ownership.md"]
    assert answered["weak_matches"] is False and "warnings" not in answered
    assert home.ok("rag", "search", "notes", "zzzqqqxyz", "--mode", "bm25") == {
        "mode": "bm25",
        "match_mode": "any",
        "results": [],
        "weak_matches": False,
    }
    assert home.ok("rag", "explain", "notes", "zzzqqqxyz")["weak_matches"] is True
    assert home.ok("rag", "explain", "notes", "rust ownership rules owner")["weak_matches"] is False
    explained = home.run("rag", "explain", "notes", "zzzqqqxyz", json_output=False)
    assert explained.code == 0 and "  weak matches: " in explained.stdout

"""The offline fusion harness (``ops/bench/fusion_fit.py``, issue 30 item 3) on the tiny model: the code path (arms
cached once, rules scored, leave-one-set-out), not the figures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ops.bench import fusion_fit
from tests.fixtures.tiny_model import TinyModel

pytest_plugins = ["tests.fixtures.tiny_model"]


def _write_set(folder: Path, offset: int) -> None:
    folder.mkdir()
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]
    documents = [
        {"id": f"en-{i}", "title": "", "text": f"{words[(i + offset) % 10]} {words[(i * 3) % 10]} note {i} 第{i}篇"}
        for i in range(30)
    ]
    queries = [{"id": f"en2en-{i}", "text": documents[i]["text"]} for i in range(8)]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in documents))
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in queries))
    qrels = "".join(f"en2en-{i}\ten-{i}\t1\n" for i in range(8))
    (folder / "qrels.tsv").write_text("query_id\tdoc_id\trelevance\n" + qrels)


def test_arms_are_cached_and_every_set_is_held_out_once(
    tmp_path: Path, tiny_model: TinyModel, capsys: pytest.CaptureFixture[str]
) -> None:
    sets = [tmp_path / "one", tmp_path / "two"]
    for offset, folder in enumerate(sets):
        _write_set(folder, offset)
    cache = tmp_path / "cache"
    argv = [*map(str, sets), "--cache", str(cache), "--model-dir", str(tiny_model.model_dir), "--json"]
    assert fusion_fit.main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert sorted(path.name for path in cache.iterdir()) == ["one.arms.pkl", "one.npz", "two.arms.pkl", "two.npz"]
    assert [fold["held_out"] for fold in first["folds"]] == ["one", "two"]
    for fold in first["folds"]:
        assert fold["better_arm"] in {"bm25", "vector"} and len(fold["difference"]) == 3
    assert set(first["means"]["one"]) >= {"bm25", "vector", "current"}
    assert all(0.0 <= value <= 1.0 for value in first["means"]["one"].values())
    assert fusion_fit.main(argv) == 0  # from the cache: the same figures without the model's help
    assert json.loads(capsys.readouterr().out) == first

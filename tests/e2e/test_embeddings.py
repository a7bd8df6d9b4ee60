"""Issue 4 end to end: model install, the embedding worker, vector and hybrid search, budgets and reuse.

The daemon runs the real install, load and inference code on the tiny generated model (``ops/make_tiny_model.py``),
which replaces the pinned manifest through the test hooks.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
from fractions import Fraction
from pathlib import Path

import pytest

from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, memories_executable, with_hooks
from tests.fixtures.tiny_model import TinyModel

NOTES = {
    "ownership": "Rust ownership rules: each value has an owner; the value is dropped when the owner leaves scope.",
    "borrowing": "References borrow a value without taking ownership; the borrow checker enforces the rules.",
    "threads": "Spawn threads with thread::spawn and wait for them with join on the JoinHandle.",
    "git": "Split a subdirectory with git subtree and push changes back to the other repository.",
    "sql": "Transaction isolation levels: read committed, repeatable read, serializable; phantom reads.",
    "ssh": "SSH port forwarding: local, remote and dynamic forwarding with ssh -D for a SOCKS proxy.",
}
RAG = '[rag]\nlocal_threads = 1\nembed_batch_size = 2\nauto_index = "off"\n'


FINISHED = ("done", "failed", "cancelled")
"""Job states after the end (``queued`` and ``running`` are not)."""


def _model_home(home: HomeDir, tiny: TinyModel, *, extra_config: str = "", **hooks: object) -> HomeDir:
    home.config.write_text(home.config.read_text() + RAG + extra_config)
    with_hooks(home, model_manifest=str(tiny.manifest_path), **hooks)
    initialize(home)
    installed = home.ok("rag", "model-install", "--from", str(tiny.model_dir))
    assert {f["status"] for f in installed["files"]} == {"copied"}
    return home


def _add_notes(home: HomeDir) -> dict[str, str]:
    return {
        name: home.ok("memory", "add", "notes", "--kind", "card", "--title", name, "--body", body)["id"]
        for name, body in NOTES.items()
    }


def _titles(result: dict) -> list[str]:
    return [hit["title"] for hit in result["results"]]


def test_without_a_model_vector_modes_say_how_to_install(vault: HomeDir) -> None:
    _add_notes(vault)
    for mode in ("vector", "hybrid"):
        error = vault.fails("model_not_installed", "rag", "search", "notes", "ownership", "--mode", mode)
        assert "memories rag model-install" in error["message"]
        assert "onnx/model_q4.onnx" in error["message"] and "tokenizer.json" in error["details"]["missing"]
    vault.fails("model_not_installed", "rag", "index", "notes")
    result = vault.ok("rag", "search", "notes", "ownership")
    assert result["mode"] == "bm25" and _titles(result)[0] == "ownership"
    status = vault.ok("rag", "status", "notes")
    assert status["model"]["installed"] is False and status["model"]["space_key"] is None


def test_install_from_a_folder_then_index_and_search(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    model_dir = home.path / "models" / "embeddinggemma"
    notice = (model_dir / "NOTICE").read_text()
    assert "https://ai.google.dev/gemma/terms" in notice and "prohibited_use_policy" in notice
    assert (model_dir / "MODEL_CARD.md").exists()
    assert not (model_dir / "onnx" / "model_q4.onnx_data").is_symlink()
    again = home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
    assert {f["status"] for f in again["files"]} == {"reused"}
    human = home.run("rag", "model-install", "--from", str(tiny_model.model_dir), json_output=False)
    assert human.code == 0 and " MiB)" in human.stdout and "bytes" not in human.stdout  # one unit for sizes

    ids = _add_notes(home)
    status = home.ok("rag", "status", "notes")
    assert status["model"]["installed"] and status["model"]["verified"]
    report = home.ok("rag", "index", "notes")
    assert report == {"embedded_now": len(NOTES), "reused": 0, "missing": 0, "failed": []}
    assert home.ok("rag", "index", "notes") == {"embedded_now": 0, "reused": len(NOTES), "missing": 0, "failed": []}
    status = home.ok("rag", "status", "notes")
    assert (status["embedded"], status["missing"], status["vector_bytes"]) == (len(NOTES), 0, len(NOTES) * 768 * 4)
    assert status["model"]["space_key"].startswith("local-onnx:")

    default = home.ok("rag", "search", "notes", "ownership rules")
    assert default["mode"] == "hybrid"
    vector = home.ok("rag", "search", "notes", "ownership rules", "--mode", "vector", "--no-rerank")
    scores = [hit["score"] for hit in vector["results"]]
    assert scores == sorted(scores, reverse=True) and all(-1 <= s <= 1 for s in scores)
    assert {hit["asset_id"] for hit in vector["results"]} <= set(ids.values())
    assert [hit["label"] for hit in vector["results"]] == [f"S{n}" for n in range(1, len(scores) + 1)]


def test_hybrid_is_reciprocal_rank_fusion_of_the_two_rankings(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    query = "ownership"  # every BM25 hit holds the whole query, so every one enters the fusion
    args = ("rag", "search", "notes", query, "--no-rerank", "--limit", "100")
    lexical = [h["chunk_hash"] for h in home.ok(*args, "--mode", "bm25")["results"]]
    semantic = [h["chunk_hash"] for h in home.ok(*args, "--mode", "vector")["results"]]
    hybrid = home.ok(*args, "--mode", "hybrid")["results"]
    assert lexical and semantic
    expected = {}
    for ranking in (lexical, semantic):
        for rank, chunk in enumerate(ranking, 1):
            expected[chunk] = expected.get(chunk, Fraction(0)) + Fraction(1, 60 + rank)
    assert {h["chunk_hash"]: h["score"] for h in hybrid} == pytest.approx({k: float(v) for k, v in expected.items()})
    assert [h["score"] for h in hybrid] == sorted((float(v) for v in expected.values()), reverse=True)

    # One ranking empty (no chunk holds the term): hybrid keeps the vector order, scores 1/(60 + rank).
    only_vector = [
        h["chunk_hash"]
        for h in home.ok("rag", "search", "notes", "zyxwvut", "--mode", "vector", "--no-rerank")["results"]
    ]
    fused = home.ok("rag", "search", "notes", "zyxwvut", "--mode", "hybrid", "--no-rerank")["results"]
    assert home.ok("rag", "search", "notes", "zyxwvut", "--mode", "bm25")["results"] == []
    assert [h["chunk_hash"] for h in fused] == only_vector
    assert [h["score"] for h in fused] == pytest.approx([1 / (60 + r) for r in range(1, len(fused) + 1)])


def test_a_lexical_match_on_a_small_part_of_the_query_does_not_enter_hybrid(
    home: HomeDir, tiny_model: TinyModel
) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    # Only "ownership" is in the vault: the chunks holding it cover little of the query's weight (the words no
    # chunk holds are the rarest of all), so BM25 has no say and hybrid keeps the vector order.
    query = "ownership quixotic zephyrean marmalade"
    args = ("rag", "search", "notes", query, "--no-rerank", "--limit", "100")
    assert {hit["title"] for hit in home.ok(*args, "--mode", "bm25")["results"]} == {"ownership", "borrowing"}
    vector = [hit["chunk_hash"] for hit in home.ok(*args, "--mode", "vector")["results"]]
    hybrid = home.ok(*args, "--mode", "hybrid")["results"]
    assert [hit["chunk_hash"] for hit in hybrid] == vector
    assert [hit["score"] for hit in hybrid] == pytest.approx([1 / (60 + r) for r in range(1, len(vector) + 1)])


def test_chunks_in_another_language_keep_their_vector_places_in_hybrid(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    for title, body in [
        ("所有權", "Rust 的所有權規則：每個值都有一個擁有者。"),
        ("執行緒", "用 thread::spawn 建立執行緒。"),
    ]:
        home.ok("memory", "add", "notes", "--kind", "card", "--title", title, "--body", body)
    # English words every English note holds, so BM25 lifts its own candidates; it cannot see the Chinese ones.
    query = "ownership rules value owner"
    args = ("rag", "search", "notes", query, "--limit", "100")
    vector = [hit["title"] for hit in home.ok(*args, "--mode", "vector", "--no-rerank")["results"]]
    places = {position: title for position, title in enumerate(vector) if title in {"所有權", "執行緒"}}
    assert len(places) == 2
    for flags in ((), ("--no-rerank",)):
        for mode in ("hybrid", "vector"):
            results = home.ok(*args, "--mode", mode, *flags)["results"]
            assert {position: results[position]["title"] for position in places} == places, (mode, flags)
            scores = [hit["score"] for hit in results]
            assert scores == sorted(scores, reverse=True)


def test_strict_match_modes_filter_vector_candidates(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    for mode in ("vector", "hybrid"):
        strict = home.ok("rag", "search", "notes", "owner dropped", "--mode", mode, "--match-mode", "all")
        assert _titles(strict) == ["ownership"], strict
        both = home.ok("rag", "search", "notes", "ownership rules", "--mode", mode, "--match-mode", "all")
        assert set(_titles(both)) == {"ownership", "borrowing"}
        phrase = home.ok("rag", "search", "notes", "git subtree", "--mode", mode, "--match-mode", "phrase")
        assert _titles(phrase) == ["git"]
        loose = home.ok("rag", "search", "notes", "ownership rules", "--mode", mode)
        assert len(loose["results"]) > 1


def test_budget_cut_then_retry_embeds_only_the_rest(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model, cut_after_batches=1)
    ids = _add_notes(home)
    first = home.fails("budget_exceeded", "rag", "index", "notes")
    assert first["details"] == {"embedded_now": 2, "reused": 0, "missing": len(NOTES) - 2}
    # The batches a budget stop kept are sealed in the home: a lock (which restarts the workers) keeps them.
    home.ok("lock")
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    done, rounds = 2, 1
    while True:
        result = home.run("rag", "index", "notes")
        rounds += 1
        if result.code == 0:
            assert (result.doc["reused"], result.doc["missing"], result.doc["failed"]) == (done, 0, [])
            done += result.doc["embedded_now"]
            break
        details = result.doc["error"]["details"]
        assert details["reused"] == done  # the batches of earlier runs are reused, never embedded again
        done += details["embedded_now"]
    assert done == len(NOTES) and rounds <= len(NOTES)

    # Editing one record re-embeds only its changed chunk.
    home.ok("memory", "update", "notes", ids["git"], "--body", "Git subtree merges another repository into a folder.")
    assert home.ok("rag", "index", "notes") == {"embedded_now": 1, "reused": len(NOTES) - 1, "missing": 0, "failed": []}
    # The embedding worker's own calls: three batches of two for the six notes, then one for the edit.
    embedding = next(w for w in home.status()["workers"] if w["name"] == "embedding")
    assert embedding["completed"]["EmbedBatch"] == len(NOTES) // 2 + 1

    # Lock restarts the index worker (status works while locked and says so); its vectors come back from the home.
    home.ok("lock")
    status = home.ok("rag", "status", "notes")
    # embedded is null: the vectors are kept sealed in the home, not loaded (issue 29 item 8: it said 0)
    assert (status["locked"], status["cache"], status["embedded"], status["chunks"]) == (True, "cold", None, 0)
    assert status["vectors"] == "sealed in the home"
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    assert home.ok("rag", "index", "notes") == {"embedded_now": 0, "reused": len(NOTES), "missing": 0, "failed": []}


def test_background_index_finishes_a_vault_that_needs_several_budgets(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model, cut_after_batches=1)
    _add_notes(home)
    job_id = home.ok("rag", "index", "notes", "--background")["job_id"]
    job = home.wait_for(
        lambda: next((j for j in home.ok("jobs")["jobs"] if j["id"] == job_id and j["state"] in FINISHED), None),
        what="the background index job to finish",
    )
    assert (job["state"], job["error"], job["done"], job["total"]) == ("done", None, len(NOTES), len(NOTES))
    status = home.ok("rag", "status", "notes")
    assert (status["embedded"], status["missing"]) == (len(NOTES), 0)


def test_killing_the_embedding_worker_fails_the_job_and_the_next_run_reuses(
    home: HomeDir, tiny_model: TinyModel, tmp_path: Path
) -> None:
    """The kill lands at a known point: the hold hook lets one batch of 2 through, then holds the second batch in
    the worker (creating the marker) until the kill; the restarted worker runs freely."""
    marker = tmp_path / "holding"
    _model_home(home, tiny_model, hold_step={"kind": "EmbedBatch", "after": 1, "marker": str(marker)})
    _add_notes(home)
    index = subprocess.Popen(
        [memories_executable(), "rag", "index", "notes", "--json"],
        env={**os.environ, "MEMORIES_HOME": str(home.path), **home.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    home.wait_for(marker.exists, timeout=120, what="the second embedding batch held in the worker")
    os.kill(home.worker_pid("embedding"), signal.SIGKILL)
    out, _ = index.communicate(timeout=120)
    assert index.returncode == 1 and b'"code":"worker_crashed"' in out
    assert home.ok("rag", "status", "notes")["embedded"] == 2  # the first batch, stored before the kill
    report = home.ok("rag", "index", "notes")
    assert report == {"embedded_now": len(NOTES) - 2, "reused": 2, "missing": 0, "failed": []}


def test_a_broken_local_model_dir_is_model_invalid(home: HomeDir, tiny_model: TinyModel, tmp_path) -> None:  # type: ignore[no-untyped-def]
    broken = tmp_path / "broken-model"
    broken.mkdir()
    (broken / "onnx").mkdir()
    (broken / "onnx" / "model_q4.onnx").write_bytes(b"not a graph")
    (broken / "onnx" / "model_q4.onnx_data").write_bytes(b"")
    (broken / "tokenizer.json").write_text("{}")
    home.config.write_text(home.config.read_text() + f"[rag]\nlocal_model_dir = '{broken}'\nauto_index = 'off'\n")
    initialize(home)
    home.ok("memory", "add", "notes", "--title", "t", "--body", "some text")
    home.fails("model_invalid", "rag", "search", "notes", "text", "--mode", "vector")
    result = home.ok("rag", "search", "notes", "text")  # the default falls back to bm25, with a warning
    assert result["mode"] == "bm25" and any("does not load" in w for w in result["warnings"])


def test_an_index_step_longer_than_the_silence_limit_is_not_cut(home: HomeDir, tiny_model: TinyModel) -> None:
    """The client gives up after 10 s without a frame; a step of 12 s still finishes, because the daemon sends a
    heartbeat every second while the request runs (the test hook slows the one embedding batch)."""
    _model_home(home, tiny_model, step_delay_seconds={"EmbedBatch": 12})
    home.ok("memory", "add", "notes", "--title", "one", "--body", "a single note: one embedding batch")
    report = home.ok("rag", "index", "notes")
    assert (report["embedded_now"], report["reused"], report["missing"]) == (1, 0, 0)


def test_an_untouched_config_never_warns_about_its_threads(home: HomeDir, tiny_model: TinyModel) -> None:
    """``local_threads`` left out means 4, capped at the cores without a word; on a 2-core machine the old default
    warned about itself on every load."""
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
    home.ok("memory", "add", "notes", "--title", "t", "--body", "threads of the default config")
    index = home.ok("rag", "index", "notes")
    status = home.ok("rag", "status", "notes")
    assert not [w for w in index.get("warnings", []) + status.get("warnings", []) if "local_threads" in w]


def test_model_install_says_on_the_progress_line_that_it_retries(
    home: HomeDir, tiny_model: TinyModel, http_mirror
) -> None:  # type: ignore[no-untyped-def]
    _mirror_model(http_mirror, tiny_model)
    http_mirror.fault(tiny_model.manifest.graph).statuses = [503]
    home.config.write_text(
        home.config.read_text()
        + f"[rag]\nmodel_download_base_url = '{http_mirror.base_url}'\n[rag.http]\nbackoff_ms = 10\n"
    )
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    run = home.run("rag", "model-install")
    assert run.code == 0, run.stdout + run.stderr
    events = [json.loads(line) for line in run.stderr.splitlines() if line.startswith("{")]
    notes = [event["note"] for event in events if "note" in event]
    assert len(notes) == 1 and notes[0].startswith("retrying 2/3 after 503, waiting ")


def _mirror_model(mirror, tiny: TinyModel) -> None:  # type: ignore[no-untyped-def]
    mirror.add_files({file.path: (tiny.model_dir / file.path).read_bytes() for file in tiny.manifest.files})


def test_model_install_from_a_loopback_https_mirror(
    home: HomeDir, tiny_model: TinyModel, https_mirror, ca_bundle
) -> None:  # type: ignore[no-untyped-def]
    _mirror_model(https_mirror, tiny_model)
    home.config.write_text(
        home.config.read_text()
        + f"[rag]\nmodel_download_base_url = '{https_mirror.base_url}'\n"
        + f"[rag.http]\nca_bundle = '{ca_bundle}'\nbackoff_ms = 10\n"
    )
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    first = home.run("rag", "model-install")
    assert first.code == 0, first.stdout + first.stderr
    assert {f["status"] for f in first.doc["files"]} == {"downloaded"}
    assert '"unit":"bytes"' in first.stderr  # progress events as JSON lines on stderr
    assert len(https_mirror.log) == len(tiny_model.manifest.files)
    again = home.ok("rag", "model-install")
    assert {f["status"] for f in again["files"]} == {"reused"}
    assert len(https_mirror.log) == len(tiny_model.manifest.files)  # the second run downloaded nothing
    home.ok("memory", "add", "notes", "--title", "t", "--body", "semantic search works")
    assert home.ok("rag", "search", "notes", "semantic", "--mode", "vector")["results"]
    assert _folder_modes(home) == dict.fromkeys(_MODEL_FOLDERS, 0o700)  # owner-only, search bit included


_MODEL_FOLDERS = ("models", "models/embeddinggemma", "models/embeddinggemma/onnx")


def _folder_modes(home: HomeDir) -> dict[str, int]:
    return {folder: stat.S_IMODE((home.path / folder).stat().st_mode) for folder in _MODEL_FOLDERS}


def test_model_folders_left_without_their_search_bit_are_repaired(
    home: HomeDir, tiny_model: TinyModel, http_mirror
) -> None:  # type: ignore[no-untyped-def]
    """An older release could create ``models/`` as 0600; as a normal user every later install then failed with
    PermissionError. The daemon gives its own folders their search bit back when it starts."""
    _mirror_model(http_mirror, tiny_model)
    home.config.write_text(home.config.read_text() + f"[rag]\nmodel_download_base_url = '{http_mirror.base_url}'\n")
    for folder in _MODEL_FOLDERS:
        (home.path / folder).mkdir()
    for folder in reversed(_MODEL_FOLDERS):
        (home.path / folder).chmod(0o600)
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    assert _folder_modes(home) == dict.fromkeys(_MODEL_FOLDERS, 0o700)
    assert {f["status"] for f in home.ok("rag", "model-install")["files"]} == {"downloaded"}


def test_model_install_through_a_socks5h_proxy(
    home: HomeDir, tiny_model: TinyModel, https_mirror, socks_proxy, ca_bundle
) -> None:  # type: ignore[no-untyped-def]
    _mirror_model(https_mirror, tiny_model)
    home.config.write_text(
        home.config.read_text()
        + f"[rag]\nmodel_download_base_url = '{https_mirror.url(host='mirror.test')}'\n"
        + f"[rag.http]\nca_bundle = '{ca_bundle}'\nproxy_url = '{socks_proxy.url}'\n"
    )
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    assert {f["status"] for f in home.ok("rag", "model-install")["files"]} == {"downloaded"}
    assert socks_proxy.carried and all(c.host == "mirror.test" for c in socks_proxy.carried)


def test_a_mismatched_model_file_is_left_untouched(home: HomeDir, tiny_model: TinyModel) -> None:
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    stray = home.path / "models" / "embeddinggemma" / "tokenizer.json"
    stray.parent.mkdir(parents=True)
    stray.write_text("my own tokenizer")
    error = home.fails("model_file_mismatch", "rag", "model-install", "--from", str(tiny_model.model_dir))
    assert "tokenizer.json" in error["message"]
    assert stray.read_text() == "my own tokenizer"


def test_vector_and_hybrid_never_return_private_records_or_credentials(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    secret = "quuxsecretword"
    private = home.ok("memory", "add", "notes", "--sensitivity", "private", "--title", "p", "--body", secret)["id"]
    credential = home.ok("memory", "add", "notes", "--kind", "credential", "--title", "c", "--body", secret)["id"]
    card = home.ok("memory", "add", "notes", "--kind", "card", "--title", "visible", "--body", secret)["id"]
    for mode in ("vector", "hybrid"):
        for match in ("any", "all", "phrase"):
            found = home.ok("rag", "search", "notes", secret, "--mode", mode, "--match-mode", match, "--limit", "100")
            ids = {hit["asset_id"] for hit in found["results"]}
            assert private not in ids and credential not in ids
            assert card in ids
    home.ok("memory", "update", "notes", card, "--sensitivity", "private")
    for mode in ("vector", "hybrid"):
        found = home.ok("rag", "search", "notes", secret, "--mode", mode, "--limit", "100")
        assert card not in {hit["asset_id"] for hit in found["results"]}


def test_edits_show_in_the_next_vector_search(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    ids = _add_notes(home)
    args = ("--mode", "vector", "--match-mode", "all", "--limit", "100")
    home.ok("memory", "update", "notes", ids["git"], "--body", "zebra crossing notes")
    assert [hit["title"] for hit in home.ok("rag", "search", "notes", "zebra", *args)["results"]] == ["git"]
    assert home.ok("rag", "search", "notes", "subtree", *args)["results"] == []
    home.ok("memory", "delete", "notes", ids["git"])
    assert home.ok("rag", "search", "notes", "zebra", *args)["results"] == []
    added = home.ok("memory", "add", "notes", "--title", "new", "--body", "zebra again")["id"]
    assert [hit["asset_id"] for hit in home.ok("rag", "search", "notes", "zebra", *args)["results"]] == [added]


def test_background_index_keeps_going_through_edits(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model, step_delay_seconds={"EmbedBatch": 0.3})
    ids = _add_notes(home)
    job_id = home.ok("rag", "index", "notes", "--background")["job_id"]
    for number in range(5):  # more edits than a job may rerun: vectors are content-addressed, the job adopts them
        home.ok("memory", "update", "notes", ids["sql"], "--body", f"isolation level edit {number}")
    job = home.wait_for(
        lambda: next((j for j in home.ok("jobs")["jobs"] if j["id"] == job_id and j["state"] in FINISHED), None),
        what="the background index job to finish",
    )
    assert (job["state"], job["error"]) == ("done", None)
    status = home.ok("rag", "status", "notes")
    assert (status["embedded"], status["missing"]) == (len(NOTES), 0)


def test_a_search_right_after_the_embedding_worker_died(home: HomeDir, tiny_model: TinyModel) -> None:
    _model_home(home, tiny_model)
    _add_notes(home)
    home.ok("rag", "index", "notes")
    for _ in range(2):
        os.kill(home.worker_pid("embedding"), signal.SIGKILL)
        found = home.ok("rag", "search", "notes", "ownership", "--mode", "vector")  # waits for the restart, reloads
        assert found["results"]
    completed = next(w for w in home.status()["workers"] if w["name"] == "embedding")["completed"]
    assert completed["EmbedQuery"] == 2 and completed["EmbedBatch"] >= len(NOTES) // 2

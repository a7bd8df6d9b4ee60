"""Issue 8 end to end: remote embeddings, ``rag ask``, the learned reranker, retries and device-only vaults,
through the real daemon and CLI against the loopback fake model services (``tests/fixtures/model_servers.py``).

The fake's records (request bodies, headers, arrival times on its own clock) are the evidence.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fixtures.daemon import HomeDir, initialize, memories_executable, run_on_terminal
from tests.fixtures.model_servers import ModelServer, Reply, chat_completion, gemini_content, recorded_text
from tests.fixtures.servers import ConnectProxy

QUERY_WORD = "qwordx"


def _embedding(server: ModelServer, dimensions: int | None = 2, extra: str = "") -> str:
    dims = f"dimensions = {dimensions}\n" if dimensions is not None else ""
    return (
        f"[rag.embedding]\nprotocol = 'compatible'\nurl = '{server.url('embeddings')}'\nmodel = 'fake'\n{dims}{extra}"
    )


def _generation(server: ModelServer, protocol: str = "compatible", extra: str = "") -> str:
    operation = "gemini_generate" if protocol == "gemini" else "chat"
    return f"[rag.generation]\nprotocol = '{protocol}'\nurl = '{server.url(operation)}'\nmodel = 'fake-chat'\n{extra}"


def _start(home: HomeDir, *tables: str) -> HomeDir:
    home.config.write_text(home.config.read_text() + "".join(tables))
    return initialize(home)


def _add(home: HomeDir, title: str, body: str, vault: str = "notes", *extra: str) -> str:
    return home.ok("memory", "add", vault, "--kind", "card", "--title", title, "--body", body, *extra)["id"]


# -- acceptance 2: vectors -------------------------------------------------------------------------------------


def test_compatible_vectors_base64_and_floats_score_alike(home: HomeDir, model_server: ModelServer) -> None:
    model_server.vectors = {QUERY_WORD: [1, 0], "base64note": "mpkZP83MTD8=", "floatnote": [0.6, 0.8]}
    _start(home, _embedding(model_server, 2))
    _add(home, "b", "base64note about apples")
    _add(home, "f", "floatnote about apples")

    result = home.ok("rag", "search", "notes", f"{QUERY_WORD} apples", "--mode", "vector", "--no-rerank")

    assert sorted(hit["score"] for hit in result["results"]) == pytest.approx([0.6, 0.6], abs=1e-6)
    first = model_server.calls("embeddings")[0].body
    assert first["encoding_format"] == "float" and first["dimensions"] == 2


@pytest.mark.parametrize(
    ("dimensions", "vector", "phrase"),
    [
        (2, "mpkZP83MTA==", "7 bytes"),
        (2, [0.1, 0.2, 0.3], "3 values, expected 2"),
        (4, [[0.1, 0.2, 0.3, 0.4], [0.5, 0.6, 0.7, 0.8]], "nested"),
        (4, [], "empty"),
        (4, [0, 0, 0, 0], "all zeros"),
        (256, [0.01] * 1024, "1024 values, expected 256"),
    ],
)
def test_bad_vectors_fail_and_store_nothing(
    home: HomeDir, model_server: ModelServer, dimensions: int, vector: object, phrase: str
) -> None:
    model_server.vectors = {"badnote": vector}
    _start(home, _embedding(model_server, dimensions))
    _add(home, "x", "badnote about apples")

    error = home.fails("invalid_vector", "rag", "index", "notes")

    assert phrase in error["message"]
    assert home.ok("rag", "status", "notes")["embedded"] == 0


def test_a_vector_is_stored_normalized(home: HomeDir, model_server: ModelServer) -> None:
    model_server.vectors = {QUERY_WORD: [0, 0, 1, 0], "rawnote": [3, 0, 4, 0]}
    _start(home, _embedding(model_server, 4))
    _add(home, "x", "rawnote about apples")

    result = home.ok("rag", "search", "notes", f"{QUERY_WORD} apples", "--mode", "vector", "--no-rerank")

    assert result["results"][0]["score"] == pytest.approx(0.8, abs=1e-6)


# -- acceptance 3: server limits -------------------------------------------------------------------------------


def test_stated_limits_are_met_and_too_long_chunks_are_reported(
    home: HomeDir, model_server: ModelServer, tmp_path: Path
) -> None:
    model_server.max_batch = 32
    model_server.max_input_chars = 500
    notes = tmp_path / "notes"
    notes.mkdir()
    for number in range(100):
        body = f"note {number} " + ("long text " * 70 if number in (7, 40, 77) else "short text")
        (notes / f"n{number:03}.md").write_text(body)
    _start(home, _embedding(model_server, None, "batch_size = 60\n"))
    home.ok("rag", "ingest", "notes", str(notes))

    result = home.run("rag", "index", "notes")

    assert result.code == 3, result.stdout + result.stderr
    report = result.doc
    assert report["embedded_now"] == 97 and report["missing"] == 0 and len(report["failed"]) == 3
    assert all("input is too long" in failure["error"] for failure in report["failed"])
    assert {"asset_id", "revision", "chunk_hash", "error"} == set(report["failed"][0])
    sizes = [len(call.body["input"]) for call in model_server.calls("embeddings")]
    assert sizes[0] == 60 and max(sizes[1:]) <= 32
    assert home.ok("rag", "status", "notes")["failed"] == 3

    before = len(model_server.calls("embeddings"))
    home.ok("rag", "search", "notes", "long text", "--mode", "vector")
    after = model_server.calls("embeddings")[before:]
    assert [call.body["input"] for call in after] == [["long text"]]


# -- acceptance 4: timeouts ------------------------------------------------------------------------------------


def test_a_slow_first_answer_succeeds_within_the_default_timeout(home: HomeDir, model_server: ModelServer) -> None:
    model_server.script("embeddings", Reply(delay=12))
    _start(home, _embedding(model_server))
    _add(home, "x", "slow note")

    assert home.ok("rag", "index", "notes")["embedded_now"] == 1
    assert len(model_server.calls("embeddings")) == 1


def test_a_read_timeout_names_the_setting(home: HomeDir, model_server: ModelServer) -> None:
    model_server.script("embeddings", Reply(delay=12))
    _start(home, "[rag.http]\ntimeout_seconds = 5\nretries = 0\n", _embedding(model_server))
    _add(home, "x", "slow note")

    error = home.fails("upstream_unavailable", "rag", "index", "notes")

    assert "read timeout" in error["message"] and "rag.http.timeout_seconds" in error["message"]


# -- acceptance 5: rag ask -------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["compatible", "gemini"])
def test_ask_answers_with_checked_citations(home: HomeDir, model_server: ModelServer, protocol: str) -> None:
    _start(home, _generation(model_server, protocol))
    record = _add(home, "Backups", "Nightly backups run restic to the NAS at two in the morning.")
    _add(home, "Cooking", "Boil the pasta for nine minutes.")

    answer = home.ok("rag", "ask", "notes", "when do restic backups run", "--mode", "bm25")

    assert answer["status"] == "answered" and answer["answer"] == "From your notes [S1]."
    (citation,) = answer["citations"]
    assert citation["asset_id"] == record and citation["label"] == "S1"
    body = home.ok("memory", "read", "notes", record, "--revision", str(citation["revision"]))["body"]
    assert body.encode()[citation["byte_start"] : citation["byte_end"]].decode() == citation["text"]
    (call,) = model_server.calls()
    if protocol == "gemini":
        sent = json.loads(call.body["contents"][0]["parts"][0]["text"])
        assert call.body["generationConfig"]["maxOutputTokens"] == 1024
    else:
        sent = json.loads(call.body["messages"][1]["content"])
        assert call.body["max_tokens"] == 1024 and "tools" not in call.body
    assert [source["text"] for source in sent["sources"]] == [citation["text"]]
    assert "pasta" not in json.dumps(call.body)


def test_a_natural_question_to_a_one_note_vault_is_answered_in_bm25_mode(
    home: HomeDir, model_server: ModelServer
) -> None:
    """Issue 22: its words of asking (what, does, the, say, about) made the note holding every content word cover
    three of eight query words, and the ask was insufficient_evidence."""
    _start(home, _generation(model_server))
    record = _add(home, "Calibration", "ZEBRAMARK calibration evidence: drift stayed under 0.2 % across three runs.")

    answer = home.ok("rag", "ask", "notes", "What does the evidence say about ZEBRAMARK calibration?", "--mode", "bm25")

    assert answer["status"] == "answered" and [c["asset_id"] for c in answer["citations"]] == [record]


@pytest.mark.parametrize(
    ("change", "generations", "status"),
    [
        ("add", 1, "answered"),  # an unrelated note: the answer stands on what it was shown
        ("edit", 2, "answered"),  # the note it was shown changed: generated again, from the new text
        ("private", 1, "insufficient_evidence"),  # no longer eligible: the answer is dropped, nothing else is evidence
    ],
)
def test_an_ask_generates_again_only_when_the_chunks_it_was_shown_changed(
    home: HomeDir, model_server: ModelServer, change: str, generations: int, status: str
) -> None:
    """Each generation may be a paid call: a vault change during one runs retrieval again, never the model, unless
    what the model was shown is no longer what the vault holds."""
    _start(home, _generation(model_server))
    shown = _add(home, "Backups", "Nightly backups run restic to the NAS at two.")
    released = threading.Event()
    model_server.script("chat", Reply(hold=released))
    with ThreadPoolExecutor(1) as pool:
        asking = pool.submit(home.ok, "rag", "ask", "notes", "restic backups", "--mode", "bm25")
        home.wait_for(lambda: model_server.calls("chat"), what="the generation request")
        if change == "add":
            _add(home, "Cooking", "Boil the pasta for nine minutes.")
        elif change == "edit":
            home.ok("memory", "update", "notes", shown, "--body", "Nightly backups run restic to the NAS at three.")
        else:
            home.ok("memory", "update", "notes", shown, "--sensitivity", "private")
        released.set()
        answer = asking.result(timeout=120)

    assert answer["status"] == status and len(model_server.calls("chat")) == generations
    if status == "answered":
        (citation,) = answer["citations"]
        body = home.ok("memory", "read", "notes", shown)["body"]
        assert citation["revision"] == (2 if change == "edit" else 1) and citation["text"] == body
        sent = json.loads(model_server.calls("chat")[-1].body["messages"][1]["content"])
        assert [source["text"] for source in sent["sources"]] == [body]


def test_ask_shows_an_answers_paragraphs_and_escapes_its_terminal_controls(
    home: HomeDir, model_server: ModelServer
) -> None:
    model_server.answer = lambda body: json.dumps(
        {"answer": "First [S1].\n\nSecond\x1b]0;owned\x07 paragraph.", "citations": ["S1"]}
    )
    _start(home, _generation(model_server))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")

    human = home.run("rag", "ask", "notes", "restic backups", "--mode", "bm25", json_output=False)

    assert human.code == 0, human.stderr
    assert human.stdout.startswith("First [S1].\n\nSecond\\x1b]0;owned\\x07 paragraph.\n"), human.stdout


def test_a_slow_ask_shows_its_wait_and_its_retries_on_a_terminal_only(home: HomeDir, model_server: ModelServer) -> None:
    """Issue 22 item 4: on a terminal, the spinner line with the seconds waited and each retry as its own line;
    with --json, stdout is the one document it always was (the progress goes to stderr as JSON lines)."""
    rate_limited = Reply(429, {"error": {"message": "rate limited"}}, headers={"Retry-After": "1"})
    model_server.script("chat", rate_limited, Reply(delay=10), rate_limited)  # the slow service: 10 s
    _start(home, _generation(model_server))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")

    shown = run_on_terminal(home, ["rag", "ask", "notes", "restic backups", "--mode", "bm25"], [])
    scripted = home.run("rag", "ask", "notes", "restic backups", "--mode", "bm25")

    assert shown.code == 0, shown.stdout
    assert "waiting for the generation service · 2 s" in shown.stdout
    assert "retrying 2/3 after 429, waiting 1 s" in shown.stdout
    assert shown.stdout.rstrip().endswith(
        "[S1] Backups  (" + scripted.doc["citations"][0]["asset_id"] + " r1, bytes 0-38)"
    )
    assert json.loads(scripted.stdout) == {
        "status": "answered",
        "answer": "From your notes [S1].",
        "answer_truncated": False,
        "citations": scripted.doc["citations"],
        "mode": "bm25",
    }
    notes = [json.loads(line).get("note") for line in scripted.stderr.splitlines()]
    assert "retrying 2/3 after 429, waiting 1 s" in notes and "waiting for the generation service" in notes


def test_ask_without_evidence_calls_nothing(home: HomeDir, model_server: ModelServer) -> None:
    _start(home, _generation(model_server))
    empty = home.ok("rag", "ask", "notes", "anything at all", "--mode", "bm25")
    _add(home, "Cooking", "Boil the pasta for nine minutes.")
    unrelated = home.ok("rag", "ask", "notes", "kubernetes ingress certificates", "--mode", "bm25")

    for document in (empty, unrelated):
        assert document == {
            "status": "insufficient_evidence",
            "answer": None,
            "answer_truncated": False,
            "citations": [],
            "mode": "bm25",
            "reason": "retrieval",
        }
    assert model_server.calls() == []


@pytest.mark.parametrize(
    ("protocol", "reply", "phrase"),
    [
        ("compatible", chat_completion('{"answer": "See [S4].", "citations": ["S4"]}'), "S4"),
        ("compatible", chat_completion('{"answer": "Nightly', finish_reason="length"), "finish_reason: length"),
        (
            "gemini",
            {"candidates": [{"finishReason": "MAX_TOKENS", "content": {"role": "model"}}], "usageMetadata": {}},
            "MAX_TOKENS",
        ),
        ("gemini", {"promptFeedback": {"blockReason": "SAFETY"}}, "blockReason: SAFETY"),
    ],
)
def test_bad_answers_are_invalid_model_output_and_not_retried(
    home: HomeDir, model_server: ModelServer, protocol: str, reply: object, phrase: str
) -> None:
    operation = "gemini_generate" if protocol == "gemini" else "chat"
    model_server.script(operation, Reply(200, reply), Reply(200, reply), Reply(200, reply))
    _start(home, _generation(model_server, protocol))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")

    error = home.fails("invalid_model_output", "rag", "ask", "notes", "restic backups", "--mode", "bm25")

    assert phrase in error["message"] and len(model_server.calls()) == 1


def test_gemini_thought_parts_are_ignored_and_an_uncited_or_empty_answer_is_insufficient(
    home: HomeDir, model_server: ModelServer
) -> None:
    thought = {"text": '{"answer": "invented [S9]", "citations": ["S9"]}', "thought": True}
    real = {"text": '{"answer": "At two [S1].", "citations": ["S1"]}'}
    model_server.script(
        "gemini_generate",
        Reply(200, gemini_content(thought, real)),
        Reply(200, gemini_content({"text": '{"answer": "No idea.", "citations": []}'})),
        Reply(200, gemini_content({"text": '{"answer": "  ", "citations": ["S1"]}'})),
    )
    _start(home, _generation(model_server, "gemini"))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")

    answered = home.ok("rag", "ask", "notes", "restic backups", "--mode", "bm25")
    uncited = home.ok("rag", "ask", "notes", "restic backups", "--mode", "bm25")
    empty = home.ok("rag", "ask", "notes", "restic backups", "--mode", "bm25")  # cites a source, says nothing

    assert answered["answer"] == "At two [S1]."
    assert (uncited["status"], uncited["reason"]) == ("insufficient_evidence", "model")
    assert (empty["status"], empty["reason"], empty["answer"]) == ("insufficient_evidence", "model", None)


def test_ask_without_generation_config(vault: HomeDir) -> None:
    error = vault.fails("generation_not_configured", "rag", "ask", "notes", "anything", "--mode", "bm25")

    assert "[rag.generation]" in error["message"]


# -- acceptance 6: learned rerank ------------------------------------------------------------------------------


def test_learned_rerank_orders_by_its_scores_and_refuses_other_shapes(home: HomeDir, model_server: ModelServer) -> None:
    rerank = f"[rag.rerank]\nprotocol = 'compatible'\nurl = '{model_server.url('rerank')}'\nmodel = 'fake-rerank'\n"
    _start(home, rerank)
    for number, words in enumerate(["apples apples apples", "apples apples", "apples"]):
        _add(home, f"D{number}", f"{words} pie")
    fused = [hit["title"] for hit in home.ok("rag", "search", "notes", "apples", "--no-rerank")["results"]]
    model_server.script(
        "rerank",
        Reply(200, {"results": [{"index": 2, "relevance_score": 0.91}, {"index": 0, "relevance_score": 0.12}]}),
        Reply(200, [{"index": 0, "score": 0.9}]),
    )

    reranked = home.ok("rag", "search", "notes", "apples")
    error = home.fails("upstream_error", "rag", "search", "notes", "apples")

    assert [hit["title"] for hit in reranked["results"]] == [fused[2], fused[0], fused[1]]
    assert [hit["score"] for hit in reranked["results"][:2]] == [0.91, 0.12]
    assert '"relevance_score"' in error["message"]
    assert model_server.calls("rerank")[0].body["top_n"] == 3


# -- acceptance 7: retries, redirects, lock --------------------------------------------------------------------


def test_retries_back_off_and_honour_retry_after(home: HomeDir, model_server: ModelServer) -> None:
    model_server.script("embeddings", Reply(503), Reply(429, headers={"Retry-After": "1"}))
    _start(home, "[rag.http]\nbackoff_ms = 500\n", _embedding(model_server))
    _add(home, "x", "a note")

    assert home.ok("rag", "index", "notes")["embedded_now"] == 1

    first, second, third = (call.at for call in model_server.calls("embeddings"))
    assert second - first >= 0.5 and third - second >= 1.0


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(401, {"error": {"message": "invalid key"}}), "auth_failed"),
        (Reply(307, b"", headers={"Location": "https://elsewhere.example/v1/embeddings"}), "unsafe_redirect"),
    ],
)
def test_auth_failures_and_redirects_are_not_retried(
    home: HomeDir, model_server: ModelServer, reply: Reply, code: str
) -> None:
    model_server.script("embeddings", reply, reply, reply)
    _start(home, _embedding(model_server))
    _add(home, "x", "a note")

    home.fails(code, "rag", "index", "notes")

    assert len(model_server.calls("embeddings")) == 1


def test_lock_during_a_slow_answer_drops_it(home: HomeDir, model_server: ModelServer) -> None:
    model_server.script("chat", Reply(delay=5))
    _start(home, _generation(model_server))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")
    ask = subprocess.Popen(
        [memories_executable(), "rag", "ask", "notes", "restic backups", "--mode", "bm25", "--json"],
        env={**os.environ, "MEMORIES_HOME": str(home.path), **home.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    home.wait_for(lambda: model_server.calls("chat"), what="the generation request")
    home.ok("lock")
    out, _ = ask.communicate(timeout=60)

    assert ask.returncode == 1 and json.loads(out)["error"]["code"] == "vault_locked"
    remote = next(w for w in home.status()["workers"] if w["name"] == "remote")
    assert remote["restarts"] >= 1  # it had seen vault text


# -- acceptance 8 and 9: device-only vaults, what reaches a service --------------------------------------------


def test_device_only_vaults_send_nothing_off_the_device(
    home: HomeDir, model_server: ModelServer, connect_proxy: ConnectProxy
) -> None:
    home.env.update({"HTTPS_PROXY": connect_proxy.url, "FAKE_KEY": "k"})
    _start(
        home,
        *(
            f"[rag.{table}]\nprotocol = 'compatible'\nurl = 'https://models.invalid.example/v1/{table}'\n"
            "model = 'm'\napi_key_env = 'FAKE_KEY'\n"
            for table in ("embedding", "generation", "rerank")
        ),
    )
    home.ok("vault", "create", "secret", "--device-only")
    _add(home, "Backups", "Nightly backups run restic to the NAS.", "secret")

    for args in (
        ("rag", "index", "secret"),
        ("rag", "search", "secret", "restic", "--mode", "vector"),
        ("rag", "search", "secret", "restic", "--mode", "bm25"),
        ("rag", "ask", "secret", "restic backups", "--mode", "bm25", "--no-rerank"),
    ):
        home.fails("device_only_vault", *args)
    fallback = home.run("rag", "search", "secret", "restic")

    assert fallback.code == 0 and fallback.doc["mode"] == "bm25" and fallback.doc["results"]
    assert any("device-only" in warning for warning in fallback.doc["warnings"])
    assert connect_proxy.carried == []


def test_a_policy_change_stops_a_running_background_index(home: HomeDir, connect_proxy: ConnectProxy) -> None:
    """Issue 21 item 5: `vault policy --device-only on` while `rag index --background` sends batches to an
    off-device service. The job used to take the change for an edit and go on sending (notes added later too).
    The proxy records every request for a name it never contacts; after the change it sees nothing more."""
    connect_proxy.hold = threading.Event()  # the first batch stays in flight until the policy has changed
    home.env.update({"HTTPS_PROXY": connect_proxy.url, "FAKE_KEY": "k"})
    _start(
        home,
        "[rag.embedding]\nprotocol = 'compatible'\nurl = 'https://models.invalid.example/v1/embeddings'\n"
        "model = 'm'\napi_key_env = 'FAKE_KEY'\nbatch_size = 1\n",
    )
    for n in range(3):
        _add(home, f"Note {n}", f"Nightly backup number {n}.")
    job_id = home.ok("rag", "index", "notes", "--background")["job_id"]
    home.wait_for(lambda: connect_proxy.log, what="the first batch to reach the proxy")

    assert home.ok("vault", "policy", "notes", "--device-only", "on")["device_only"] is True
    changed = time.monotonic()
    _add(home, "Later", "A note added after the change.")
    connect_proxy.hold.set()
    home.wait_for(lambda: home.status()["dropped_replies"] >= 1, what="the batch in flight to end, dropped")

    [job] = [job for job in home.ok("jobs")["jobs"] if job["id"] == job_id]
    assert (job["state"], job["error"]["code"]) == ("failed", "policy_changed")
    assert len(connect_proxy.log) == 1 and connect_proxy.log[0].at < changed
    assert connect_proxy.log[0].host == "models.invalid.example" and connect_proxy.carried == []


def test_device_only_vaults_use_loopback_services(home: HomeDir, model_server: ModelServer) -> None:
    _start(home, _embedding(model_server, None), _generation(model_server))
    home.ok("vault", "create", "secret", "--device-only")
    _add(home, "Backups", "Nightly backups run restic to the NAS.", "secret")

    assert home.ok("rag", "search", "secret", "restic", "--mode", "hybrid")["results"]
    assert home.ok("rag", "ask", "secret", "restic backups")["status"] == "answered"


def test_no_private_record_credential_or_file_reaches_a_service(
    home: HomeDir, model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    home.env["FAKE_KEY"] = "key-value-7f3a"
    _start(home, _embedding(model_server, None, "api_key_env = 'FAKE_KEY'\n"), _generation(model_server))
    _add(home, "Backups", "Nightly backups run restic to the NAS.")
    for kind, sensitivity, word in (
        ("memory", "private", "privword1"),
        ("credential", "general", "credword2"),
        ("file", "general", "fileword3"),
        ("card", "private", "privword4"),
    ):
        body = f"restic backups {word} nightly"
        home.ok("memory", "add", "notes", "--kind", kind, "--sensitivity", sensitivity, "--title", word, "--body", body)

    home.ok("rag", "index", "notes")
    home.ok("rag", "search", "notes", "restic backups", "--mode", "hybrid")
    assert home.ok("rag", "ask", "notes", "restic backups")["status"] == "answered"

    bodies = "\n".join(json.dumps(call.body) for call in model_server.calls())
    assert "restic" in bodies and model_server.calls("chat")
    for word in ("privword1", "credword2", "fileword3", "privword4", "key-value-7f3a"):
        assert word not in bodies
    assert model_server.calls("embeddings")[0].headers["authorization"] == "Bearer key-value-7f3a"
    assert "key-value-7f3a" not in recorded_text(model_server).replace("Bearer key-value-7f3a", "")


def test_a_tampered_device_only_policy_is_an_integrity_error(home: HomeDir) -> None:
    initialize(home)
    home.ok("vault", "create", "secret", "--device-only")
    _add(home, "Backups", "Nightly backups run restic to the NAS.", "secret")
    assert home.ok("vault", "policy", "secret", "--device-only", "off")["device_only"] is False
    home.ok("vault", "policy", "secret", "--device-only", "on")
    database = sqlite3.connect(home.path / "memories.db")
    with database:
        database.execute("UPDATE vaults SET device_only = 0 WHERE name = 'secret'")
    database.close()

    home.fails("integrity_error", "rag", "search", "secret", "restic")
    assert home.ok("rag", "search", "notes", "restic")["results"] == []

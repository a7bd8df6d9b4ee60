"""Issue 19 end to end: vectors kept sealed in the home survive lock, a daemon restart and an eviction, leave no
readable trace on disk, and a damaged or moved row is embedded again; ``keep_vectors = false`` keeps nothing.

The daemon's own rules (what is sealed when, damage, deletes) are tested in ``tests/middle/test_kept_vectors.py``;
this file checks what only real processes show: the files of the home, a restarted daemon, the real index worker.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time

from memories import worker_protocol as w
from memories.daemon.index.backends import LOCAL_RECIPE
from memories.rag.chunk_vectors import input_key
from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, with_hooks
from tests.fixtures.tiny_model import TinyModel

NOTES = {
    "ownership": "Rust ownership rules: each value has an owner. Marker word quillwort.",
    "threads": "Spawn threads with thread::spawn and join them. Marker word brambleling.",
    "git": "Split a subdirectory with git subtree and push it back. Marker word snorkelfish.",
    "ssh": "SSH port forwarding: local, remote and dynamic with ssh -D. Marker word plumbago.",
}
MARKERS = ("quillwort", "brambleling", "snorkelfish", "plumbago")
QUERIES = ("ownership rules", "port forwarding")


def _home(home: HomeDir, tiny: TinyModel, rag: str = "") -> HomeDir:
    home.config.write_text(
        home.config.read_text() + "[rag]\nlocal_threads = 1\nembed_batch_size = 2\nauto_index = 'off'\n" + rag
    )
    with_hooks(home, model_manifest=str(tiny.manifest_path))
    initialize(home)
    home.ok("rag", "model-install", "--from", str(tiny.model_dir))
    return home


def _results(home: HomeDir) -> dict[tuple[str, str], list[tuple[str, float]]]:
    found = {}
    for query in QUERIES:
        for mode in ("vector", "hybrid"):
            hits = home.ok("rag", "search", "notes", query, "--mode", mode)["results"]
            found[query, mode] = [(hit["chunk_hash"], round(hit["score"], 6)) for hit in hits]
    return found


def _batches_run(home: HomeDir) -> tuple[int, int]:
    """``embedding_batches`` of the daemon, and the embedding steps its embedding workers ran (since it started)."""
    status = home.status()
    worker = next(w for w in status["workers"] if w["name"] == "embedding")
    return status["embedding_batches"], worker["completed"].get("EmbedBatch", 0)


def _unlock(home: HomeDir) -> None:
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")


def _rows(home: HomeDir) -> list[tuple[str, str, bytes]]:
    with sqlite3.connect(home.path / "memories.db") as db:
        return db.execute("SELECT vault_id, id, sealed FROM vectors ORDER BY vault_id, id").fetchall()


def _until_snapshots(home: HomeDir, count: int) -> None:
    """Wait (at most 60 s, polling) until the home holds ``count`` sealed index snapshots (written in the background,
    :data:`memories.daemon.index.snapshots.WRITE_DELAY_SECONDS` after a cache changed)."""
    deadline = time.monotonic() + 60
    while True:
        with sqlite3.connect(home.path / "memories.db") as db:
            if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= count:
                return
        assert time.monotonic() < deadline, "the index snapshots were not written"
        time.sleep(0.1)


def test_vectors_survive_lock_restart_and_eviction_and_nothing_is_readable(
    home: HomeDir, tiny_model: TinyModel
) -> None:
    _home(home, tiny_model)
    ids = {
        title: home.ok("memory", "add", "notes", "--kind", "card", "--title", title, "--body", body)["id"]
        for title, body in NOTES.items()
    }
    assert home.ok("rag", "index", "notes")["embedded_now"] == len(NOTES)
    before = _results(home)
    batches = _batches_run(home)
    assert len(_rows(home)) == len(NOTES)

    home.ok("lock")
    _unlock(home)
    assert _results(home) == before and _batches_run(home) == batches

    home.ok("daemon", "stop")
    home.start()
    _unlock(home)
    assert _results(home) == before and _batches_run(home) == (0, 0)
    status = home.ok("rag", "status", "notes")
    assert (status["embedded"], status["missing"], status["vectors"]) == (len(NOTES), 0, "sealed in the home")

    for other in ("second", "third"):  # two other vaults searched: the first leaves the index worker's cache
        home.ok("vault", "create", other)
        home.ok("memory", "add", other, "--title", "t", "--body", "another vault's note")
        home.ok("rag", "search", other, "note", "--mode", "bm25")
    assert home.ok("rag", "status", "notes")["cache"] == "cold"
    assert _results(home) == before and _batches_run(home) == (0, 0)

    # Nothing readable in any file of the home: no marker, chunk text, chunk hash or hash of a model input.
    chunks = home.ok("rag", "search", "notes", "marker word", "--mode", "bm25", "--limit", "100")["results"]
    assert len(chunks) == len(NOTES)
    needles = [marker.encode() for marker in MARKERS]
    for chunk in chunks:
        model_input = w.ModelInput(LOCAL_RECIPE.prefix.replace("{title}", chunk["title"]) + chunk["text"])
        for digest in (chunk["chunk_hash"], input_key(model_input)):
            needles += [digest.encode(), digest.upper().encode(), bytes.fromhex(digest)]
        needles.append(chunk["text"].encode())
    assert hashlib.sha256(chunks[0]["text"].encode()).hexdigest() == chunks[0]["chunk_hash"]
    _until_snapshots(home, 2)  # the cached vaults' sealed index snapshots are in the home too (issue 28)
    home.ok("lock")
    home.ok("daemon", "stop")
    for path in home.path.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not [needle for needle in needles if needle in data], path

    # A flipped byte, and a blob copied over another row: both rows are skipped and their records embedded again.
    (_, flipped_id, sealed), (_, copied_id, _), *_ = _rows(home)  # the notes' rows: nothing else was embedded
    with sqlite3.connect(home.path / "memories.db") as db:
        damaged = bytearray(sealed)
        damaged[len(damaged) // 2] ^= 1
        db.execute("UPDATE vectors SET sealed = ? WHERE id = ?", (bytes(damaged), flipped_id))
        db.execute("UPDATE vectors SET sealed = ? WHERE id = ?", (sealed, copied_id))
    home.start()
    _unlock(home)
    assert home.ok("rag", "index", "notes")["embedded_now"] == 2
    assert any("2 sealed vector rows" in note for note in home.ok("rag", "status", "notes")["warnings"])
    assert home.ok("rag", "index", "notes")["embedded_now"] == 0

    # memory delete leaves no row holding its vectors; keep_vectors = false leaves no row after the next start.
    count = len(_rows(home))
    home.ok("memory", "delete", "notes", ids["git"])
    assert len(_rows(home)) == count - 1
    home.ok("daemon", "stop")
    home.config.write_text(home.config.read_text() + "keep_vectors = false\n")
    home.start()
    assert _rows(home) == []
    assert home.ok("rag", "status", "notes")["vectors"] == "memory only"

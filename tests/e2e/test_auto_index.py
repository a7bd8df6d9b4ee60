"""Issue 19 end to end: with the in-process model installed, the daemon embeds an ingest by itself (``[rag]
auto_index = "local"``, the default) and the default search mode becomes hybrid; ``"off"`` leaves it at bm25.

The rules of the background job (one per vault, joins, priority, remote services, device-only vaults, unlock) are
tested in the daemon's middle (``tests/middle/test_auto_index.py``).
"""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.daemon import PASSPHRASE, HomeDir, initialize, with_hooks
from tests.fixtures.tiny_model import TinyModel

NOTES = 70
"""More chunks than a search embeds on demand (64), so the default mode tells the two settings apart."""


def _notes(folder: Path, prefix: str) -> Path:
    folder.mkdir()
    for number in range(NOTES):
        note = f"# {prefix} {number}\n\nA short note about {prefix} {number}.\n"
        (folder / f"{prefix}{number:02}.md").write_text(note)
    return folder


def test_an_ingest_is_embedded_by_itself_and_off_leaves_it_to_rag_index(
    home: HomeDir, tiny_model: TinyModel, tmp_path: Path
) -> None:
    home.config.write_text(home.config.read_text() + "[rag]\nlocal_threads = 1\n")
    with_hooks(home, model_manifest=str(tiny_model.manifest_path))
    initialize(home)
    home.ok("rag", "model-install", "--from", str(tiny_model.model_dir))
    home.ok("rag", "ingest", "notes", str(_notes(tmp_path / "ferns", "fern")))

    status = home.wait_for(
        lambda: (found := home.ok("rag", "status", "notes"))["missing"] == 0 and found,
        timeout=120,
        what="the background index job to embed the ingest",
    )
    assert (status["embedded"], status["vectors"]) == (NOTES, "sealed in the home")
    [job] = [job for job in home.ok("jobs")["jobs"] if job["kind"] == "index"]
    assert job["background"] and job["vault_name"] == "notes"
    assert home.ok("rag", "search", "notes", "fern")["mode"] == "hybrid"

    home.ok("daemon", "stop")
    home.config.write_text(home.config.read_text() + "auto_index = 'off'\n")
    home.start()
    assert (
        home.ok("rag", "status", "notes")["model"]["loaded"] is False
        and not home.ok("daemon", "status")["model_loaded"]
    )
    home.ok("unlock", "--passphrase-stdin", stdin=PASSPHRASE + "\n")
    # Issue 28, item 3: the unlock loads the model in the background, with no query sent (and auto_index = "off").
    home.wait_for(
        lambda: home.ok("rag", "status", "notes")["model"]["loaded"], timeout=60, what="the model loaded at unlock"
    )
    assert home.ok("daemon", "status")["model_loaded"] is True
    home.ok("rag", "ingest", "notes", str(_notes(tmp_path / "mosses", "moss")))
    found = home.ok("rag", "search", "notes", "moss")
    assert found["mode"] == "bm25" and any("have no vector yet" in note for note in found["warnings"])
    # Only the unlock's warm-up of the recent vault's BM25 cache, which embeds nothing (issue 28: auto_index
    # governs embedding only).
    assert all(job["background"] for job in home.ok("jobs")["jobs"] if job["kind"] == "index")

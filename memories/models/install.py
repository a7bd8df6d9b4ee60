"""Install the files of a pinned manifest into a folder (R-23, R-24).

:func:`install_model` is what ``memories rag model-install`` runs inside ``workers.remote``::

    check every existing file first    verified: reused, no request; anything else: model_file_mismatch
    fetch the missing ones             download_file (mirror or origin) or copy_file (--from DIR)
    write NOTICE and MODEL_CARD.md     terms, repository, revision, every file's size and SHA-256

An existing file that does not match is never replaced or deleted: it may be the user's own export. Only bytes
whose SHA-256 is pinned in the manifest are ever stored under a model file's name.

Checking a folder without installing (``rag status``) is :mod:`memories.models.verify`, which the supervisor
imports without httpx; this module uses it for the first step.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec

from memories.config import HttpConfig
from memories.errors import MemoriesError
from memories.http.client import build_client
from memories.http.retry import CancelCheck, RetryPolicy, check_cancelled
from memories.http.urls import endpoint_problem
from memories.models.download import copy_file, download_file
from memories.models.manifest import Manifest, ManifestFile
from memories.models.verify import remember_hash, verify_installed
from memories.paths import make_folders
from memories.protocol import InstalledFile, InstallReport

GEMMA_TERMS_URL = "https://ai.google.dev/gemma/terms"
GEMMA_PROHIBITED_USE_URL = "https://ai.google.dev/gemma/prohibited_use_policy"

NOTICE_NAME = "NOTICE"
MODEL_CARD_NAME = "MODEL_CARD.md"


class InstallProgress(msgspec.Struct, frozen=True):
    """A progress event: the current file's bytes, and all bytes this run transfers (reused ones excluded);
    ``note`` says what is happening besides transferring (``"retrying 2/3 after 503, waiting 1 s"``)."""

    path: str
    file_bytes_done: int
    file_bytes_total: int
    bytes_done: int
    bytes_total: int
    note: str | None = None


def install_model(
    manifest: Manifest,
    dest_dir: Path,
    *,
    base_url: str | None = None,
    from_dir: Path | None = None,
    http_config: HttpConfig | None = None,
    progress: Callable[[InstallProgress], None] | None = None,
    cancelled: CancelCheck | None = None,
) -> InstallReport:
    """Install ``manifest``'s files under ``dest_dir``, keeping the repository layout, then write the notices.

    Sources: ``from_dir`` (the same layout, copied, never linked); else ``base_url + "/" + path`` for a
    mirror of the exact pinned files; else :meth:`Manifest.origin_url`. Downloads use one client from
    ``http_config`` (defaults when ``None``), with ``download_timeout_seconds`` as each file's budget. Every
    existing file is checked before anything is fetched. ``progress`` gets :class:`InstallProgress` events.

    Raises:
        MemoriesError: ``model_file_mismatch`` (an existing file differs from the pin, naming it and how to
            proceed; or a ``from_dir`` file differs), ``invalid_argument`` (both sources given, a bad
            ``base_url``, a ``from_dir`` that lacks a file), and whatever
            :func:`~memories.models.download.download_file` raises (``download_hash_mismatch``,
            ``download_timeout``, ``upstream_unavailable``, ``auth_failed``, ``upstream_error``,
            ``unsafe_redirect``, ``cancelled``); a ``download_timeout`` or ``upstream_unavailable`` also says
            how to install without that connection (:data:`NETWORK_HINT`).
        OSError: the folder cannot be written.
    """
    if base_url is not None and from_dir is not None:
        raise MemoriesError("invalid_argument", "install from a mirror or from a folder, not both")
    if base_url is not None and (problem := endpoint_problem(base_url)):
        raise MemoriesError("invalid_argument", f"model download base URL refused: {problem}")
    dest_dir = Path(dest_dir).resolve()
    make_folders(str(dest_dir))
    status = verify_installed(manifest, dest_dir, checkpoint=functools.partial(check_cancelled, cancelled))
    if status.mismatched:
        raise _existing_mismatch(manifest, dest_dir, status.mismatched)
    missing = [file for file in manifest.files if file.path in status.missing]
    if from_dir is not None:
        _check_sources(Path(from_dir), missing)
    done: dict[str, InstalledFile] = {}
    tracker = _Tracker(progress, sum(file.size for file in missing))
    if missing and from_dir is not None:
        for file in missing:
            target = dest_dir / file.path
            copy_file(
                Path(from_dir) / file.path,
                target,
                size=file.size,
                sha256=file.sha256,
                progress=tracker.for_file(file),
                cancelled=cancelled,
            )
            remember_hash(target, file.sha256)
            done[file.path] = InstalledFile(file.path, "copied", file.size, file.size)
    elif missing:
        config = http_config or HttpConfig()
        retry = RetryPolicy.from_config(config)
        with build_client(config) as client, _network_hints():
            for file in missing:
                target = dest_dir / file.path
                url = f"{base_url.rstrip('/')}/{file.path}" if base_url else manifest.origin_url(file)
                received = download_file(
                    client,
                    url,
                    target,
                    size=file.size,
                    sha256=file.sha256,
                    retry=retry,
                    budget_seconds=config.download_timeout_seconds,
                    progress=tracker.for_file(file),
                    cancelled=cancelled,
                    on_retry=tracker.note,
                )
                remember_hash(target, file.sha256)
                done[file.path] = InstalledFile(file.path, "downloaded", file.size, received)
    _write_text(dest_dir / NOTICE_NAME, notice_text(manifest))
    _write_text(dest_dir / MODEL_CARD_NAME, model_card_text(manifest))
    files = [done.get(file.path) or InstalledFile(file.path, "reused", file.size, 0) for file in manifest.files]
    return InstallReport(path=str(dest_dir), files=files)


def notice_text(manifest: Manifest) -> str:
    """The ``NOTICE`` written beside the model: Gemma terms, source repository and revision, and every file's
    path, size (bytes) and SHA-256."""
    lines = [
        f"{manifest.model_id}: files installed by Memories",
        "",
    ]
    if manifest.test:
        lines += [
            "TEST MODEL: generated for the Memories test suite; these files are not EmbeddingGemma.",
            "",
        ]
    lines += [
        f"Gemma is provided under and subject to the Gemma Terms of Use found at {GEMMA_TERMS_URL}",
        f"Use of Gemma is subject to the Gemma Prohibited Use Policy found at {GEMMA_PROHIBITED_USE_URL}",
        "",
        f"Repository: https://huggingface.co/{manifest.repository}",
        f"Revision:   {manifest.revision}",
        f"Model:      {manifest.model_id}",
        "",
        "Files (path, bytes, SHA-256), each checked against the manifest pinned in Memories before storing:",
    ]
    lines += [f"  {file.path}  {file.size}  {file.sha256}" for file in manifest.files]
    return "\n".join(lines) + "\n"


def model_card_text(manifest: Manifest) -> str:
    """``MODEL_CARD.md``: what the model is, and where its upstream card is at the pinned revision.

    Memories writes its own card because the upstream one is not byte-pinned by any public source (SPEC,
    "Decisions"), and it never stores a file whose hash is not pinned.
    """
    upstream = f"https://huggingface.co/{manifest.repository}/blob/{manifest.revision}/README.md"
    test = (
        "\n> **Test model.** Generated for the Memories test suite with the inputs, outputs and file layout "
        "of the real export; these files are not EmbeddingGemma and their vectors mean nothing.\n"
        if manifest.test
        else ""
    )
    files = "\n".join(f"| `{file.path}` | {file.size} | `{file.sha256}` |" for file in manifest.files)
    return f"""# EmbeddingGemma 300M — Q4 ONNX ({manifest.model_id})
{test}
**What it is.** EmbeddingGemma is Google's 300M-parameter text embedding model built on Gemma 3. It turns
text into 768-dimensional vectors for search and retrieval. This folder holds a 4-bit quantized (Q4) ONNX
export for ONNX Runtime: the graph `{manifest.graph}`, its external data `{manifest.graph}_data` beside it,
and the tokenizer and configuration files.

**How Memories uses it.** The embedding worker runs it in-process with ONNX Runtime, reads the graph's
`sentence_embedding` output, L2-normalizes it, and uses different task prefixes for queries and documents.

**Source.** Repository [`{manifest.repository}`](https://huggingface.co/{manifest.repository}) at revision
`{manifest.revision}`.

**Upstream model card** (intended uses, training data, evaluation, limitations), at this revision:
{upstream}

**Terms.** Gemma is provided under and subject to the [Gemma Terms of Use]({GEMMA_TERMS_URL}); use is
subject to the [Gemma Prohibited Use Policy]({GEMMA_PROHIBITED_USE_URL}). See `NOTICE`.

**Files**, each checked against the size and SHA-256 pinned in Memories before it was stored:

| path | bytes | SHA-256 |
|---|---:|---|
{files}
"""


class _Tracker:
    """Turns per-file ``(done, total)`` calls into :class:`InstallProgress` events over the whole run."""

    def __init__(self, callback: Callable[[InstallProgress], None] | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._finished = 0
        self._last: InstallProgress | None = None

    def for_file(self, file: ManifestFile) -> Callable[[int, int], None] | None:
        if self._callback is None:
            return None
        callback = self._callback
        base = self._finished
        self._finished += file.size
        self._last = InstallProgress(file.path, 0, file.size, base, self._total)  # until the first bytes

        def report(done: int, total: int) -> None:
            self._last = InstallProgress(file.path, done, total, base + done, self._total)
            callback(self._last)

        return report

    def note(self, text: str) -> None:
        """The current file's last event again, with ``text`` as its note (a retry is about to wait)."""
        if self._callback is not None and self._last is not None:
            self._callback(msgspec.structs.replace(self._last, note=text))


NETWORK_HINT = (
    "to install without this connection, fetch the files by other means and run "
    "`memories rag model-install --from DIR`; behind a proxy, set `[rag.http] proxy_url`; "
    "for a mirror of the pinned files, set `[rag] model_download_base_url`"
)
"""Appended to a download that failed for the network's sake (``upstream_unavailable``, ``download_timeout``)."""


@contextlib.contextmanager
def _network_hints() -> Iterator[None]:
    """Add :data:`NETWORK_HINT` to a download failure the network caused, keeping its code and details."""
    try:
        yield
    except MemoriesError as exc:
        if exc.code not in ("upstream_unavailable", "download_timeout"):
            raise
        raise MemoriesError(exc.code, f"{exc.message}; {NETWORK_HINT}", exc.details) from None


def _existing_mismatch(manifest: Manifest, directory: Path, paths: list[str]) -> MemoriesError:
    named = ", ".join(paths)
    return MemoriesError(
        "model_file_mismatch",
        f"{named} in {directory} {'does' if len(paths) == 1 else 'do'} not match the size and SHA-256 "
        f"pinned for {manifest.repository} at revision {manifest.revision[:12]}; nothing was changed or "
        "downloaded. "
        "Move the file away and run `memories rag model-install` again, or set `[rag] local_model_dir` to a "
        "folder holding your own export of the model",
        {"directory": str(directory), "files": paths},
    )


def _check_sources(from_dir: Path, files: list[ManifestFile]) -> None:
    """Every file to copy must be in ``from_dir`` with the pinned size; hashes are checked while copying."""
    for file in files:
        source = from_dir / file.path
        try:
            size = source.stat().st_size
        except OSError:
            raise MemoriesError(
                "invalid_argument",
                f"{source} is missing; the folder must hold every file of the pinned revision in the repository layout",
                {"path": str(source)},
            ) from None
        if size != file.size:
            raise MemoriesError(
                "model_file_mismatch",
                f"{source} has {size} bytes, not the pinned {file.size}; nothing was installed from it",
                {"path": str(source)},
            )


def _write_text(path: Path, text: str) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)

"""The pinned model manifest: which files make the embedding model, with their sizes and SHA-256.

The pinned manifest ships in the package (``embeddinggemma.json``) and is the only one a normal install reads.
Tests swap in a manifest for a tiny generated model through the test hooks (:mod:`memories.testing`), which exist
only when ``MEMORIES_TEST_HOOKS`` is set; a model installed that way is marked as a test model in ``NOTICE``.
"""

from __future__ import annotations

import importlib.resources
import re
from pathlib import Path

import msgspec

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class ManifestFile(msgspec.Struct, forbid_unknown_fields=True):
    """One file of the model: ``path`` relative to the repository root (``/``-separated), ``size`` in bytes."""

    path: str
    size: int
    sha256: str


class Manifest(msgspec.Struct, forbid_unknown_fields=True):
    """A model at one revision of one repository.

    ``graph`` is the path of the ONNX graph among ``files``; its external data (``<graph>_data``) sits beside it.
    ``test`` marks a manifest made for the test suite.
    """

    repository: str
    revision: str
    model_id: str
    graph: str
    files: list[ManifestFile]
    test: bool = False

    def origin_url(self, file: ManifestFile) -> str:
        """The upstream download URL of ``file`` (Hugging Face ``resolve`` at the pinned revision)."""
        return f"https://huggingface.co/{self.repository}/resolve/{self.revision}/{file.path}"


def pinned_manifest() -> Manifest:
    """The manifest of EmbeddingGemma 300M Q4 that every normal install uses."""
    data = importlib.resources.files("memories.models").joinpath("embeddinggemma.json").read_bytes()
    return _checked(msgspec.json.decode(data, type=Manifest))


def read_manifest(path: Path) -> Manifest:
    """Read a manifest file (test hooks only).

    Raises:
        msgspec.ValidationError: the file does not match :class:`Manifest` or has a malformed hash or path.
    """
    return _checked(msgspec.json.decode(path.read_bytes(), type=Manifest))


def _checked(manifest: Manifest) -> Manifest:
    for file in manifest.files:
        parts = file.path.split("/")
        if not _SHA256.match(file.sha256) or file.size < 0 or any(p in ("", ".", "..") for p in parts):
            raise msgspec.ValidationError(f"bad manifest entry {file.path!r}")
    if manifest.graph not in {f.path for f in manifest.files}:
        raise msgspec.ValidationError("manifest graph is not among its files")
    return manifest

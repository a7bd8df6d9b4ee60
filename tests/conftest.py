"""Shared fixtures. Fixture modules live in ``tests/fixtures`` and are registered here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from memories.rag.pipeline import VaultCache

REPO = Path(__file__).resolve().parent.parent

pytest_plugins = [
    "tests.fixtures.daemon",
    "tests.fixtures.middle",
    "tests.fixtures.servers",
    "tests.fixtures.model_servers",
    "tests.fixtures.tiny_model",
]


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository checkout."""
    return REPO


@pytest.fixture(scope="session")
def corpus() -> Path:
    """The sample notes (``tests/corpus``; see its SOURCES.md for attribution)."""
    return REPO / "tests" / "corpus"


@pytest.fixture(scope="session")
def corpus_cache() -> VaultCache:
    """The sample notes in one index worker cache (vault ``corpus``, epoch 1), as ``rag ingest`` would store them
    (:func:`ops.corpus.load_notes`), built once per run: the tests that only search it share it (about 2.6 s of
    CPU each). Do not change it; build a cache of your own to apply changes."""
    from memories.rag.pipeline import VaultCache
    from ops.corpus import load_notes

    cache = VaultCache("corpus")
    cache.apply(load_notes(), [])
    cache.stamp(1)
    return cache

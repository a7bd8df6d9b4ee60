"""Shared fixtures. Fixture modules live in ``tests/fixtures`` and are registered here."""

from __future__ import annotations

from pathlib import Path

import pytest

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

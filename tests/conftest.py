"""Shared fixtures. Fixture modules live in ``tests/fixtures`` and are registered here."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

pytest_plugins: list[str] = []


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository checkout."""
    return REPO

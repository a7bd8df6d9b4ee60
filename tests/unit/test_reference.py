"""The docs site's reference pages are generated from the code (issue 27, item 4): a click option, a result struct's
field, an error code or a config key changed without ``python -m ops.reference`` fails here."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops import reference

FOLDER = Path(__file__).resolve().parents[2] / "docs" / "reference"


@pytest.mark.parametrize("name", reference.PAGES)
def test_the_committed_reference_is_what_the_code_generates(name: str) -> None:
    committed = (FOLDER / f"{name}.md").read_text(encoding="utf-8")
    assert committed == reference.pages()[name], f"docs/reference/{name}.md is stale: run python -m ops.reference"


def test_the_reference_names_every_error_code_command_and_config_section() -> None:
    from memories.errors import CODES

    pages = reference.pages()
    assert all(f"| `{code}` |" in pages["errors"] for code in CODES)
    assert "## memories rag search\n" in pages["cli"] and "`--since`" in pages["cli"]
    assert "## [rag.embedding]\n" in pages["config"] and "| `keep_vectors` | boolean | `true` |" in pages["config"]
    assert "## SearchReport\n" in pages["json"] and "[SearchReport](#searchreport) |" in pages["json"]

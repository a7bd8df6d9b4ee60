"""``[rag.embedding]``, ``[rag.generation]`` and ``[rag.rerank]`` at daemon start: issue 8, acceptance 1 (R-28 … R-31).

Each URL and key rule is refused with the key named; loopback HTTP is accepted with or without a key; a key value in
TOML is refused; a pasted key is never echoed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memories.config import load_config
from memories.errors import MemoriesError

GEMINI_EMBED = "https://generativelanguage.googleapis.com/v1beta/models/gemini-embedding-001:embedContent"
PASTED = "AIzaSyD3xAmPlEkEy0123456789abcdefghijk"


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_config(path, environ={} if environ is None else environ)


def _refused(tmp_path: Path, text: str, environ: dict[str, str] | None = None) -> MemoriesError:
    with pytest.raises(MemoriesError) as caught:
        _load(tmp_path, text, environ)
    assert caught.value.code == "invalid_config"
    return caught.value


@pytest.mark.parametrize(
    ("table", "url", "phrase"),
    [
        ("embedding", "http://gpu.example:8000/v1/embeddings", "plain http:// to the non-loopback host"),
        ("generation", "https://user:pw@llm.example/v1/chat/completions", "credentials"),
        ("rerank", "https://rerank.example/v1/rerank?key=abc", "a query string or fragment"),
        ("embedding", "https://gpu.example/v1/embeddings#x", "a query string or fragment"),
        ("generation", "ftp://llm.example/chat", "ftp://"),
    ],
)
def test_a_url_rule_is_refused_naming_the_key(tmp_path: Path, table: str, url: str, phrase: str) -> None:
    error = _refused(
        tmp_path,
        f"[rag.{table}]\nprotocol = 'compatible'\nurl = '{url}'\nmodel = 'm'\napi_key_env = 'K'\n",
        {"K": "v"},
    )

    assert f"`rag.{table}.url` refused: " in error.message and phrase in error.message
    assert error.details == {"key": f"rag.{table}.url"}
    assert "pw" not in error.message and "key=abc" not in error.message


def test_a_gemini_url_must_name_its_operation(tmp_path: Path) -> None:
    error = _refused(
        tmp_path,
        "[rag.embedding]\nprotocol = 'gemini'\nurl = 'https://generativelanguage.googleapis.com/v1beta/models/x'\n"
        "model = 'x'\napi_key_env = 'GEMINI_API_KEY'\n",
        {"GEMINI_API_KEY": "v"},
    )

    assert "`rag.embedding.url`" in error.message and ":embedContent or :batchEmbedContents" in error.message


@pytest.mark.parametrize("name", [PASTED, "sk-proj-abc123", "Bearer abc"])
def test_a_pasted_key_is_refused_and_not_echoed(tmp_path: Path, name: str) -> None:
    error = _refused(
        tmp_path, f"[rag.embedding]\nprotocol = 'gemini'\nurl = '{GEMINI_EMBED}'\nmodel = 'm'\napi_key_env = '{name}'\n"
    )

    assert "`rag.embedding.api_key_env`" in error.message
    assert name not in error.message and name not in str(error.details)


def test_a_name_that_is_not_a_variable_name_is_refused(tmp_path: Path) -> None:
    error = _refused(
        tmp_path,
        "[rag.generation]\nprotocol = 'compatible'\nurl = 'http://127.0.0.1:9/v1/chat/completions'\n"
        "model = 'm'\napi_key_env = '1BAD NAME'\n",
    )

    assert "`rag.generation.api_key_env` must be an environment variable name" in error.message
    assert "1BAD NAME" not in error.message


def test_an_unset_variable_is_refused_for_a_remote_url(tmp_path: Path) -> None:
    text = f"[rag.embedding]\nprotocol = 'gemini'\nurl = '{GEMINI_EMBED}'\nmodel = 'm'\napi_key_env = 'GEMINI_KEY'\n"

    error = _refused(tmp_path, text, {})

    assert "`rag.embedding.api_key_env` names GEMINI_KEY, which is not set" in error.message
    assert _load(tmp_path, text, {"GEMINI_KEY": "abc"}).rag.embedding is not None


def test_a_remote_url_needs_a_key_variable(tmp_path: Path) -> None:
    error = _refused(
        tmp_path, "[rag.rerank]\nprotocol = 'compatible'\nurl = 'https://rerank.example/v1/rerank'\nmodel = 'm'\n"
    )

    assert "`rag.rerank.api_key_env` is required" in error.message


def test_loopback_http_is_accepted_with_or_without_a_key(tmp_path: Path) -> None:
    config = _load(
        tmp_path,
        "[rag.embedding]\nprotocol = 'compatible'\nurl = 'http://127.0.0.1:8000/v1/embeddings'\nmodel = 'bge-m3'\n"
        "dimensions = 1024\n"
        "[rag.generation]\nprotocol = 'compatible'\nurl = 'http://localhost:11434/v1/chat/completions'\n"
        "model = 'qwen3'\napi_key_env = 'UNSET_IS_FINE_HERE'\nmax_tokens_field = 'max_completion_tokens'\n"
        "[rag.rerank]\nprotocol = 'compatible'\nurl = 'http://[::1]:8081/v1/rerank'\nmodel = 'bge-reranker'\n",
    )

    embedding, generation, rerank = config.rag.embedding, config.rag.generation, config.rag.rerank
    assert embedding is not None and embedding.dimensions == 1024
    assert (embedding.batch_size, embedding.concurrency) == (32, 2)
    assert generation is not None and generation.max_tokens_field == "max_completion_tokens"
    assert (generation.max_output_tokens, generation.max_context_chars) == (1024, 24_000)
    assert rerank is not None and rerank.model == "bge-reranker"


@pytest.mark.parametrize("name", ["api_key", "key", "token"])
def test_a_key_value_in_toml_is_refused(tmp_path: Path, name: str) -> None:
    error = _refused(
        tmp_path,
        "[rag.generation]\nprotocol = 'compatible'\nurl = 'http://127.0.0.1:9/v1/chat/completions'\nmodel = 'm'\n"
        f"{name} = 'sk-abc'\n",
    )

    assert f"`rag.generation.{name}` would hold a secret" in error.message and "sk-abc" not in error.message


def test_rerank_speaks_compatible_only(tmp_path: Path) -> None:
    error = _refused(tmp_path, "[rag.rerank]\nprotocol = 'gemini'\nurl = 'http://127.0.0.1:9/rerank'\nmodel = 'm'\n")

    assert "rag.rerank.protocol" in error.message


def test_no_endpoint_tables_means_local_only(tmp_path: Path) -> None:
    rag = _load(tmp_path, "[rag]\nlocal_threads = 2\n").rag

    assert (rag.embedding, rag.generation, rag.rerank) == (None, None, None)


def test_the_evidence_threshold_is_configurable_per_backend(tmp_path: Path) -> None:
    """``[rag] local_min_similarity`` sets the local model's ``rag ask`` threshold; left out, the measured default."""
    from memories.daemon.index.backends import embedding_backend
    from memories.rag.answers import MIN_SIMILARITY

    def threshold(text: str) -> float | None:
        rag = _load(tmp_path, text).rag
        return embedding_backend(rag, models=None, remote=None, default_budget=300).min_similarity  # type: ignore[arg-type]

    assert threshold("") == MIN_SIMILARITY["local"]
    assert threshold("[rag]\nlocal_min_similarity = 0.8\n") == 0.8
    assert "local_min_similarity" in _refused(tmp_path, "[rag]\nlocal_min_similarity = 1.5\n").message

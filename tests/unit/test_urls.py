"""The URL policy (R-31, R-38, R-39): request targets, configured endpoints, redirects and proxies.

The same rules back ``config.toml`` (the supervisor) and every request of ``workers.remote``; the loopback
servers of ``tests/integration/test_model_download.py`` show them applied to real redirects.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
from pathlib import Path

import pytest

from memories.config import load_config
from memories.errors import MemoriesError
from memories.http import urls
from memories.http.urls import endpoint_problem, is_loopback_host, proxy_problem, redirect_problem, target_problem

REPO = Path(__file__).resolve().parents[2]


def test_docstring_examples() -> None:
    assert doctest.testmod(urls).failed == 0


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("LOCALHOST", True),
        ("127.0.0.1", True),
        ("127.255.0.9", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost.", False),  # names never resolve: only the exact name counts
        ("127.1", False),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("example.com", False),
        ("", False),
        (None, False),
    ],
)
def test_loopback_hosts(host: str | None, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize(
    "url",
    [
        "https://cdn.example/file?X-Amz-Signature=abc",
        "HTTPS://CDN.example/file",
        "http://127.0.0.5:8080/file",
        "http://[::1]/file",
        "http://localhost/file",
    ],
)
def test_allowed_targets(url: str) -> None:
    assert target_problem(url) is None


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://example.com/file", "plain http:// to the non-loopback host example.com"),
        ("http://localhost.:8080/file", "plain http:// to the non-loopback host localhost."),
        ("https://user:pass@example.com/file", "credentials in the URL"),
        ("http://user@127.0.0.1/file", "credentials in the URL"),
        ("https://:@example.com/file", "credentials in the URL"),
        ("ftp://example.com/file", "the ftp:// scheme (only https://, or http:// to a loopback host)"),
        ("example.com/file", "no scheme (only https://, or http:// to a loopback host)"),
        ("https:///file", "no host"),
        ("http://[::1/file", "not a valid URL"),
    ],
)
def test_refused_targets(url: str, problem: str) -> None:
    assert target_problem(url) == problem


def test_endpoints_take_no_query_or_fragment() -> None:
    assert endpoint_problem("https://mirror.example/embeddinggemma") is None
    assert endpoint_problem("http://127.0.0.1:8000/models/") is None
    assert endpoint_problem("https://mirror.example/models?token=abc") == "a query string or fragment"
    assert endpoint_problem("https://mirror.example/models#top") == "a query string or fragment"
    assert endpoint_problem("http://mirror.example/models") == "plain http:// to the non-loopback host mirror.example"


@pytest.mark.parametrize(
    ("source", "target"),
    [
        ("https://huggingface.co/r/resolve/x", "https://cdn-lfs.example/x?X-Amz-Signature=abc&Expires=1"),
        ("https://127.0.0.1:8443/models/a", "https://127.0.0.1:8443/signed/a?signature=s"),
        ("http://127.0.0.1:8000/models/a", "http://localhost:8001/signed/a?signature=s"),
        ("http://127.0.0.1:8000/models/a", "https://cdn.example/a?signature=s"),
    ],
)
def test_allowed_redirects(source: str, target: str) -> None:
    assert redirect_problem(source, target) is None


@pytest.mark.parametrize(
    ("source", "target", "problem"),
    [
        ("https://huggingface.co/a", "http://127.0.0.1/a", "a downgrade from https:// to plain http://"),
        ("https://127.0.0.1:8443/a", "http://127.0.0.1:8000/a", "a downgrade from https:// to plain http://"),
        ("https://huggingface.co/a", "http://cdn.example/a", "plain http:// to the non-loopback host cdn.example"),
        ("http://127.0.0.1/a", "http://cdn.example/a", "plain http:// to the non-loopback host cdn.example"),
        ("https://huggingface.co/a", "https://user:pw@cdn.example/a", "credentials in the URL"),
        (
            "https://huggingface.co/a",
            "file:///etc/passwd",
            "the file:// scheme (only https://, or http:// to a loopback host)",
        ),
    ],
)
def test_refused_redirects(source: str, target: str, problem: str) -> None:
    assert redirect_problem(source, target) == problem


def test_proxies() -> None:
    for scheme in urls.PROXY_SCHEMES:
        assert proxy_problem(f"{scheme}://proxy.example:1080", credentials_allowed=False) is None
    assert proxy_problem("socks5h://alice:pw@proxy.example:1080", credentials_allowed=True) is None
    refused = proxy_problem("http://alice:pw@proxy.example:3128", credentials_allowed=False)
    assert refused is not None and refused.startswith("credentials in the URL") and "HTTPS_PROXY" in refused
    assert proxy_problem("socks4://proxy.example:1080", credentials_allowed=True) == (
        "the socks4:// scheme (supported: http, https, socks5, socks5h)"
    )
    assert proxy_problem("http://:3128", credentials_allowed=True) == "no host"


@pytest.mark.parametrize(
    ("table", "key", "phrase"),
    [
        ("[rag]\nmodel_download_base_url = 'http://mirror.example/m'", "rag.model_download_base_url", "non-loopback"),
        ("[rag]\nmodel_download_base_url = 'https://mirror.example/m?sig=1'", "rag.model_download_base_url", "query"),
        (
            "[rag]\nmodel_download_base_url = 'https://u:p@mirror.example/m'",
            "rag.model_download_base_url",
            "credentials",
        ),
        ("[rag]\nmodel_download_base_url = 'ftp://mirror.example/m'", "rag.model_download_base_url", "ftp://"),
        ("[rag.http]\nproxy_url = 'socks4://127.0.0.1:1080'", "rag.http.proxy_url", "socks5h"),
        ("[rag.http]\nproxy_url = 'http://alice:secret@127.0.0.1:3128'", "rag.http.proxy_url", "HTTPS_PROXY"),
        ("[rag.http]\nproxy_url = 'http://:3128'", "rag.http.proxy_url", "no host"),
    ],
)
def test_config_refusals_name_the_key(tmp_path: Path, table: str, key: str, phrase: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(table + "\n")

    with pytest.raises(MemoriesError) as caught:
        load_config(path)

    assert caught.value.code == "invalid_config"
    assert f"`{key}` refused: " in caught.value.message and phrase in caught.value.message
    assert "secret" not in caught.value.message and "sig=1" not in caught.value.message


def test_config_keeps_allowed_urls(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[rag]\nmodel_download_base_url = 'http://127.0.0.1:8000/models/'\n"
        "[rag.http]\nproxy_url = 'socks5h://127.0.0.1:1080'\n"
    )

    config = load_config(path)

    assert config.rag.model_download_base_url == "http://127.0.0.1:8000/models"
    assert config.rag.http.proxy_url == "socks5h://127.0.0.1:1080"


def test_the_supervisor_side_imports_no_httpx() -> None:
    # config.py runs in the supervisor, which never loads httpx; the URL policy must stay standard library only.
    code = "import sys, memories.config, memories.http.urls; assert 'httpx' not in sys.modules, 'httpx imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)

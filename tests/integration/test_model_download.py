"""Model install against loopback mirrors and proxies: issue 4, acceptance 1-3 (R-23, R-37 … R-39).

Real HTTPS servers, real proxies and real files in a temp folder; the mirror's and proxies' own logs are the
evidence. Alone: ``pytest -p tests.fixtures.servers tests/integration/test_model_download.py``.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import random
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memories.config import HttpConfig, load_config
from memories.errors import MemoriesError
from memories.http.client import build_client
from memories.http.retry import RetryPolicy, parse_retry_after
from memories.models.download import part_path
from memories.models.install import GEMMA_PROHIBITED_USE_URL, GEMMA_TERMS_URL, InstallProgress, install_model
from memories.models.manifest import Manifest, ManifestFile
from memories.models.verify import verify_installed
from tests.fixtures.servers import MIRROR_HOST, ConnectProxy, MirrorServer, Socks5Proxy

GRAPH = "onnx/model_q4.onnx"
DATA = "onnx/model_q4.onnx_data"
CONFIG = "config.json"
FILES = {
    GRAPH: random.Random(1).randbytes(20_000),
    DATA: random.Random(2).randbytes(300_000),
    "tokenizer.json": random.Random(3).randbytes(60_000),
    CONFIG: b'{"hidden_size": 768}\n',
}
PROXY_VARIABLES = ("HTTPS_PROXY", "HTTP_PROXY", "ALL_PROXY", "NO_PROXY")


def _manifest(files: dict[str, bytes] = FILES) -> Manifest:
    return Manifest(
        repository="memories-tests/tiny-embedding",
        revision="0123456789abcdef0123456789abcdef01234567",
        model_id="memories-tests/tiny-embedding",
        graph=GRAPH,
        files=[ManifestFile(path, len(data), hashlib.sha256(data).hexdigest()) for path, data in files.items()],
        test=True,
    )


@pytest.fixture(autouse=True)
def _clean_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def mirror(https_mirror: MirrorServer) -> MirrorServer:
    https_mirror.add_files(FILES)
    return https_mirror


@pytest.fixture
def http_config(ca_bundle: Path) -> HttpConfig:
    return HttpConfig(
        retries=2,
        backoff_ms=10,
        connect_timeout_seconds=5,
        timeout_seconds=10,
        download_timeout_seconds=60,
        ca_bundle=str(ca_bundle),
    )


def _with(config: HttpConfig, **changes: object) -> HttpConfig:
    fields = {name: getattr(config, name) for name in config.__struct_fields__}
    return HttpConfig(**(fields | changes))


def _assert_installed(dest: Path, files: dict[str, bytes] = FILES) -> None:
    for path, data in files.items():
        target = dest / path
        assert not target.is_symlink() and target.is_file(), path
        assert target.read_bytes() == data, path
    assert list(dest.rglob("*.part")) == []


def test_fresh_install_from_mirror(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    events: list[InstallProgress] = []
    report = install_model(
        _manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config, progress=events.append
    )

    assert [(f.path, f.status, f.bytes, f.transferred) for f in report.files] == [
        (path, "downloaded", len(data), len(data)) for path, data in FILES.items()
    ]
    _assert_installed(tmp_path)
    assert (tmp_path / DATA).parent == (tmp_path / GRAPH).parent
    assert [entry.status for entry in mirror.log] == [200] * len(FILES)
    total = sum(len(data) for data in FILES.values())
    assert events[-1].bytes_done == events[-1].bytes_total == total
    assert all(later.bytes_done >= earlier.bytes_done for earlier, later in itertools.pairwise(events))

    notice = (tmp_path / "NOTICE").read_text()
    assert GEMMA_TERMS_URL in notice and GEMMA_PROHIBITED_USE_URL in notice
    assert "TEST MODEL" in notice and "memories-tests/tiny-embedding" in notice
    assert _manifest().revision in notice
    for file in _manifest().files:
        assert f"{file.path}  {file.size}  {file.sha256}" in notice
    card = (tmp_path / "MODEL_CARD.md").read_text()
    assert f"https://huggingface.co/memories-tests/tiny-embedding/blob/{_manifest().revision}/README.md" in card
    assert "768-dimensional" in card and "EmbeddingGemma" in card and "Test model" in card

    status = verify_installed(_manifest(), tmp_path)
    assert (status.installed, status.verified, status.missing, status.mismatched) == (True, True, [], [])


def test_second_run_downloads_nothing(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)
    seen = len(mirror.log)

    report = install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert {f.status for f in report.files} == {"reused"}
    assert sum(f.transferred for f in report.files) == 0
    assert len(mirror.log) == seen


def test_resume_after_connection_dropped_mid_file(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(DATA).drops = [100_000]

    report = install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    first, second = mirror.requests_for(DATA)
    assert (first.range, first.status, first.body_bytes) == (None, 200, 100_000)
    assert (second.range, second.status) == ("bytes=100000-", 206)
    assert second.body_bytes == len(FILES[DATA]) - 100_000
    assert next(f for f in report.files if f.path == DATA).transferred == len(FILES[DATA])


def test_part_left_by_an_earlier_run_is_resumed_with_range(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    part = part_path(tmp_path / DATA)
    part.parent.mkdir(parents=True)
    part.write_bytes(FILES[DATA][:123_456])

    report = install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    [request] = mirror.requests_for(DATA)
    assert (request.range, request.status) == ("bytes=123456-", 206)
    assert next(f for f in report.files if f.path == DATA).transferred == len(FILES[DATA]) - 123_456


def test_server_ignoring_range_restarts_from_zero(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    part = part_path(tmp_path / DATA)
    part.parent.mkdir(parents=True)
    part.write_bytes(FILES[DATA][:50_000])
    mirror.fault(DATA).ignore_range = True

    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    [request] = mirror.requests_for(DATA)
    assert (request.range, request.status, request.body_bytes) == ("bytes=50000-", 200, len(FILES[DATA]))


def test_wrong_content_range_restarts_without_range(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    part = part_path(tmp_path / DATA)
    part.parent.mkdir(parents=True)
    part.write_bytes(FILES[DATA][:50_000])
    mirror.fault(DATA).wrong_content_range = True

    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    ranged, whole = mirror.requests_for(DATA)
    assert (ranged.range, ranged.status) == ("bytes=50000-", 206)
    assert (whole.range, whole.status, whole.body_bytes) == (None, 200, len(FILES[DATA]))


def test_corrupted_byte_is_download_hash_mismatch(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(DATA).corrupt_at = 4_321

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "download_hash_mismatch"
    assert DATA.rsplit("/", 1)[1] in caught.value.message
    assert not (tmp_path / DATA).exists()
    assert not part_path(tmp_path / DATA).exists()
    assert len(mirror.requests_for(DATA)) == 1


def test_mirror_with_a_shorter_file_is_download_hash_mismatch(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.add_files({DATA: FILES[DATA][:40_000]})
    part = part_path(tmp_path / DATA)
    part.parent.mkdir(parents=True)
    part.write_bytes(FILES[DATA][:50_000])

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "download_hash_mismatch"
    ranged, whole = mirror.requests_for(DATA)
    assert (ranged.range, ranged.status) == ("bytes=50000-", 416)
    assert (whole.range, whole.status) == (None, 200)
    assert not (tmp_path / DATA).exists() and not part.exists()


def test_existing_mismatched_file_is_left_untouched(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mine = b'{"hidden_size": 1024}\n'
    (tmp_path / CONFIG).write_bytes(mine)

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "model_file_mismatch"
    assert CONFIG in caught.value.message and "local_model_dir" in caught.value.message
    assert caught.value.details["files"] == [CONFIG]
    assert (tmp_path / CONFIG).read_bytes() == mine
    assert mirror.log == []
    assert not (tmp_path / GRAPH).exists()


def test_install_from_folder(tmp_path: Path) -> None:
    source = tmp_path / "downloaded"
    for path, data in FILES.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
    dest = tmp_path / "model"
    (dest / "onnx").mkdir(parents=True)
    (dest / GRAPH).write_bytes(FILES[GRAPH])

    report = install_model(_manifest(), dest, from_dir=source)

    assert {f.path: f.status for f in report.files} == {
        GRAPH: "reused",
        DATA: "copied",
        "tokenizer.json": "copied",
        CONFIG: "copied",
    }
    _assert_installed(dest)
    assert os.stat(dest / DATA).st_ino != os.stat(source / DATA).st_ino
    assert verify_installed(_manifest(), dest).verified


def test_install_from_folder_refuses_a_file_with_another_hash(tmp_path: Path) -> None:
    source = tmp_path / "downloaded"
    for path, data in FILES.items():
        (source / path).parent.mkdir(parents=True, exist_ok=True)
        (source / path).write_bytes(data)
    (source / DATA).write_bytes(bytes(len(FILES[DATA])))
    dest = tmp_path / "model"

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), dest, from_dir=source)

    assert caught.value.code == "model_file_mismatch"
    assert str(source / DATA) in caught.value.message
    assert not (dest / DATA).exists() and not part_path(dest / DATA).exists()


def test_explicit_proxy_wins_over_environment(
    mirror: MirrorServer,
    http_config: HttpConfig,
    connect_proxy: ConnectProxy,
    socks_proxy: Socks5Proxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", socks_proxy.url)
    config = _with(http_config, proxy_url=connect_proxy.url)

    install_model(_manifest(), tmp_path, base_url=mirror.url(host=MIRROR_HOST), http_config=config)

    _assert_installed(tmp_path)
    assert connect_proxy.carried and {(c.host, c.port) for c in connect_proxy.carried} == {(MIRROR_HOST, mirror.port)}
    assert socks_proxy.log == []
    assert {entry.headers["host"] for entry in mirror.log} == {f"{MIRROR_HOST}:{mirror.port}"}


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        ("connect", "proxy_url"),
        ("socks5h", "proxy_url"),
        ("socks5h", "ALL_PROXY"),
        ("connect", "https_proxy"),
    ],
)
def test_proxy_carries_download_from_a_name_only_it_resolves(
    kind: str,
    source: str,
    mirror: MirrorServer,
    http_config: HttpConfig,
    connect_proxy: ConnectProxy,
    socks_proxy: Socks5Proxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    proxy = connect_proxy if kind == "connect" else socks_proxy
    config = http_config
    if source == "proxy_url":
        config = _with(http_config, proxy_url=proxy.url)
    else:
        monkeypatch.setenv(source, proxy.url)

    install_model(_manifest(), tmp_path, base_url=mirror.url(host=MIRROR_HOST), http_config=config)

    _assert_installed(tmp_path)
    assert proxy.carried
    for connection in proxy.carried:
        assert (connection.host, connection.port, connection.resolved_to) == (MIRROR_HOST, mirror.port, "127.0.0.1")
        assert connection.address_type == ("authority" if kind == "connect" else "domain")
    assert len(mirror.log) == len(FILES)


@pytest.mark.parametrize("kind", ["connect", "socks5h"])
def test_environment_proxy_may_carry_credentials(
    kind: str,
    mirror: MirrorServer,
    http_config: HttpConfig,
    connect_proxy: ConnectProxy,
    socks_proxy: Socks5Proxy,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    proxy = connect_proxy if kind == "connect" else socks_proxy
    proxy.credentials = ("alice", "s3cret/pass")
    monkeypatch.setenv("HTTPS_PROXY", proxy.url_with(username="alice", password="s3cret/pass"))

    install_model(_manifest(), tmp_path, base_url=mirror.url(host=MIRROR_HOST), http_config=http_config)

    _assert_installed(tmp_path)
    assert proxy.carried and {c.username for c in proxy.log} == {"alice"}


def test_proxy_url_with_credentials_is_refused_at_config_load(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[rag.http]\nproxy_url = "http://alice:secret@127.0.0.1:3128"\n')

    with pytest.raises(MemoriesError) as caught:
        load_config(path)

    assert caught.value.code == "invalid_config" and "credentials" in caught.value.message


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
@pytest.mark.parametrize("explicit", [False, True])
def test_loopback_mirror_is_reached_directly_despite_a_dead_proxy(
    host: str,
    explicit: bool,
    mirror: MirrorServer,
    http_config: HttpConfig,
    dead_proxy_url: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    for name in ("HTTPS_PROXY", "HTTP_PROXY"):
        monkeypatch.setenv(name, dead_proxy_url)
    monkeypatch.setenv("ALL_PROXY", dead_proxy_url.replace("http://", "socks5h://"))
    monkeypatch.setenv("NO_PROXY", "example.com")
    config = _with(http_config, proxy_url=dead_proxy_url) if explicit else http_config

    install_model(_manifest(), tmp_path, base_url=mirror.url(host=host), http_config=config)

    _assert_installed(tmp_path)
    assert len(mirror.log) == len(FILES)


def test_retry_503_then_429_with_retry_after_then_200(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(GRAPH).statuses = [503, (429, {"Retry-After": "1"})]
    manifest = _manifest({GRAPH: FILES[GRAPH]})

    report = install_model(manifest, tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert [f.status for f in report.files] == ["downloaded"]
    assert (tmp_path / GRAPH).read_bytes() == FILES[GRAPH]
    assert [entry.status for entry in mirror.log] == [503, 429, 200]
    # The server's own clock: the third request arrived at least Retry-After after the second.
    assert mirror.log[2].at - mirror.log[1].at >= 1.0


def test_no_retries_means_one_request(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    mirror.fault(GRAPH).statuses = [503]

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=_with(http_config, retries=0))

    assert caught.value.code == "upstream_unavailable"
    assert "1 attempt" in caught.value.message and "HTTP 503" in caught.value.message
    assert len(mirror.log) == 1


def test_retries_used_up_is_upstream_unavailable(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    mirror.fault(GRAPH).statuses = [500, 502, 504]

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "upstream_unavailable"
    assert caught.value.details == {"attempts": 3, "last": "HTTP 504"}
    assert [entry.status for entry in mirror.log] == [500, 502, 504]


def test_a_network_failure_says_how_to_install_without_that_connection(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(GRAPH).statuses = [503]

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=_with(http_config, retries=0))

    assert caught.value.code == "upstream_unavailable" and caught.value.details["last"] == "HTTP 503"
    for hint in ("--from DIR", "[rag.http] proxy_url", "model_download_base_url"):
        assert hint in caught.value.message


def test_a_retry_is_announced_in_the_progress(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    mirror.fault(GRAPH).statuses = [503]
    events: list[InstallProgress] = []

    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config, progress=events.append)

    notes = [event.note for event in events if event.note]
    assert len(notes) == 1 and notes[0].startswith("retrying 2/3 after 503, waiting ")
    assert events[-1].note is None and events[-1].bytes_done == events[-1].bytes_total


def test_401_is_not_retried(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    mirror.fault(GRAPH).statuses = [401]

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "auth_failed"
    assert len(mirror.log) == 1


def test_redirect_to_plain_http_on_a_name_is_refused(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(GRAPH).redirect_to = f"http://{MIRROR_HOST}/models/{GRAPH}"

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "unsafe_redirect"
    assert len(mirror.log) == 1
    assert not (tmp_path / GRAPH).exists()


def test_redirect_to_a_signed_url_is_followed(mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path) -> None:
    mirror.fault(DATA).redirect_to = mirror.signed_url(DATA)
    mirror.fault(DATA).drops = [100_000]

    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    statuses = [(entry.path, entry.status, entry.range) for entry in mirror.requests_for(DATA)]
    assert statuses == [
        (f"/models/{DATA}", 302, None),
        (f"/signed/{DATA}", 200, None),
        (f"/models/{DATA}", 302, "bytes=100000-"),
        (f"/signed/{DATA}", 206, "bytes=100000-"),
    ]
    assert f"signature={mirror.signature}" in mirror.requests_for(DATA)[1].query


def test_redirect_from_https_to_loopback_plain_http_is_refused(
    mirror: MirrorServer, http_mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    http_mirror.add_files(FILES)
    mirror.fault(CONFIG).redirect_to = http_mirror.signed_url(CONFIG)

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)

    assert caught.value.code == "unsafe_redirect"
    assert "downgrade from https:// to plain http://" in caught.value.message
    assert http_mirror.signature not in caught.value.message
    assert caught.value.details == {"status": 302, "target": f"http://127.0.0.1:{http_mirror.port}/signed/{CONFIG}"}
    assert http_mirror.log == []
    assert not (tmp_path / CONFIG).exists()


def test_https_redirect_to_another_https_host_is_followed(
    mirror: MirrorServer, http_config: HttpConfig, socks_proxy: Socks5Proxy, tmp_path: Path
) -> None:
    mirror.fault(DATA).redirect_to = mirror.signed_url(DATA, host=MIRROR_HOST)

    install_model(
        _manifest(), tmp_path, base_url=mirror.base_url, http_config=_with(http_config, proxy_url=socks_proxy.url)
    )

    _assert_installed(tmp_path)
    first, second = mirror.requests_for(DATA)
    assert (first.path, first.status, first.headers["host"]) == (f"/models/{DATA}", 302, f"127.0.0.1:{mirror.port}")
    assert (second.path, second.status, second.headers["host"]) == (
        f"/signed/{DATA}",
        200,
        f"{MIRROR_HOST}:{mirror.port}",
    )
    assert f"signature={mirror.signature}" in second.query
    assert {(c.host, c.port) for c in socks_proxy.carried} == {(MIRROR_HOST, mirror.port)}


@pytest.mark.parametrize("to", ["http", "https"])
def test_plain_http_loopback_mirror_may_redirect_to_loopback_http_or_https(
    to: str, mirror: MirrorServer, http_mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    http_mirror.add_files(FILES)
    target = http_mirror if to == "http" else mirror
    http_mirror.fault(CONFIG).redirect_to = target.signed_url(CONFIG)

    install_model(_manifest(), tmp_path, base_url=http_mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path)
    assert [(entry.path, entry.status) for entry in target.requests_for(CONFIG)][-1] == (f"/signed/{CONFIG}", 200)


def test_redirect_chain_that_reached_https_may_not_drop_back_to_http(
    mirror: MirrorServer, http_mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    http_mirror.add_files(FILES)
    http_mirror.fault(CONFIG).redirect_to = mirror.url(CONFIG)
    mirror.fault(CONFIG).redirect_to = http_mirror.signed_url(CONFIG)

    with pytest.raises(MemoriesError) as caught:
        install_model(_manifest(), tmp_path, base_url=http_mirror.base_url, http_config=http_config)

    assert caught.value.code == "unsafe_redirect" and "downgrade" in caught.value.message
    assert [(entry.path, entry.status) for entry in http_mirror.requests_for(CONFIG)] == [(f"/models/{CONFIG}", 302)]
    assert [(entry.path, entry.status) for entry in mirror.requests_for(CONFIG)] == [(f"/models/{CONFIG}", 302)]
    assert not (tmp_path / CONFIG).exists()


def test_budget_shorter_than_retry_after_is_download_timeout(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    mirror.fault(GRAPH).statuses = [(503, {"Retry-After": "20"})]

    with pytest.raises(MemoriesError) as caught:
        install_model(
            _manifest(),
            tmp_path,
            base_url=mirror.base_url,
            http_config=_with(http_config, download_timeout_seconds=2),
        )

    assert caught.value.code == "download_timeout"
    assert len(mirror.log) == 1


def test_cancelled_download_keeps_its_part_for_a_resume(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    # Big enough that the first progress call after byte 0 (at most 256 KiB plus one read) comes before the end.
    files = {GRAPH: FILES[GRAPH], DATA: random.Random(4).randbytes(700_000)}
    mirror.add_files(files)
    stopped_at: list[int] = []

    def progress(event: InstallProgress) -> None:
        if event.path == DATA and event.file_bytes_done > 0 and not stopped_at:
            stopped_at.append(event.file_bytes_done)

    with pytest.raises(MemoriesError) as caught:
        install_model(
            _manifest(files),
            tmp_path,
            base_url=mirror.base_url,
            http_config=http_config,
            progress=progress,
            cancelled=lambda: bool(stopped_at),
        )

    assert caught.value.code == "cancelled"
    [done] = stopped_at
    assert part_path(tmp_path / DATA).stat().st_size == done < len(files[DATA])
    assert not (tmp_path / DATA).exists()

    install_model(_manifest(files), tmp_path, base_url=mirror.base_url, http_config=http_config)

    _assert_installed(tmp_path, files)
    assert mirror.requests_for(DATA)[-1].range == f"bytes={done}-"


def test_verify_installed_reports_missing_and_mismatched(
    mirror: MirrorServer, http_config: HttpConfig, tmp_path: Path
) -> None:
    install_model(_manifest(), tmp_path, base_url=mirror.base_url, http_config=http_config)
    tokenizer = tmp_path / "tokenizer.json"
    changed = bytearray(FILES["tokenizer.json"])
    changed[0] ^= 0xFF
    tokenizer.write_bytes(bytes(changed))
    os.utime(tokenizer, ns=(0, 1_000_000_000))
    (tmp_path / CONFIG).unlink()

    status = verify_installed(_manifest(), tmp_path)

    assert (status.installed, status.verified) == (False, False)
    assert (status.missing, status.mismatched) == ([CONFIG], ["tokenizer.json"])


def test_retry_wait_formula_and_retry_after() -> None:
    policy = RetryPolicy(retries=5, backoff_ms=500)
    assert [policy.wait_seconds(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert policy.wait_seconds(1, retry_after=3.0) == 3.0
    assert policy.wait_seconds(1, retry_after=120.0) == 30.0
    assert RetryPolicy(retries=5, backoff_ms=30_000).wait_seconds(3) == 30.0
    now = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("Fri, 01 May 2026 12:00:07 GMT", now=now) == 7.0
    assert parse_retry_after("Fri, 01 May 2026 11:00:00 GMT", now=now) == 0.0
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("soon") is None


def test_install_refuses_a_base_url_with_a_query(http_config: HttpConfig, tmp_path: Path) -> None:
    with pytest.raises(MemoriesError) as caught:
        install_model(
            _manifest(), tmp_path, base_url="https://mirror.example/models?token=abc", http_config=http_config
        )

    assert caught.value.code == "invalid_argument" and "query string" in caught.value.message
    assert list(tmp_path.iterdir()) == []


def test_environment_proxy_with_another_scheme_is_invalid_config(
    http_config: HttpConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "ftp://alice:s3cret@127.0.0.1:2121")

    with pytest.raises(MemoriesError) as caught:
        build_client(http_config)

    assert caught.value.code == "invalid_config"
    assert "HTTPS_PROXY" in caught.value.message and "ftp://" in caught.value.message
    assert "socks5h" in caught.value.message and "s3cret" not in caught.value.message


def test_verification_imports_no_httpx() -> None:
    # The supervisor runs verify_installed for `rag status` and must not load httpx (only workers.remote does).
    code = "import sys, memories.models.verify; assert 'httpx' not in sys.modules, 'httpx imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[2])

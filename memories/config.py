"""``config.toml``: typed settings of the daemon, decoded at the boundary into msgspec structs.

A missing file means every default; a UTF-8 byte order mark at the start is accepted. Unknown keys, wrong types
and out-of-range values are ``invalid_config`` naming the key (``rag.http.retries``). A key whose name marks a
secret value (exactly ``api_key``, ``key``, ``password``, ``secret`` or ``token``, in any table) is refused:
secrets come only from environment variables that config names (``api_key_env``). Relative paths resolve against
the folder of the config file.

Example::

    [daemon]
    auto_lock_minutes = 30

    [rag]
    local_threads = 2

    [rag.http]
    proxy_url = "socks5h://127.0.0.1:1080"
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any

import msgspec

from memories.errors import MemoriesError
from memories.files import read_regular_file
from memories.http.urls import endpoint_problem, proxy_problem

SECRET_KEY_NAMES = frozenset({"api_key", "key", "password", "secret", "token"})

_Seconds = msgspec.Meta(gt=0, le=24 * 3600)
"""A duration: positive and finite (at most a day)."""


class DaemonConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[daemon]``: idle auto-lock (minutes, 0 = off) and the per-job time budget (seconds, R-27)."""

    auto_lock_minutes: Annotated[float, msgspec.Meta(ge=0, le=7 * 24 * 60)] = 0
    job_budget_seconds: Annotated[float, msgspec.Meta(gt=0, le=24 * 3600)] = 300


class CryptoConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[crypto]``: Argon2id cost used when ``memories init`` creates the key hierarchy.

    The default is the second recommended option of RFC 9106 section 4 (64 MiB, t=3, p=4). The parameters are
    stored beside the wrapped key, so lowering them later (tests do) affects only homes created afterwards.
    """

    kdf_memory_kib: Annotated[int, msgspec.Meta(ge=8, le=4 * 1024 * 1024)] = 64 * 1024
    kdf_iterations: Annotated[int, msgspec.Meta(ge=1, le=64)] = 3
    kdf_lanes: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4


class HttpConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[rag.http]`` (R-37): proxy, retries and timeouts of every outbound request.

    ``retries`` counts extra attempts after the first; the wait before retry ``n`` (1-based) is
    ``backoff_ms * 2**(n-1)`` milliseconds, or the server's ``Retry-After`` when that is longer, never over 30 s.
    """

    use_env_proxy: bool = True
    proxy_url: str | None = None
    retries: Annotated[int, msgspec.Meta(ge=0, le=5)] = 2
    backoff_ms: Annotated[int, msgspec.Meta(ge=0, le=30_000)] = 500
    connect_timeout_seconds: Annotated[float, _Seconds] = 10
    timeout_seconds: Annotated[float, _Seconds] = 60
    download_timeout_seconds: Annotated[float, _Seconds] = 900
    ca_bundle: str | None = None


class RagConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[rag]`` (R-24): the local embedding model and how it runs."""

    local_model_dir: str | None = None
    local_threads: Annotated[int, msgspec.Meta(ge=1, le=256)] = 4
    max_tokens: Annotated[int, msgspec.Meta(ge=8, le=2048)] = 2048
    embed_batch_size: Annotated[int, msgspec.Meta(ge=1, le=256)] = 8
    model_download_base_url: str | None = None
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole file. ``path`` and ``digest`` are filled by :func:`load_config`, not read from TOML."""

    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    crypto: CryptoConfig = msgspec.field(default_factory=CryptoConfig)
    rag: RagConfig = msgspec.field(default_factory=RagConfig)


MAX_CONFIG_BYTES = 1024 * 1024
"""Largest config file read, in bytes (a real one is a few hundred)."""


def config_digest(path: Path) -> str:
    """SHA-256 hex of the file's bytes, ``"absent"``, or ``"unreadable: <why>"``: how the daemon notices an edit
    that needs a restart. Never raises and never blocks (a FIFO or a device in its place is just unreadable)."""
    try:
        return hashlib.sha256(read_regular_file(path, MAX_CONFIG_BYTES)).hexdigest()
    except FileNotFoundError:
        return "absent"
    except OSError as exc:
        return f"unreadable: {exc.strerror or exc}"


def load_config(path: Path) -> Config:
    """Read and validate ``path``; a missing file gives the defaults.

    Raises:
        MemoriesError: ``invalid_config`` naming the file and the key for bad TOML, unknown keys, wrong types,
            out-of-range values, secret-looking keys, missing paths, or a ``proxy_url`` or
            ``model_download_base_url`` the URL policy refuses (:mod:`memories.http.urls`).
    """
    try:
        raw = read_regular_file(path, MAX_CONFIG_BYTES)
    except FileNotFoundError:
        return Config()
    except OSError as exc:
        raise MemoriesError("invalid_config", f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        data = tomllib.loads(raw.decode("utf-8-sig"))  # a BOM (Windows editors write one) is not TOML
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise MemoriesError("invalid_config", f"{path} is not valid TOML: {exc}") from None
    _refuse_secrets(data, path, prefix="")
    try:
        config = msgspec.convert(data, Config)
    except msgspec.ValidationError as exc:
        raise MemoriesError("invalid_config", f"{path}: {_describe(exc)}") from None
    return _resolve(config, path)


def _refuse_secrets(table: dict[str, Any], path: Path, prefix: str) -> None:
    for name, value in table.items():
        dotted = f"{prefix}{name}"
        if name in SECRET_KEY_NAMES:
            raise MemoriesError(
                "invalid_config",
                f"{path}: `{dotted}` would hold a secret; secrets are never read from config.toml, only from "
                "the daemon's environment (proxy credentials: HTTPS_PROXY or ALL_PROXY)",
                {"key": dotted},
            )
        if isinstance(value, dict):
            _refuse_secrets(value, path, prefix=f"{dotted}.")


def _describe(exc: msgspec.ValidationError) -> str:
    """Turn msgspec's ``... - at `$.rag.http` `` into a message that names the dotted key."""
    text = str(exc)
    match = re.match(r"(?s)(.*) - at `\$\.?(.*)`$", text)
    if not match:
        return text
    message, where = match.groups()
    unknown = re.match(r"Object contains unknown field `(.+)`", message)
    if unknown:
        key = f"{where}.{unknown.group(1)}" if where else unknown.group(1)
        return f"unknown key `{key}`"
    return f"`{where}`: {message}"


def _resolve(config: Config, path: Path) -> Config:
    base = path.parent
    rag = config.rag
    if rag.local_model_dir is not None:
        model_dir = (base / os.path.expanduser(rag.local_model_dir)).resolve()
        if not model_dir.is_dir():
            raise MemoriesError(
                "invalid_config", f"{path}: `rag.local_model_dir` {model_dir} is not an existing folder"
            )
        rag.local_model_dir = str(model_dir)
    http = rag.http
    if http.ca_bundle is not None:
        bundle = (base / os.path.expanduser(http.ca_bundle)).resolve()
        if not bundle.is_file():
            raise MemoriesError("invalid_config", f"{path}: `rag.http.ca_bundle` {bundle} is not a file")
        http.ca_bundle = str(bundle)
    if http.proxy_url is not None:
        _check_proxy_url(http.proxy_url, path)
    if rag.model_download_base_url is not None:
        rag.model_download_base_url = _check_mirror_url(rag.model_download_base_url, path)
    return config


def _check_proxy_url(url: str, path: Path) -> None:
    problem = proxy_problem(url, credentials_allowed=False)
    if problem:
        raise MemoriesError("invalid_config", f"{path}: `rag.http.proxy_url` refused: {problem}")


def _check_mirror_url(url: str, path: Path) -> str:
    problem = endpoint_problem(url)
    if problem:
        raise MemoriesError("invalid_config", f"{path}: `rag.model_download_base_url` refused: {problem}")
    return url.rstrip("/")

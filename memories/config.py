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

    [rag.embedding]                      # a remote embedding service instead of the local model (R-28)
    protocol = "compatible"
    url = "http://127.0.0.1:8000/v1/embeddings"
    model = "BAAI/bge-m3"

Model endpoints (``[rag.embedding]``, ``[rag.generation]``, ``[rag.rerank]``) are checked here, at daemon start
(R-29, R-31): the URL by :func:`memories.http.urls.endpoint_problem` (HTTPS unless loopback; no userinfo, query
or fragment), ``api_key_env`` is a variable *name* that must be set in the daemon's environment unless the URL
is loopback. A Gemini URL names its operation (``:embedContent``, ``:batchEmbedContents``, ``:generateContent``).
"""

from __future__ import annotations

import hashlib
import os
import re
import tomllib
import urllib.parse
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from memories.errors import MemoriesError
from memories.files import read_regular_file
from memories.http.urls import endpoint_problem, is_loopback_host, proxy_problem
from memories.limits import (
    DEFAULT_MAX_CHUNKS,
    MAX_MAX_CHUNKS,
    MIN_MAX_CHUNKS,
    IndexLimits,
    text_bytes_for,
    vector_bytes_for,
)
from memories.providers.operations import operation_problem

SECRET_KEY_NAMES = frozenset({"api_key", "key", "password", "secret", "token"})

_Seconds = msgspec.Meta(gt=0, le=24 * 3600)
"""A duration: positive and finite (at most a day)."""


class DaemonConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[daemon]``: idle auto-lock (minutes, 0 = off) and the per-job time budget (seconds, R-27)."""

    auto_lock_minutes: Annotated[float, msgspec.Meta(ge=0, le=7 * 24 * 60)] = 0
    job_budget_seconds: Annotated[float, msgspec.Meta(gt=0, le=24 * 3600)] = 300


class SyncConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[sync]``: while unlocked, pull then push every synced vault each ``interval_seconds`` (unset: only on
    ``sync pull`` / ``sync push``)."""

    interval_seconds: Annotated[float, msgspec.Meta(ge=5, le=24 * 3600)] | None = None


class CryptoConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[crypto]``: Argon2id cost used when ``memories init`` creates the key hierarchy.

    The default is the second recommended option of RFC 9106 section 4 (64 MiB, t=3, p=4). The parameters are
    stored beside the wrapped key, so lowering them later (tests do) affects only homes created afterwards.
    """

    kdf_memory_kib: Annotated[int, msgspec.Meta(ge=8, le=1024 * 1024)] = 64 * 1024  # unlock refuses more than 1 GiB
    kdf_iterations: Annotated[int, msgspec.Meta(ge=1, le=64)] = 3
    kdf_lanes: Annotated[int, msgspec.Meta(ge=1, le=64)] = 4


def weak_kdf_warning(crypto: CryptoConfig, path: str) -> str | None:
    """The warning for a ``[crypto]`` that lowers Argon2id's memory or iterations below the default (RFC 9106's
    second recommendation), which makes every passphrase it protects cheaper to guess (fewer lanes cost an attacker
    nothing, so they are not counted); ``None`` at or above it. Tests lower it on purpose; a person rarely should."""
    default = CryptoConfig()
    if crypto.kdf_memory_kib >= default.kdf_memory_kib and crypto.kdf_iterations >= default.kdf_iterations:
        return None
    return (
        f"{path} lowers Argon2id below its default ([crypto] kdf_memory_kib = {crypto.kdf_memory_kib}, "
        f"kdf_iterations = {crypto.kdf_iterations}; the default is {default.kdf_memory_kib} and "
        f"{default.kdf_iterations}): a passphrase set with it is cheaper to guess; remove [crypto] unless this home "
        "is only for tests"
    )


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


class EndpointConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """What every model endpoint table shares (R-28, R-29): the wire protocol, the full operation URL, the model
    name, and the *name* of the environment variable holding the API key (never the key itself).

    Gemini sends the key as ``x-goog-api-key``, ``compatible`` as ``Authorization: Bearer``.
    """

    protocol: Literal["gemini", "compatible"]
    url: str
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
    api_key_env: str | None = None


class EmbeddingConfig(EndpointConfig):
    """``[rag.embedding]``: a remote embedding service in place of the local model (R-28, R-30, R-32).

    ``dimensions`` is sent (Gemini ``outputDimensionality``, compatible ``dimensions``) and checked on every
    response; without it the first response fixes the width. ``batch_size`` counts inputs per request (Gemini's
    ``batchEmbedContents`` takes at most 100; ``embedContent`` always one), ``concurrency`` requests in flight.
    ``query_prefix``/``document_prefix`` are prepended for ``compatible`` models that need them (e5: ``"query: "``,
    ``"passage: "``). ``min_similarity`` is the cosine at which a chunk counts as evidence for ``rag ask``
    (default per protocol, :mod:`memories.rag.answers`). All but ``batch_size`` and ``concurrency`` go into the
    vector space key.
    """

    dimensions: Annotated[int, msgspec.Meta(ge=1, le=65_536)] | None = None
    batch_size: Annotated[int, msgspec.Meta(ge=1, le=2048)] = 32
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=16)] = 2
    query_prefix: Annotated[str, msgspec.Meta(max_length=256)] = ""
    document_prefix: Annotated[str, msgspec.Meta(max_length=256)] = ""
    min_similarity: Annotated[float, msgspec.Meta(ge=-1, le=1)] | None = None


class GenerationConfig(EndpointConfig):
    """``[rag.generation]``: the chat model ``rag ask`` calls (R-08, R-30, R-43).

    ``max_output_tokens`` is always sent (compatible: as ``max_tokens_field``; Gemini:
    ``generationConfig.maxOutputTokens``), so no unknown server default decides. ``max_context_chars`` bounds the
    source text of one question in code points: servers such as Ollama silently cut a longer prompt, and a cited
    passage would then never have been seen.
    """

    max_output_tokens: Annotated[int, msgspec.Meta(ge=16, le=65_536)] = 1024
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    max_context_chars: Annotated[int, msgspec.Meta(ge=1000, le=2_000_000)] = 24_000


class RerankConfig(EndpointConfig):
    """``[rag.rerank]``: a learned reranker (R-36), ``compatible`` only: ``{model, query, documents, top_n}``."""

    protocol: Literal["compatible"]


_MIN_LIMIT_BYTES = 1024 * 1024
_MAX_LIMIT_BYTES = 1024**4
"""``[rag] max_text_bytes`` and ``max_vector_bytes``: 1 MiB to 1 TiB when set."""

DEFAULT_LOCAL_THREADS = 4
"""ONNX Runtime intra-op threads when ``[rag] local_threads`` is not set (R-24); never more than the cores."""


class RagConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``[rag]`` (R-24): the local embedding model and how it runs, and the optional model endpoints.

    ``local_threads`` left out (``None``) means :data:`DEFAULT_LOCAL_THREADS`, quietly capped at the machine's
    cores; an explicit value above them is capped too, with a warning (it asked for more than there is).
    ``local_min_similarity`` is the cosine at which a chunk counts as evidence for ``rag ask`` with the local model
    (``None``: :data:`memories.rag.answers.MIN_SIMILARITY` ``["local"]``, measured by ``ops/bench/evidence.py``);
    ``[rag.embedding] min_similarity`` is its remote twin. ``keep_vectors`` keeps each record's vectors sealed in the
    home across lock and restart (:mod:`memories.vault.vectors`, a departure from R-19); ``false`` keeps them in
    memory only, and the daemon deletes the kept ones when it starts. ``keep_index`` keeps each vault's lexical
    cache as a sealed snapshot (:mod:`memories.vault.snapshots`, issue 28); ``false`` rebuilds it from the records
    after every unlock, start and eviction, and the daemon deletes the kept ones when it starts. ``auto_index``:
    what the daemon embeds by itself, in the background, after a change
    (:meth:`memories.daemon.index.indexing.Indexing.start_reindex`): ``local`` with the in-process model only,
    ``always`` also with a remote ``[rag.embedding]`` (which may cost money: never the default), ``off`` nothing
    (the recent vaults' caches are still warmed at unlock: it governs embedding only).

    ``max_chunks`` (1,000 to 10,000,000; default 100,000), ``max_text_bytes`` and ``max_vector_bytes`` (bytes,
    1 MiB to 1 TiB) are the per-vault limits of a cached vault (R-21's 10,000 chunks, 16 MiB and 32 MiB made
    settings, issue 28): unset, each byte limit follows ``max_chunks`` by R-21's ratios (16 MiB and 32 MiB per
    10,000 chunks), so ``max_chunks = 10000`` alone restores R-21 exactly (:meth:`index_limits`). A vault over them
    keeps every record but cannot be searched (``vault_too_large``, naming the setting to raise).
    """

    local_model_dir: str | None = None
    local_threads: Annotated[int, msgspec.Meta(ge=1, le=256)] | None = None
    local_min_similarity: Annotated[float, msgspec.Meta(ge=-1, le=1)] | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=8, le=2048)] = 2048
    embed_batch_size: Annotated[int, msgspec.Meta(ge=1, le=256)] = 8
    keep_vectors: bool = True
    keep_index: bool = True
    auto_index: Literal["local", "always", "off"] = "local"
    max_chunks: Annotated[int, msgspec.Meta(ge=MIN_MAX_CHUNKS, le=MAX_MAX_CHUNKS)] = DEFAULT_MAX_CHUNKS
    max_text_bytes: Annotated[int, msgspec.Meta(ge=_MIN_LIMIT_BYTES, le=_MAX_LIMIT_BYTES)] | None = None
    max_vector_bytes: Annotated[int, msgspec.Meta(ge=_MIN_LIMIT_BYTES, le=_MAX_LIMIT_BYTES)] | None = None
    model_download_base_url: str | None = None
    http: HttpConfig = msgspec.field(default_factory=HttpConfig)
    embedding: EmbeddingConfig | None = None
    generation: GenerationConfig | None = None
    rerank: RerankConfig | None = None

    def index_limits(self) -> IndexLimits:
        """The per-vault limits (``max_chunks``; ``max_text_bytes`` and ``max_vector_bytes`` derived from it by
        R-21's ratios unless set: :func:`memories.limits.text_bytes_for`, :func:`~memories.limits.vector_bytes_for`)."""
        return IndexLimits(
            chunks=self.max_chunks,
            text_bytes=text_bytes_for(self.max_chunks) if self.max_text_bytes is None else self.max_text_bytes,
            vector_bytes=vector_bytes_for(self.max_chunks) if self.max_vector_bytes is None else self.max_vector_bytes,
        )


ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""An environment variable name (POSIX portable: letters, digits, underscore, not starting with a digit)."""

KEY_PREFIXES = ("sk-", "sk_", "AIza", "hf_", "ghp_", "gho_", "github_pat_", "xox", "glpat-", "pk_", "rk_")
"""How common API keys start (OpenAI, Google, Hugging Face, GitHub, Slack, GitLab, Stripe): an ``api_key_env``
that starts so is a pasted key, not a variable name."""


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """The whole file. ``path`` and ``digest`` are filled by :func:`load_config`, not read from TOML."""

    daemon: DaemonConfig = msgspec.field(default_factory=DaemonConfig)
    crypto: CryptoConfig = msgspec.field(default_factory=CryptoConfig)
    rag: RagConfig = msgspec.field(default_factory=RagConfig)
    sync: SyncConfig = msgspec.field(default_factory=SyncConfig)


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


def load_config(path: Path, environ: Mapping[str, str] | None = None) -> Config:
    """Read and validate ``path``; a missing file gives the defaults.

    ``environ`` (default ``os.environ``, the daemon's) is where each ``api_key_env`` must be set.

    Raises:
        MemoriesError: ``invalid_config`` naming the file and the key for bad TOML, unknown keys, wrong types,
            out-of-range values, secret-looking keys, missing paths, a ``proxy_url``, ``model_download_base_url``
            or endpoint ``url`` the URL policy refuses (:mod:`memories.http.urls`), or an ``api_key_env`` that is
            not a variable name or is unset for a non-loopback URL.
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
    _resolve(config, path)
    _check_endpoints(config.rag, path, os.environ if environ is None else environ)
    return config


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


def _resolve(config: Config, path: Path) -> None:
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


def _check_endpoints(rag: RagConfig, path: Path, environ: Mapping[str, str]) -> None:
    for table, endpoint in (("embedding", rag.embedding), ("generation", rag.generation), ("rerank", rag.rerank)):
        if endpoint is None:
            continue
        problem = endpoint_problem(endpoint.url) or operation_problem(
            endpoint.protocol, table, urllib.parse.urlsplit(endpoint.url).path
        )
        if problem:
            raise MemoriesError(
                "invalid_config", f"{path}: `rag.{table}.url` refused: {problem}", {"key": f"rag.{table}.url"}
            )
        _check_key_env(endpoint, f"rag.{table}", path, environ)


def _check_key_env(endpoint: EndpointConfig, table: str, path: Path, environ: Mapping[str, str]) -> None:
    """``api_key_env`` names a variable (a pasted key is refused and never echoed), set unless the URL is loopback."""
    key = f"{table}.api_key_env"
    name = endpoint.api_key_env
    loopback = is_loopback_host(urllib.parse.urlsplit(endpoint.url).hostname)
    if name is None:
        if not loopback:
            raise MemoriesError(
                "invalid_config",
                f"{path}: `{key}` is required for the non-loopback URL of [{table}]: name the environment variable "
                "that holds the API key in the daemon's environment",
                {"key": key},
            )
        return
    if _looks_like_key(name):
        raise MemoriesError(
            "invalid_config",
            f"{path}: `{key}` looks like an API key itself (not shown); it must be the *name* of an environment "
            "variable (such as GEMINI_API_KEY) that holds the key in the daemon's environment",
            {"key": key},
        )
    if not ENV_NAME.fullmatch(name):
        raise MemoriesError(
            "invalid_config",
            f"{path}: `{key}` must be an environment variable name ([A-Za-z_][A-Za-z0-9_]*); the value is not shown",
            {"key": key},
        )
    if not loopback and not environ.get(name):
        raise MemoriesError(
            "invalid_config",
            f"{path}: `{key}` names {name}, which is not set in the daemon's environment (required for the "
            f"non-loopback URL of [{table}])",
            {"key": key},
        )


def _looks_like_key(value: str) -> bool:
    """A value no one would name a variable: a known key prefix, or long, mixed-case and with digits."""
    if value.startswith(KEY_PREFIXES) or value.lower().startswith("bearer"):
        return True
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
    return len(value) >= 24 and mixed


def _check_proxy_url(url: str, path: Path) -> None:
    problem = proxy_problem(url, credentials_allowed=False)
    if problem:
        raise MemoriesError("invalid_config", f"{path}: `rag.http.proxy_url` refused: {problem}")


def _check_mirror_url(url: str, path: Path) -> str:
    problem = endpoint_problem(url)
    if problem:
        raise MemoriesError("invalid_config", f"{path}: `rag.model_download_base_url` refused: {problem}")
    return url.rstrip("/")

"""Every failure Memories reports, as one table of stable codes.

The CLI, the daemon, the workers, MCP and the tests share these strings; a code never changes meaning once
released. A failure crosses process boundaries as ``(code, message, details)`` and is raised again on the other
side as :class:`MemoriesError`, so the code is the contract and the class tree stays flat::

    MemoriesError(code, message, details)
      code in CODES  ──  one line for the user: "error: CODE: message"
                         exit status 1 (usage errors from click keep 2, partial runs exit 3)

Messages are for people and name the thing that failed (a file, a key, a vault), never plaintext content.
"""

from __future__ import annotations

from typing import Any

CODES: dict[str, str] = {
    # Daemon and client
    "daemon_not_running": "No daemon answers for this home; start it with `memories daemon start`.",
    "daemon_already_running": "A daemon already serves this home.",
    "daemon_start_failed": "The daemon did not come up; its log says why.",
    "daemon_unresponsive": "A daemon holds the home but does not answer (stopped or stuck); `daemon stop` ends it.",
    "http_port_foreign": "The MCP HTTP port is held by another user's process, which would capture grant tokens "
    "(Linux: /proc/net/tcp); stop it or use another port.",
    "socket_folder_unsafe": "The short socket folder in a shared place ($XDG_RUNTIME_DIR/memories or "
    "/tmp/memories-<uid>, used when the home's path is too long for a socket) exists but is not this user's own folder "
    "with mode 0700 (another account may have made it first); remove it, or use a shorter --home.",
    "daemon_busy": "The daemon runs but is busy (100 connections open at once, or its queue of new connections full); "
    "retryable: the clients try again for 1.5 s, then say so; try again in a moment.",
    "home_mismatch": "The running daemon serves another home or config file.",
    "protocol_mismatch": "Client and daemon speak different protocol versions; restart the daemon.",
    "protocol_error": "A message could not be decoded or was too large.",
    "internal_error": "An unexpected failure inside the daemon; its log has the details.",
    "disk_full": "The disk that holds the home is full (or the database reached its size limit); nothing more was "
    "written. Free some space and run the command again.",
    "home_read_only": "The home's folder is on a read-only file system; Memories writes its database, socket and log "
    "there.",
    "restart_needed": "The daemon and its workers come from different installs (an upgrade); restart the daemon.",
    "usage_error": "The command line is malformed (click's usage errors; exit status 2).",
    # Keys
    "not_initialized": "The home has no key hierarchy yet; run `memories init`.",
    "already_initialized": "The home already has a key hierarchy.",
    "vault_locked": "The vault is locked; run `memories unlock`.",
    "bad_passphrase": "The passphrase does not unlock this home.",
    "invalid_passphrase": "The passphrase is empty, too long or the two entries differ.",
    # Grants (MCP)
    "grant_invalid": "The grant token is empty, malformed or unknown to this home.",
    "grant_expired": "The grant has expired; create a new one (`memories grant create` or `memories inject --force`).",
    "grant_revoked": "The grant was revoked; create a new one.",
    "scope_denied": "The grant does not include this tool.",
    # Vaults and records
    "vault_not_found": "No vault has that id or name.",
    "vault_name_taken": "Another vault already has that name.",
    "ambiguous_vault": "The name matches more than one vault; use its id.",
    "invalid_vault_name": "Vault names are 1-64 characters without control characters or spaces at the ends.",
    "record_not_found": "No record (or revision) has that id in this vault.",
    "ambiguous_revision": "Several revisions of the record have that number (made on different devices); use one of "
    "the revision ids listed.",
    "home_too_new": "The home was written by a newer release of Memories (a store format this one does not know); "
    "upgrade Memories to open it.",
    "database_damaged": "The home's database file is truncated, overwritten or not a Memories store; nothing was "
    "changed. The message names the file and the upgrade backups beside it.",
    "integrity_error": "Stored ciphertext failed authentication; it was changed, moved or corrupted.",
    "body_too_large": "The body exceeds the largest accepted size.",
    "invalid_utf8": "Text (a body, a title, a query, any argument) is not valid UTF-8.",
    "invalid_argument": "An argument has the right type but an unusable value.",
    "confirmation_required": "A command that cannot be undone needs --yes when it cannot ask on a terminal.",
    # Config
    "invalid_config": "config.toml has an unknown key, a wrong type, a bad value or a secret.",
    "client_config_invalid": "An AI client's config file does not parse or cannot be written; it was left unchanged.",
    "invalid_environment": "An environment variable names a folder by a relative path where an absolute one is needed "
    "(HOME, CODEX_HOME or CLAUDE_CONFIG_DIR for inject).",
    # Jobs
    "job_not_found": "No job has that id.",
    "worker_crashed": "The worker process running this job died; it was restarted.",
    "budget_exceeded": "The job ran past its time budget; a retry reuses the work already done.",
    "cancelled": "The job was cancelled.",
    "vault_changed": "The vault kept changing while the job ran; try again.",
    "policy_changed": "The vault's device-only policy changed while the job ran; the job was stopped and any reply "
    "still in flight dropped: run it again.",
    # Ingest and retrieval
    "unsupported_file": "Only UTF-8 text and Markdown can be imported; convert the file to text first.",
    "query_too_long": "The query is longer than 1,024 bytes.",
    "too_many_terms": "The query has more than 64 distinct terms.",
    "limit_too_large": "At most 100 results can be requested.",
    "vault_too_large": "The vault exceeds a per-vault index limit.",
    "invalid_fixture": 'A `rag bench` fixture line is not {"query": ..., "relevant": [...]}, or an entry names no '
    "searchable record, or a title names several.",
    "vectors_missing": "Some chunks have no vector yet; run `memories rag index` before benchmarking vector or "
    "hybrid search.",
    # Models and remote I/O
    "model_not_installed": "No embedding model is installed; run `memories rag model-install`.",
    "model_invalid": "The model files fail the load checks.",
    "model_file_mismatch": "An existing model file does not match the pinned size and SHA-256.",
    "download_hash_mismatch": "Downloaded bytes do not match the pinned SHA-256.",
    "invalid_vector": "A model or embedding service produced an unusable vector (NaN, infinite, zero, nested or of "
    "the wrong size), or not exactly one per input; nothing of it was stored.",
    "auth_failed": "The remote service refused the credentials (401/403).",
    "unsafe_redirect": "The remote service redirected to a URL the policy refuses.",
    "upstream_unavailable": "The remote service kept failing after every retry.",
    "upstream_error": "The remote service answered with an error that is not retried.",
    "download_timeout": "A model file did not finish within download_timeout_seconds.",
    # Generation and model endpoints
    "generation_not_configured": "Answers (`rag ask`, MCP `memory_ask`) need [rag.generation] in the daemon's config.",
    "invalid_model_output": "The generation service's reply is not the JSON answer asked for (truncated, empty, "
    "blocked, malformed or citing labels it was not shown), or a model service's reply nests JSON more than 64 "
    "levels deep; it is not retried.",
    "device_only_vault": "The vault is device-only; its data may not go to a non-loopback model endpoint or a sync "
    "folder.",
    # Sync
    "sync_folder_in_use": "The sync folder already holds a vault; join it or choose another folder.",
    "watch_not_found": "No watched folder of that vault is that folder; `rag watch list` shows them.",
    "watch_paused": "A watched folder's watch paused (its folder vanished, was replaced or became unreadable, or more "
    "files were deleted than the deletion rules allow); nothing is deleted until `rag watch VAULT DIR --resume`.",
    "sync_folder_error": "The sync folder's file system failed, or payloads/ or devices/ in it is not a folder; the "
    "timed sync shows it in `sync status` and tries again.",
}

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_PARTIAL = 3


class MemoriesError(Exception):
    """A failure with a stable code from :data:`CODES`.

    Args:
        code: a key of :data:`CODES`; anything else raises ``ValueError`` (a bug, not a user error).
        message: one line for a person; names files, keys or ids, never record content.
        details: optional JSON-able facts for scripts and tests (``{"embedded_now": 3, ...}``).
    """

    def __init__(self, code: str, message: str | None = None, details: dict[str, Any] | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown error code {code!r}")
        self.code = code
        self.message = message or CODES[code]
        self.details = details or {}
        super().__init__(f"{code}: {self.message}")

"""One model file into place: fetched (:func:`download_file`) or copied (:func:`copy_file`) into
``<dest>.part``, checked against its pinned size and SHA-256, and only then renamed to ``dest``.

A download resumes from the bytes already in ``<dest>.part`` with ``Range: bytes=N-`` (RFC 9110 section
14.2), hashing the part first and every new byte as it arrives, so the file is read once. It copes with the
ways servers get Range wrong::

    206 + Content-Range "bytes N-…/size"   append (the normal resume)
    200 (Range ignored)                    empty the part, take the whole body from byte 0
    206 + another Content-Range, or 416    empty the part, ask again without Range (not again for this file)
    connection dropped mid-body            TransientFailure: the next attempt resumes from the bytes on disk

Bytes past the pinned size are never written. Mismatching bytes discard the part (``download_hash_mismatch``);
cancellation and the per-file deadline keep it for a later resume.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from memories.errors import MemoriesError
from memories.http.client import DOWNLOAD_REDIRECTS, open_response, shown_url
from memories.http.retry import CancelCheck, Deadline, RetryPolicy, TransientFailure, check_cancelled, with_retries
from memories.paths import make_folders

ProgressCallback = Callable[[int, int], None]
"""Called with ``(bytes_done, bytes_total)`` of one file; bytes already in a resumed part count as done."""

PROGRESS_BYTES = 256 * 1024
"""Progress is reported after this many new bytes or :data:`PROGRESS_SECONDS`, and at the start and end."""

PROGRESS_SECONDS = 0.1

_DISK_CHUNK_BYTES = 1024 * 1024
_CONTENT_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$", re.IGNORECASE)


def part_path(dest: Path) -> Path:
    """Where ``dest`` is assembled: ``<dest>.part`` in the same folder, so the final rename is atomic."""
    return dest.with_name(dest.name + ".part")


def download_file(
    client: httpx.Client,
    url: str,
    dest: Path,
    *,
    size: int,
    sha256: str,
    retry: RetryPolicy,
    budget_seconds: float,
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
    on_retry: Callable[[str], None] | None = None,
) -> int:
    """Download ``url`` to ``dest`` (``size`` bytes, lowercase hex ``sha256``), resuming ``<dest>.part``.

    Every attempt follows at most 5 redirects (:data:`~memories.http.client.DOWNLOAD_REDIRECTS`), each checked by
    :func:`memories.http.urls.redirect_problem` (from ``https://`` only to ``https://``, a signed query allowed);
    failures that are retried (connection and read errors, 429/5xx, a body cut short) use ``retry``, and a retry
    resumes from the bytes on disk. ``budget_seconds`` (``download_timeout_seconds``) bounds the whole file:
    hashing the old part, every attempt and every wait. ``on_retry`` hears each retry before its wait (see
    :func:`~memories.http.retry.with_retries`). ``client`` comes from :func:`~memories.http.client.build_client`.

    Returns:
        Bytes received over the network (less than ``size`` after a resume, 0 if the part was whole).

    Raises:
        MemoriesError: ``download_hash_mismatch`` (the server's bytes or length differ from the pin; the part
            is deleted and ``dest`` is not created), ``download_timeout`` and ``cancelled`` (the part is
            kept), ``upstream_unavailable``, ``auth_failed``, ``upstream_error``, ``unsafe_redirect``.
        OSError: the part cannot be written (a full disk, permissions).
    """
    deadline = Deadline.after(
        budget_seconds,
        "download_timeout",
        f"{dest.name} did not finish within download_timeout_seconds = {budget_seconds:g} s; "
        "run the install again to resume it",
    )
    part = _Part(part_path(dest), size)
    try:
        part.load(cancelled)
        transfer = _Transfer(client, url, dest, part, deadline, cancelled, _Progress(progress, size))
        with_retries(
            transfer.attempt,
            policy=retry,
            what=f"download of {shown_url(url)}",
            deadline=deadline,
            cancelled=cancelled,
            on_retry=on_retry,
        )
        actual = part.hexdigest()
        if actual != sha256:
            part.discard()
            raise MemoriesError(
                "download_hash_mismatch",
                f"{dest.name} from {shown_url(url)} has SHA-256 {actual}, not the pinned {sha256}; "
                "the bytes were discarded (a run that resumed an older part fetches the file afresh next time)",
                {"path": str(dest), "expected_sha256": sha256, "actual_sha256": actual},
            )
        part.commit(dest)
        return transfer.received
    finally:
        part.close()


def copy_file(
    source: Path,
    dest: Path,
    *,
    size: int,
    sha256: str,
    progress: ProgressCallback | None = None,
    cancelled: CancelCheck | None = None,
) -> None:
    """Copy ``source`` (a file the user fetched by other means) to ``dest`` through ``<dest>.part``.

    The bytes are copied, never linked, hashed on the way and renamed only when size and SHA-256 match the
    pin. A symbolic link as ``source`` is followed (download tools keep files in a cache and link to them).

    Raises:
        MemoriesError: ``model_file_mismatch`` naming ``source`` when its bytes differ from the pin (the part
            is deleted); ``cancelled`` (the part is kept).
        OSError: ``source`` cannot be read or the part cannot be written.
    """
    part = _Part(part_path(dest), size)
    try:
        part.reset()
        report = _Progress(progress, size)
        report(0, force=True)
        with open(source, "rb") as reader:
            while chunk := reader.read(min(_DISK_CHUNK_BYTES, part.room + 1)):
                if len(chunk) > part.room:
                    part.discard()
                    raise _source_mismatch(source, f"it is longer than the pinned {size} bytes")
                part.write(chunk)
                report(part.offset)
                check_cancelled(cancelled)
        actual = part.hexdigest()
        if part.offset != size or actual != sha256:
            part.discard()
            reason = (
                f"it has {part.offset} bytes, not the pinned {size}"
                if part.offset != size
                else f"its SHA-256 is {actual}, not the pinned {sha256}"
            )
            raise _source_mismatch(source, reason)
        part.commit(dest)
    finally:
        part.close()


class _Part:
    """``<dest>.part`` opened for appending, with the SHA-256 and length of what it holds."""

    def __init__(self, path: Path, size: int) -> None:
        make_folders(str(path.parent))
        self.path = path
        self.size = size
        self.offset = 0
        self._hasher = hashlib.sha256()
        self._file = open(path, "a+b")  # noqa: SIM115 - closed by close(), commit() or discard()

    @property
    def room(self) -> int:
        """Bytes still missing."""
        return self.size - self.offset

    def load(self, cancelled: CancelCheck | None) -> None:
        """Hash what an earlier run left; a part longer than the pinned size is no prefix and is emptied."""
        if self._file.seek(0, os.SEEK_END) > self.size:
            self.reset()
            return
        self._file.seek(0)
        while chunk := self._file.read(_DISK_CHUNK_BYTES):
            self._hasher.update(chunk)
            self.offset += len(chunk)
            check_cancelled(cancelled)

    def reset(self) -> None:
        self._file.truncate(0)
        self._hasher = hashlib.sha256()
        self.offset = 0

    def write(self, chunk: bytes) -> None:
        # Append mode: every write lands at the end, which is always ``offset``.
        self._file.write(chunk)
        self._hasher.update(chunk)
        self.offset += len(chunk)

    def hexdigest(self) -> str:
        return self._hasher.hexdigest()

    def commit(self, dest: Path) -> None:
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        os.replace(self.path, dest)

    def discard(self) -> None:
        self._file.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        self._file.close()


class _Progress:
    """Calls ``callback`` after :data:`PROGRESS_BYTES` new bytes or :data:`PROGRESS_SECONDS`, and at the end.

    The first call and a restart from byte 0 are forced; repeating the same count is skipped.
    """

    def __init__(self, callback: ProgressCallback | None, total: int) -> None:
        self._callback = callback
        self._total = total
        self._last_done = -1
        self._last_time = 0.0

    def __call__(self, done: int, *, force: bool = False) -> None:
        if self._callback is None or done == self._last_done:
            return
        now = time.monotonic()
        if (
            force
            or done == self._total
            or abs(done - self._last_done) >= PROGRESS_BYTES
            or now - self._last_time >= PROGRESS_SECONDS
        ):
            self._last_done = done
            self._last_time = now
            self._callback(done, self._total)


class _Transfer:
    """The attempts of one download; ``use_range`` turns off for good once the server gets Range wrong."""

    def __init__(
        self,
        client: httpx.Client,
        url: str,
        dest: Path,
        part: _Part,
        deadline: Deadline,
        cancelled: CancelCheck | None,
        progress: _Progress,
    ) -> None:
        self._client = client
        self._url = url
        self._dest = dest
        self._part = part
        self._deadline = deadline
        self._cancelled = cancelled
        self._progress = progress
        self.use_range = True
        self.received = 0

    def attempt(self) -> None:
        part = self._part
        self._progress(part.offset, force=True)
        while part.room > 0:
            ranged = part.offset > 0 and self.use_range
            if part.offset > 0 and not ranged:
                self._restart()
            headers = {"Accept-Encoding": "identity"}
            if ranged:
                headers["Range"] = f"bytes={part.offset}-"
            response = open_response(
                self._client,
                "GET",
                self._url,
                redirects=DOWNLOAD_REDIRECTS,
                headers=headers,
                deadline=self._deadline,
                passthrough=(416,) if ranged else (),
            )
            with contextlib.closing(response):
                status = response.status_code
                if status == 416 or (status == 206 and not self._range_matches(response)):
                    if not ranged:
                        raise MemoriesError(
                            "upstream_error",
                            f"{shown_url(self._url)} answered HTTP 206 with Content-Range "
                            f"{response.headers.get('content-range')!r} to a request without Range",
                        )
                    # The server's idea of the range differs from ours: trust neither, fetch it whole.
                    self.use_range = False
                    self._restart()
                    continue
                if status == 200:
                    if part.offset:
                        self._restart()
                    self._check_length(response)
                elif status != 206:
                    raise MemoriesError(
                        "upstream_error", f"{shown_url(self._url)} answered HTTP {status} to a download"
                    )
                self._receive(response)
            return

    def _restart(self) -> None:
        self._part.reset()
        self._progress(0, force=True)

    def _range_matches(self, response: httpx.Response) -> bool:
        match = _CONTENT_RANGE.match(response.headers.get("content-range", ""))
        if not match:
            return False
        start, end, total = match.groups()
        return (
            int(start) == self._part.offset
            and int(start) <= int(end) < self._part.size
            and (total == "*" or int(total) == self._part.size)
        )

    def _check_length(self, response: httpx.Response) -> None:
        length = response.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) != self._part.size:
            raise self._mismatch(f"the server offers {int(length)} bytes, the pinned size is {self._part.size}")

    def _receive(self, response: httpx.Response) -> None:
        part = self._part
        # No chunk size: httpx's re-chunking would drop the bytes it buffered when the connection breaks.
        for chunk in response.iter_raw():
            if len(chunk) > part.room:
                raise self._mismatch(f"the server sent more than the pinned {part.size} bytes")
            part.write(chunk)
            self.received += len(chunk)
            self._progress(part.offset)
            check_cancelled(self._cancelled)
            self._deadline.check()
        if part.room > 0:
            raise TransientFailure(f"the body ended after {part.offset} of {part.size} bytes")

    def _mismatch(self, reason: str) -> MemoriesError:
        self._part.discard()
        return MemoriesError(
            "download_hash_mismatch",
            f"{self._dest.name} from {shown_url(self._url)}: {reason}; the downloaded bytes were discarded",
            {"path": str(self._dest)},
        )


def _source_mismatch(source: Path, reason: str) -> MemoriesError:
    return MemoriesError(
        "model_file_mismatch",
        f"{source} does not match the pinned model file ({reason}); nothing was installed from it",
        {"path": str(source)},
    )

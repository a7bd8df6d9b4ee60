"""``workers.remote``: every outbound HTTP call of the daemon (today: the model download, R-23, R-37 … R-39).

Holds no keys and, for downloads, no vault data. Requests are cancelled between chunks through the worker loop's
cancellation check; each file has its own time budget (``download_timeout_seconds``), not the job budget.
"""

from __future__ import annotations

from pathlib import Path

from memories import worker_protocol as w
from memories.models.install import InstallProgress, install_model
from workers.loop import Context, run_worker


def download_model(request: w.DownloadModel, ctx: Context) -> w.ModelInstalled:
    """Install the manifest's files into ``dest_dir`` with progress in bytes."""

    def progress(event: InstallProgress) -> None:
        ctx.progress(event.bytes_done, event.bytes_total, "bytes")

    report = install_model(
        request.manifest,
        Path(request.dest_dir),
        base_url=request.base_url,
        from_dir=Path(request.from_dir) if request.from_dir else None,
        http_config=request.http,
        progress=progress,
        cancelled=ctx.cancelled,
    )
    return w.ModelInstalled(files=report.files)


if __name__ == "__main__":
    run_worker("remote", {w.DownloadModel: download_model})

"""ONNX Runtime's telemetry switches, in a module light enough for the supervisor to import.

See :mod:`memories.models.local_onnx` for how the installed onnxruntime was checked: its only environment opt-out
is ``ORT_DISABLE_TELEMETRY=1``, read once when onnxruntime is imported. The supervisor puts it in the environment
of ``workers.embedding``, which also sets it itself before anything imports onnxruntime.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

TELEMETRY_ENVIRONMENT: dict[str, str] = {"ORT_DISABLE_TELEMETRY": "1"}
"""The onnxruntime environment opt-out (see the module docstring); it must be set before onnxruntime is imported."""


def disable_telemetry_environment(environ: MutableMapping[str, str] | None = None) -> None:
    """Set onnxruntime's telemetry opt-out in ``environ`` (default ``os.environ``).

    The embedding worker calls this before it imports anything that imports onnxruntime; the supervisor passes
    :data:`TELEMETRY_ENVIRONMENT` in the worker's environment as well, so the variable is there from the start.
    """
    (os.environ if environ is None else environ).update(TELEMETRY_ENVIRONMENT)

"""Process hardening in a fresh interpreter: core dumps off, non-dumpable, owner-only umask."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, os, resource
from memories.hardening import dumpable, harden_process
before = dumpable()
harden_process()
print(json.dumps({"before": before, "after": dumpable(), "core": resource.getrlimit(resource.RLIMIT_CORE),
                  "umask": os.umask(0o077)}))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_DUMPABLE) is Linux only")
def test_harden_process_turns_core_dumps_off(repo_root: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True, cwd=repo_root, timeout=60
    )
    state = json.loads(done.stdout)
    assert state == {"before": True, "after": False, "core": [0, 0], "umask": 0o077}

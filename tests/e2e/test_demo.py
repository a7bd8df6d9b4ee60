"""The README's first command runs ``ops/demo.py``: it must work as written and show real results."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_demo_ingests_the_sample_notes_and_finds_them() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "ops" / "demo.py")], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    out = done.stdout
    assert "311 added" in out
    for expected in (
        "臺灣證號檢核.md",  # Traditional Chinese
        "migrations-zh_TW.md",  # Traditional query over Simplified and Traditional notes
        "rust-book/zh-cn/ch04-01-what-is-ownership.md",  # Simplified, single-character terms
        "git_subtree_turorial_en.md",  # English
        "Elasticsearch Query DSL 查詢語法筆記.md",  # mixed Chinese and code terms
        "chinese-copywriting-guidelines/README.md",  # phrase
    ):
        assert expected in out, expected
    assert re.search(r"\[S1\] \d", out) and "Traceback" not in done.stderr
    home = re.search(r"throwaway home: (\S+)", out)
    assert home and not Path(home.group(1)).exists()  # the throwaway home is gone

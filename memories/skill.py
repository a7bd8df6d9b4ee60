"""The bundled Memories skill (``memories/skills/memories/SKILL.md``) and how ``inject`` installs it.

The skill is Memories' own file only when its front matter says ``name: memories`` and ``source: memories``; a
folder of that name holding anything else is the user's and is never touched. An installed copy that differs
from the bundled one (an older version, or one the user edited) is kept unless ``--force``; with ``--force`` it is
backed up (``SKILL.md.memories-backup``) and replaced.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from typing import Literal

from memories.configfiles import read_config, write_config

SKILL_FILE = "SKILL.md"

SkillStatus = Literal["installed", "updated", "current", "kept", "foreign"]

_NAME = re.compile(r"^name:\s*memories\s*$", re.MULTILINE)
_SOURCE = re.compile(r"^\s+source:\s*memories\s*$", re.MULTILINE)


def bundled_skill() -> str:
    """The text of the skill shipped with this release (UTF-8, LF line ends)."""
    return (resources.files("memories") / "skills" / "memories" / SKILL_FILE).read_text(encoding="utf-8")


def is_ours(text: str) -> bool:
    """The skill is Memories' own (``name: memories`` and ``source: memories`` in its front matter)."""
    front = _front_matter(text)
    return bool(_NAME.search(front) and _SOURCE.search(front))


def _front_matter(text: str) -> str:
    if not text.startswith("---\n"):
        return ""
    end = text.find("\n---", 4)
    return text[4:end] if end >= 0 else ""


def install_skill(folder: str, force: bool) -> tuple[SkillStatus, str | None]:
    """Put the bundled skill at ``folder/SKILL.md``.

    Returns:
        ``(status, backup)``: ``installed`` (there was none), ``current`` (identical), ``kept`` (ours but different,
        without ``force``), ``updated`` (replaced, the old one backed up at ``backup``), ``foreign`` (not ours).

    Raises:
        MemoriesError: ``client_config_invalid`` when the file cannot be read or written.
    """
    path = os.path.join(folder, SKILL_FILE)
    bundled = bundled_skill()
    existing = read_config(path)
    if existing is None:
        write_config(path, bundled, mode=0o644)
        return "installed", None
    if existing == bundled:
        return "current", None
    if not is_ours(existing):
        return "foreign", None
    if not force:
        return "kept", None
    return "updated", write_config(path, bundled, mode=0o644)

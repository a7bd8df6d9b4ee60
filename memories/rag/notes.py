"""What a Markdown note says about itself: its first heading (the card's title) and its front-matter tags.

Light (regular expressions and PyYAML), so the ingest job, the benchmarks and the tests read notes the same way.

>>> first_heading("---\\ntitle: x\\n---\\n```\\n# not this\\n```\\n## Ownership rules\\n")
'Ownership rules'
>>> front_matter_tags("---\\ntags: [rust, 所有權]\\n---\\nbody")
['rust', '所有權']
"""

from __future__ import annotations

import re

import yaml

_HEADING = re.compile(r"^ {0,3}#{1,6}[ \t]+(.+?)(?:[ \t]+#+)?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)


def first_heading(text: str) -> str | None:
    """The text of the first ATX Markdown heading outside front matter and fenced code, or ``None``."""
    match = _FRONT_MATTER.match(text)
    lines = text[match.end() if match else 0 :].splitlines()
    fence: str | None = None
    for line in lines:
        marker = _FENCE.match(line)
        if marker:
            fence = None if fence == marker.group(1) else (fence or marker.group(1))
            continue
        if fence is None:
            heading = _HEADING.match(line)
            if heading and heading.group(1).strip():
                return heading.group(1).strip()
    return None


def front_matter_tags(text: str) -> list[str]:
    """``tags`` of YAML front matter (a list or a comma-separated string); ``[]`` when absent or malformed."""
    match = _FRONT_MATTER.match(text)
    if not match:
        return []
    try:
        data = yaml.safe_load(match.group(1))
    except yaml.YAMLError:
        return []
    tags = data.get("tags") if isinstance(data, dict) else None
    if isinstance(tags, str):
        return [tag.strip() for tag in tags.split(",") if tag.strip()]
    if isinstance(tags, list):
        return [str(t).strip() for t in tags if t is not None and str(t).strip() and "," not in str(t)]
    return []

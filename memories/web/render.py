"""How the web app writes HTML: jinja2 templates (autoescaped: every note string is data), Markdown rendered by
markdown-it-py with raw HTML off and cleaned by nh3, and the query's words marked in a snippet.

>>> print(markdown("[x](javascript:alert(1)) <b>hi</b> ![pic](http://example.com/a.png) [ok](https://a.b)"))
<p>[x](javascript:alert(1)) &lt;b&gt;hi&lt;/b&gt; pic <a href="https://a.b" rel="noopener noreferrer">ok</a></p>
>>> marked("abc 中文 def", [(4, 6)])
[('abc ', False), ('中文', True), (' def', False)]
"""

from __future__ import annotations

import datetime
import html
from typing import Any

import jinja2
import nh3
from markdown_it import MarkdownIt

from memories.web.text import LANGUAGES, NAMES, text

TAGS = set(nh3.ALLOWED_TAGS) - {"img", "map", "area"}
"""The tags a rendered note may keep: nh3's defaults without images (never fetched) and image maps."""

URL_SCHEMES = {"http", "https", "mailto"}
"""The link schemes a rendered note may keep."""

_MARKDOWN = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table").enable("strikethrough")


def _image_as_text(renderer: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    return html.escape(tokens[idx].content)  # an image is shown as its alt text, never fetched


_MARKDOWN.add_render_rule("image", _image_as_text)


def markdown(source: str) -> str:
    """``source`` (a note's Markdown) as safe HTML: raw HTML shown as text, images as their alt text, links only
    http(s)/mailto with ``rel="noopener noreferrer"``, everything else nh3 does not allow removed."""
    rendered = _MARKDOWN.render(source)
    return nh3.clean(rendered, tags=TAGS, url_schemes=URL_SCHEMES, link_rel="noopener noreferrer").strip()


def marked(snippet: str, spans: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``snippet`` cut into pieces, each with whether it is a query word (``spans``: code point offsets, half-open,
    as the daemon's ``highlights`` give them)."""
    pieces: list[tuple[str, bool]] = []
    at = 0
    for start, end in sorted(spans):
        if start < at or end <= start:
            continue
        if start > at:
            pieces.append((snippet[at:start], False))
        pieces.append((snippet[start:end], True))
        at = end
    if at < len(snippet):
        pieces.append((snippet[at:], False))
    return pieces


def _date(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")


ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("memories.web", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
ENVIRONMENT.filters["date"] = _date
ENVIRONMENT.globals.update(languages=LANGUAGES, language_names=NAMES)


def page(template: str, language: str, **values: Any) -> str:
    """The template ``template`` rendered in ``language`` (``t(key)`` gives the UI text)."""
    return ENVIRONMENT.get_template(template).render(lang=language, t=lambda key: text(language, key), **values)

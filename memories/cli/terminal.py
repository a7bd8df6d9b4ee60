"""The one escaping rule for what the CLI prints in text mode: nothing a note, a sync peer or a file name holds can
drive the terminal.

Text from the daemon (ids, titles, metadata keys and values, bodies, citations, file names, error messages) may
hold what a terminal obeys rather than shows: C0 controls (ESC starts CSI sequences that clear the screen and OSC
52 sequences that set the clipboard), DEL, C1 controls (U+009B is a one-character CSI on some terminals), and the
bidirectional embeddings, overrides and isolates U+202A–U+202E and U+2066–U+2069 that reorder what is shown
(CVE-2021-42574, "Trojan Source"), and the marks U+200E, U+200F and U+061C (left-to-right, right-to-left and Arabic
letter marks), which move neutral characters such as ``.`` and ``/`` across a name. :func:`escape` shows each as
``\\xNN`` or ``\\uNNNN``; so are U+2028/U+2029 (line and paragraph separators) and lone surrogates, which are not
text. Every other character, spaces of every script included (U+3000 indents Chinese paragraphs), is shown as it
is. ``--json`` output needs none of this: JSON escapes control characters itself.

:func:`escape_document` applies the rule to every string of a reply (a result struct or a document the CLI built; keys
too: a metadata key is the peer's text); :meth:`memories.cli.output.Session.emit` calls it before any text renderer
(:mod:`memories.cli.render`) sees the reply, so a renderer cannot forget a field.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, TypeVar

import msgspec

D = TypeVar("D")

_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c")
_LINE_BREAKS = "\n\t"


def _escaped(char: str, lines: bool) -> bool:
    code = ord(char)
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return not (lines and char in _LINE_BREAKS)
    return char in _BIDI_CONTROLS or code in (0x2028, 0x2029) or 0xD800 <= code <= 0xDFFF


def escape(text: str, *, lines: bool = False) -> str:
    """``text`` safe to print on a terminal: every C0 control (U+0000–U+001F), DEL and C1 control
    (U+007F–U+009F), bidirectional control (U+202A–U+202E, U+2066–U+2069, U+200E, U+200F, U+061C), U+2028, U+2029
    and lone surrogate becomes ``\\xNN`` (below U+0100) or ``\\uNNNN``. With ``lines`` (a body, an answer: text
    with paragraphs), newline and tab stay; otherwise they are escaped too (``evil\\x0aname.md``), since a name or
    title shown on two lines could fake a line of output.

    >>> escape("a\\x1b]52;c;cm0=\\x07b \\u202etxt 数据库")
    'a\\\\x1b]52;c;cm0=\\\\x07b \\\\u202etxt 数据库'
    >>> escape("one\\ntwo\\tthree", lines=True), escape("one\\ntwo")
    ('one\\ntwo\\tthree', 'one\\\\x0atwo')
    """
    if text.isascii() and text.isprintable():
        return text
    return "".join(
        (f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}") if _escaped(char, lines) else char
        for char in text
    )


def escape_document(document: D, lines: Collection[str] = ()) -> D:
    """A copy of a reply (a result struct, or JSON-like data: dicts, lists, strings, numbers) with every string,
    dict keys included, passed through :func:`escape`; the values of fields or keys named in ``lines`` (``"body"``,
    ``"answer"``, ``"text"``) keep their newlines and tabs."""
    escaped: Any = _escaped_value(document, lines)
    return escaped


def _escaped_value(document: Any, lines: Collection[str]) -> Any:
    if isinstance(document, str):
        return escape(document)
    if isinstance(document, msgspec.Struct):
        changes = {}
        for name in document.__struct_fields__:
            value = getattr(document, name)
            new = (
                escape(value, lines=True) if name in lines and isinstance(value, str) else _escaped_value(value, lines)
            )
            if new is not value:
                changes[name] = new
        return msgspec.structs.replace(document, **changes) if changes else document
    if isinstance(document, dict):
        return {
            escape(key) if isinstance(key, str) else key: (
                escape(value, lines=True) if key in lines and isinstance(value, str) else _escaped_value(value, lines)
            )
            for key, value in document.items()
        }
    if isinstance(document, list):
        return [_escaped_value(item, lines) for item in document]
    if isinstance(document, tuple):
        return tuple(_escaped_value(item, lines) for item in document)
    return document

"""What ``config.toml`` checks of a model URL per wire format, at daemon start (R-29): a Gemini URL names its
operation, since the API's model and method are in the path (``.../models/<model>:embedContent``).

Kept apart from the providers themselves so that :mod:`memories.config`, which the CLI imports, loads no httpx or
numpy (and so that the config does not import the HTTP layer that imports it).
"""

from __future__ import annotations

OPERATIONS: dict[str, tuple[str, dict[str, tuple[str, ...]]]] = {
    "gemini": ("Gemini", {"embedding": (":embedContent", ":batchEmbedContents"), "generation": (":generateContent",)}),
}
"""Wire format → its name and, per ``[rag.<table>]``, the endings the URL path must have (Gemini API reference:
``models.*`` methods). A wire format or table not listed has no rule."""


def operation_problem(protocol: str, table: str, path: str) -> str | None:
    """Why a URL ``path`` does not suit ``[rag.<table>] protocol``, or ``None``.

    >>> operation_problem("gemini", "generation", "/v1beta/models/m")
    'a Gemini URL names its operation (ends with :generateContent)'
    >>> operation_problem("compatible", "generation", "/v1/chat/completions") is None
    True
    """
    name, tables = OPERATIONS.get(protocol, ("", {}))
    endings = tables.get(table)
    if endings is None or path.endswith(endings):
        return None
    return f"a {name} URL names its operation (ends with {' or '.join(endings)})"

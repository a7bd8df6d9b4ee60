"""The search filters as options (``--since``, ``--until``, ``--tag``, ``--kind``, ``--source``, ``--meta``), the
same on ``rag search``, ``rag explain``, ``rag ask``, ``memory search`` and ``memory list``. The daemon reads and
checks the values (``invalid_argument`` naming the filter); the client only splits ``--meta`` pairs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

FILTER_HELP = {
    "since": "Only notes dated at or after: an ISO 8601 date or time (local time), or 30m, 12h, 7d, 2w ago.",
    "until": "Only notes dated at or before (a date includes that whole day); as for --since.",
    "tag": "Only notes with this tag (repeatable: every tag required; # and case do not matter; project/alpha counts "
    "for project).",
    "kind": "Only memories, or only knowledge cards (--cards-only is --kind card).",
    "source": "Only notes whose source path matches this glob (daily/**, **/*.md; a name alone at any depth).",
    "meta": "Only notes whose metadata KEY is exactly VALUE (repeatable).",
}


def filter_options(kind: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the filter options to a command (``kind=False`` where the command has a ``--kind`` of its own); the
    command gets them as ``since``, ``until``, ``tag``, ``kind``, ``source``, ``meta`` and passes
    :func:`filter_fields` of them on."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--meta", "meta", multiple=True, metavar="KEY=VALUE", help=FILTER_HELP["meta"])(fn)
        fn = click.option("--source", metavar="GLOB", help=FILTER_HELP["source"])(fn)
        if kind:
            fn = click.option("--kind", type=click.Choice(["memory", "card"]), help=FILTER_HELP["kind"])(fn)
        fn = click.option("--tag", "tag", multiple=True, metavar="TAG", help=FILTER_HELP["tag"])(fn)
        fn = click.option("--until", metavar="WHEN", help=FILTER_HELP["until"])(fn)
        return click.option("--since", metavar="WHEN", help=FILTER_HELP["since"])(fn)

    return decorate


def filter_fields(
    since: str | None, until: str | None, tag: tuple[str, ...], source: str | None, meta: tuple[str, ...]
) -> dict[str, Any]:
    """The request fields of the filter options (``kind`` is passed on by the command itself)."""
    return {"since": since, "until": until, "tags": list(tag), "source": source, "meta": meta_pairs(meta)}


def meta_pairs(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--meta KEY=VALUE`` options as a dict (a later key wins), for the filter and for ``memory add``/``update``.

    Raises:
        click.BadParameter: a pair without ``=`` or with an empty key.
    """
    meta = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--meta")
        meta[key] = value
    return meta

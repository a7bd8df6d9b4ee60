"""No service inside the daemon takes a client's wire request (issue 27 item 2): a request type of
:mod:`memories.protocol` may be a parameter only of the request's handler (a function named in a ``{p.Request:
handler}`` table, a ``handlers()`` method that builds one, and the private helpers of a handler's module) or of the
functions that turn a request into the daemon's own terms. What one part of the daemon calls in another (a public
function or method) takes the daemon's terms: searches take a :class:`memories.daemon.search.spec.SearchSpec`."""

from __future__ import annotations

import ast
from pathlib import Path

from memories import protocol as p

DAEMON = Path(__file__).resolve().parents[2] / "memories" / "daemon"

TRANSLATORS = {"memories/daemon/search/spec.py:of", "memories/daemon/core/filters.py:search_filter"}
"""Functions whose job is to read a request: the search spec and the filter parser."""


def _client_request(name: str) -> bool:
    found = getattr(p, name, None)
    return isinstance(found, type) and issubclass(found, p.ClientRequest)


def _handlers(tree: ast.AST) -> set[str]:
    """Methods named as values of a dict whose keys are ``p.X`` (the handler tables)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Attribute) and isinstance(value, ast.Attribute):
                    names.add(value.attr)
                elif isinstance(key, ast.Attribute) and isinstance(value, ast.Name):
                    names.add(value.id)
    return names


def test_no_daemon_service_takes_a_client_request() -> None:
    offenders = []
    for path in sorted(DAEMON.rglob("*.py")):
        tree = ast.parse(path.read_text())
        handlers = _handlers(tree)
        relative = path.relative_to(DAEMON.parents[1]).as_posix()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            private = node.name.startswith("_")
            if private or node.name in handlers or node.name == "handlers" or f"{relative}:{node.name}" in TRANSLATORS:
                continue
            for argument in [*node.args.args, *node.args.kwonlyargs]:
                annotation = argument.annotation
                named = {n.attr for n in ast.walk(annotation) if isinstance(n, ast.Attribute)} if annotation else set()
                if any(_client_request(name) for name in named):
                    offenders.append(f"{relative}:{node.name}({argument.arg})")
    assert offenders == []

"""The package layout's rules, read from the source (``docs/architecture.md``, "Packages and their imports").

- ``memories.vault`` (the record store) imports neither the daemon, sync, nor either protocol: it is below them.
- ``memories.sync`` never imports ``memories.daemon``: it depends on the record store only.
- ``memories.providers`` (the model services' wire formats) imports neither the daemon, the workers, sync nor the
  record store: it is below the daemon and the remote worker, which choose a provider through it.
- The daemon's wings (``memories/daemon/__init__.py``): ``core`` imports no other part of the daemon; ``index``
  only ``core``; ``search`` and ``ingest`` never import each other or ``grants``; no wing imports a module of the
  daemon's top level (``supervisor``, ``server``, …), and that top level has at most ten modules.
- No module of ``memories`` or ``workers`` takes part in an import cycle (lazy imports inside functions count).
- No file of ``memories`` is over 600 lines (the two protocol catalogues aside) and no class over 300 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("memories", "workers")
CATALOGUES = {"memories/protocol.py", "memories/worker_protocol.py"}
MAX_FILE_LINES = 600
MAX_CLASS_LINES = 300


def _modules() -> dict[str, Path]:
    """Module name -> source file, for every module of the two packages."""
    found = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            parts = path.relative_to(REPO).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports, anywhere in its source (a package import counts as its ``__init__``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {target for target in targets if target in MODULES and target != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _offenders(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if name == package or name.startswith(package + ".")
        for target in targets
        if any(target == f or target.startswith(f + ".") for f in forbidden)
    )


def test_the_record_store_imports_neither_the_daemon_sync_nor_a_protocol() -> None:
    forbidden = ("memories.daemon", "memories.sync", "memories.protocol", "memories.worker_protocol")
    assert _offenders("memories.vault", forbidden) == []


def test_sync_never_imports_the_daemon() -> None:
    assert _offenders("memories.sync", ("memories.daemon",)) == []


def test_providers_import_neither_the_daemon_the_workers_sync_nor_the_record_store() -> None:
    forbidden = ("memories.daemon", "workers", "memories.sync", "memories.vault")
    assert _offenders("memories.providers", forbidden) == []


DAEMON = "memories.daemon"
WINGS = ("core", "index", "search", "ingest", "grants")


def _wing(name: str) -> str | None:
    """The wing of a daemon module (``memories.daemon.index.feed`` and ``memories.daemon.index`` -> ``index``), or
    ``None`` at the top level."""
    parts = name.split(".")
    return parts[2] if len(parts) >= 3 and parts[2] in WINGS else None


def _daemon_offenders(wing: str, allowed: set[str]) -> list[str]:
    """Imports of the daemon's modules by ``wing``'s modules that land outside ``wing`` and ``allowed`` wings."""
    return sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if name.startswith(f"{DAEMON}.{wing}.")
        for target in targets
        if target.startswith(DAEMON + ".") and _wing(target) not in {wing, *allowed}
    )


def test_the_daemon_core_imports_no_other_wing() -> None:
    assert _daemon_offenders("core", set()) == []


def test_the_daemon_index_imports_only_the_core() -> None:
    assert _daemon_offenders("index", {"core"}) == []


def test_search_and_ingest_never_import_each_other_or_grants() -> None:
    assert _daemon_offenders("search", {"core", "index"}) == []
    assert _daemon_offenders("ingest", {"core", "index"}) == []


def test_no_wing_imports_the_daemon_top_level_and_the_top_level_is_small() -> None:
    """A wing's import of a top-level module (``_wing`` is ``None``) is an arrow back up."""
    upward = sorted(
        f"{name} imports {target}"
        for name, targets in GRAPH.items()
        if _wing(name) is not None
        for target in targets
        if target.startswith(DAEMON + ".") and _wing(target) is None
    )
    top = sorted(name for name in MODULES if name.startswith(DAEMON + ".") and name.count(".") == 2)
    assert upward == []
    assert len([name for name in top if _wing(name) is None]) <= 10, top


def test_no_module_takes_part_in_an_import_cycle() -> None:
    """Tarjan's strongly connected components: every one must be a single module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for target in sorted(GRAPH[name]):
            if target not in index:
                visit(target)
                low[name] = min(low[name], low[target])
            elif target in on_stack:
                low[name] = min(low[name], index[target])
        if low[name] == index[name]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == name:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(GRAPH):
        if name not in index:
            visit(name)
    assert cycles == []


def test_no_file_over_600_lines_and_no_class_over_300() -> None:
    long_files, long_classes = [], []
    for path in MODULES.values():
        relative = path.relative_to(REPO).as_posix()
        if not relative.startswith("memories/"):
            continue
        text = path.read_text(encoding="utf-8")
        if relative not in CATALOGUES and len(text.splitlines()) > MAX_FILE_LINES:
            long_files.append(relative)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES:
                long_classes.append(f"{relative}:{node.name}")
    assert (long_files, long_classes) == ([], [])


def test_the_stored_kinds_and_sensitivities_are_the_wires() -> None:
    """The record store and the client protocol define them apart (neither imports the other); they must agree."""
    from typing import get_args

    from memories import protocol as p
    from memories.vault import views

    assert get_args(views.RecordKind) == get_args(p.RecordKind)
    assert get_args(views.Sensitivity) == get_args(p.Sensitivity)
    assert set(get_args(views.CardStatus)) <= set(get_args(p.IngestStatus))

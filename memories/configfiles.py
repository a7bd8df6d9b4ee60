"""Merging one MCP server entry into an AI client's own config file, keeping everything else as it was.

A client's config is the user's file: other servers, other keys, comments and formatting stay; only the entry named
``name`` under the client's server table is added or replaced, and exactly one such entry remains.

- JSON and JSONC (``json-five``'s round-trip model: comments, whitespace and trailing commas are kept; a strict
  JSON file is checked with :mod:`json` first so it stays strict JSON).
- TOML (``tomlkit``, which keeps comments and layout), for Codex's ``config.toml``.
- Writes are atomic (a temporary file in the same folder, fsync, rename), after a backup of the previous content,
  mode 0600: the first write keeps the user's original as ``<file>.memories-backup``, which later writes never
  replace; each later one keeps what it replaced as ``<file>.memories-previous``. The result is mode 0600 because
  the entry holds a grant token. A
  symbolic link is written through: the file it points at is replaced, the link stays a link.
- A file that does not parse is left untouched: :class:`~memories.errors.MemoriesError` ``client_config_invalid``
  names the file and the line.

>>> text = '{"mcpServers": {"other": {"command": "x"}}}'
>>> merge_json(text, "f.json", "mcpServers", "memories", {"command": "m"}, strict=True)
'{"mcpServers": {"other": {"command": "x"}, "memories": {"command": "m"}}}'
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import Any

from memories.errors import MemoriesError

BACKUP_SUFFIX = ".memories-backup"
"""The user's original, from before Memories first changed the file; written once, never replaced."""
PREVIOUS_SUFFIX = ".memories-previous"
"""What the latest write replaced, when the original is already kept."""
SECRET_MODE = 0o600


def read_config(path: str) -> str | None:
    """The UTF-8 text of ``path`` (through a symbolic link), or ``None`` when there is no such file.

    Opened without blocking, so a FIFO in the config's place is refused instead of waiting for a writer.

    Raises:
        MemoriesError: ``client_config_invalid`` when it is not a regular file or not UTF-8 text.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        with os.fdopen(descriptor, "rb") as handle:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                raise MemoriesError("client_config_invalid", f"{path} is not a regular file; left it unchanged")
            data = handle.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise MemoriesError("client_config_invalid", f"cannot read {path}: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise _unparsable(path, line, "not UTF-8 text") from None


def write_config(path: str, text: str, mode: int = SECRET_MODE) -> str | None:
    """Replace the file at ``path`` (the target of a symbolic link) with ``text``, atomically, with ``mode``
    (0600 by default: a config entry holds a grant token).

    Returns:
        The backup's path when there was a previous file (``<file>.memories-backup`` when it is the first one, which
        stays the user's original; ``<file>.memories-previous`` after that), else ``None``.

    Raises:
        MemoriesError: ``client_config_invalid`` when the folder cannot be created or written.
    """
    target = os.path.realpath(path)
    folder = os.path.dirname(target)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        backup = None
        if os.path.exists(target):
            backup = target + BACKUP_SUFFIX
            if os.path.lexists(backup):
                backup = target + PREVIOUS_SUFFIX
            with open(target, "rb") as source:
                _write_atomic(backup, source.read(), SECRET_MODE)
        _write_atomic(target, text.encode("utf-8"), mode)
    except OSError as exc:
        raise MemoriesError("client_config_invalid", f"cannot write {target}: {exc.strerror}") from None
    return backup


def _write_atomic(target: str, data: bytes, mode: int) -> None:
    folder = os.path.dirname(target)
    fd, temporary = tempfile.mkstemp(dir=folder, prefix=f".{os.path.basename(target)}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _unparsable(path: str, line: int, reason: str) -> MemoriesError:
    return MemoriesError(
        "client_config_invalid",
        f"{path}: line {line}: {reason}; the file was left unchanged (fix it, then run the command again)",
        {"path": path, "line": line},
    )


# -- JSON and JSONC ---------------------------------------------------------------------------------------------


def json_entry(text: str | None, path: str, container: str, name: str, *, strict: bool) -> Any:
    """The current value of ``{container: {name: ...}}`` in a JSON(C) text, or ``None``.

    Raises:
        MemoriesError: ``client_config_invalid`` (with the line) when the text does not parse or the container is
            not an object.
    """
    if text is None or not text.strip():
        return None
    from json5.dumper import ModelDumper, dumps
    from json5.loader import loads

    with _nesting_guard(path):
        root = _json_root(text, path, strict=strict)
        servers = _member(root, container)
        if servers is None:
            return None
        _require_object(servers, path, container)
        value = _member(servers, name)
        # json-five's round-trip dumper for models; its dumps() annotation only names BaseDumper
        return None if value is None else loads(dumps(value, dumper=ModelDumper()))  # type: ignore[arg-type]


def merge_json(text: str | None, path: str, container: str, name: str, entry: dict[str, Any], *, strict: bool) -> str:
    """``text`` with ``entry`` as the one member ``name`` of the object ``container`` (created when missing).

    Everything else — other members, comments, whitespace — is kept byte for byte.

    Raises:
        MemoriesError: ``client_config_invalid`` (with the line) when the text does not parse, or the top level or
            ``container`` is not an object.
    """
    if text is None or not text.strip():
        return json.dumps({container: {name: entry}}, indent=2, ensure_ascii=False) + "\n"
    from json5.dumper import ModelDumper, dumps

    with _nesting_guard(path):
        model = _json_model(text, path, strict=strict)
        root = model.value
        _require_object(root, path, "the top level")
        servers = _member(root, container)
        if servers is None:
            _set_member(root, container, {name: entry}, depth=0)
        else:
            _require_object(servers, path, container)
            _set_member(servers, name, entry, depth=1)
        # json-five's round-trip dumper for models; its dumps() annotation only names BaseDumper
        return dumps(model, dumper=ModelDumper())  # type: ignore[arg-type]


@contextlib.contextmanager
def _nesting_guard(path: str) -> Iterator[None]:
    """Parsing, walking and writing a JSON(C) model recurse once per level: a file nested deeper than Python's
    recursion limit (valid JSON or not) is one we cannot edit, so it is refused and left untouched."""
    try:
        yield
    except RecursionError:
        raise _unparsable(path, 1, "nested too deeply for the JSON parser") from None


def _json_model(text: str, path: str, *, strict: bool) -> Any:
    from json5.loader import ModelLoader, loads
    from json5.utils import JSON5DecodeError

    if strict:
        try:
            json.loads(text)
        except json.JSONDecodeError as exc:
            raise _unparsable(path, exc.lineno, f"not valid JSON ({exc.msg})") from None
    try:
        return loads(text, loader=ModelLoader())
    except JSON5DecodeError as exc:
        raise _unparsable(path, getattr(exc, "lineno", 0) or 1, "not valid JSON with comments") from None
    except ValueError as exc:  # the parser reports some malformed input this way
        raise _unparsable(path, 1, f"not valid JSON with comments ({type(exc).__name__})") from None


def _json_root(text: str, path: str, *, strict: bool) -> Any:
    root = _json_model(text, path, strict=strict).value
    _require_object(root, path, "the top level")
    return root


def _require_object(node: Any, path: str, what: str) -> None:
    from json5.model import JSONObject

    if not isinstance(node, JSONObject):
        line = getattr(node, "lineno", None) or 1
        raise _unparsable(path, line, f"{what} is not a JSON object")


def _key_name(key: Any) -> str:
    return key.characters if hasattr(key, "characters") else key.name


def _member(obj: Any, name: str) -> Any:
    for key, value in zip(obj.keys, obj.values, strict=True):
        if _key_name(key) == name:
            return value
    return None


def _set_member(obj: Any, name: str, value: Any, depth: int) -> None:
    """Replace the first member ``name`` of ``obj`` (dropping any duplicates), else append it after the others.

    A new member is indented like the object's first member (else two spaces a level; on one line in a file that
    is all on one line). A comment on the last member's line stays on that line, after the comma; the whitespace
    before the closing brace moves behind the new member, so the brace keeps its place.
    """
    from json5.loader import ModelLoader, loads

    indent = _member_indent(obj, depth)
    if indent is None:
        body = json.dumps(value, ensure_ascii=False)
    else:
        body = json.dumps(value, indent="\t" if "\t" in indent else 2, ensure_ascii=False).replace("\n", "\n" + indent)
    node = loads(body, loader=ModelLoader()).value
    positions = [i for i, key in enumerate(obj.keys) if _key_name(key) == name]
    if positions:
        first = positions[0]
        old = obj.values[first]
        node.wsc_before, node.wsc_after = old.wsc_before or [" "], old.wsc_after
        obj.values[first] = node
        for extra in reversed(positions[1:]):
            del obj.keys[extra], obj.values[extra]
        return
    key = loads(json.dumps(name, ensure_ascii=False), loader=ModelLoader()).value
    node.wsc_before = [" "]
    lead = " " if indent is None else "\n" + indent
    if obj.values:
        last = obj.values[-1]
        tail = last.wsc_after
        breaks = [i for i, item in enumerate(tail) if isinstance(item, str) and "\n" in item]
        if breaks:
            key.wsc_before = [*tail[: breaks[-1]], lead]
            node.wsc_after = tail[breaks[-1] :]
        else:
            key.wsc_before = [*tail, lead] if tail else [lead]
        last.wsc_after = []
    else:
        key.wsc_before = [lead]
        if indent is not None:
            node.wsc_after = ["\n" + indent[: len(indent) - len(_unit(indent, depth))]]
        if all(isinstance(item, str) and not item.strip() for item in obj.leading_wsc):
            obj.leading_wsc = []
    obj.keys.append(key)
    obj.values.append(node)


def _member_indent(obj: Any, depth: int) -> str | None:
    """The indentation of the object's members; ``None`` when the object is on one line with its members."""
    if obj.keys:
        spacing = [*obj.leading_wsc, *obj.keys[0].wsc_before]
        for item in reversed(spacing):
            if isinstance(item, str) and "\n" in item:
                tail = item.rsplit("\n", 1)[1]
                return tail if not tail.strip() else "  " * (depth + 1)
        return None
    return "  " * (depth + 1)


def _unit(indent: str, depth: int) -> str:
    levels = depth + 1
    if indent and len(indent) % levels == 0:
        return indent[: len(indent) // levels]
    return "  "


# -- TOML -----------------------------------------------------------------------------------------------------


def toml_entry(text: str | None, path: str, table: str, name: str) -> Any:
    """The current value of ``[table.name]`` in a TOML text, or ``None``.

    Raises:
        MemoriesError: ``client_config_invalid`` (with the line) when the text does not parse.
    """
    if text is None:
        return None
    document = _toml_document(text, path)
    servers = document.get(table)
    if servers is None or not hasattr(servers, "get"):
        return None
    value = servers.get(name)
    return value.unwrap() if hasattr(value, "unwrap") else value


def merge_toml(text: str | None, path: str, table: str, name: str, entry: dict[str, Any]) -> str:
    """``text`` with ``[table.name]`` set to ``entry`` (nested dicts become sub-tables); comments and the other
    tables are kept.

    Raises:
        MemoriesError: ``client_config_invalid`` (with the line) when the text does not parse or ``table`` is not
            a table.
    """
    import tomlkit

    document = _toml_document(text or "", path)
    servers = document.get(table)
    if servers is None:
        servers = tomlkit.table(is_super_table=True)
        document[table] = servers
    elif not isinstance(servers, dict):
        raise _unparsable(path, 1, f"{table} is not a table")
    servers[name] = _toml_table(entry)
    keys = list(document.keys())
    if keys.index(table) < len(keys) - 1 and not servers[name].as_string().endswith("\n\n"):
        # tomlkit ends a new table with its last line: without a blank line the user's next table would follow it
        # directly (``[profiles.work]`` on the line after the entry's last key).
        _last_table(servers[name]).add(tomlkit.nl())
    return tomlkit.dumps(document)


def _last_table(table: Any) -> Any:
    """The table written last of ``table`` and its sub-tables (the one the next table's header follows)."""
    import tomlkit.items

    subtables = [value for value in table.values() if isinstance(value, tomlkit.items.Table)]
    return _last_table(subtables[-1]) if subtables else table


def _toml_table(entry: dict[str, Any]) -> Any:
    import tomlkit

    table = tomlkit.table()
    for key, value in entry.items():
        table[key] = _toml_table(value) if isinstance(value, dict) else value
    return table


def _toml_document(text: str, path: str) -> Any:
    import tomlkit
    from tomlkit.exceptions import ParseError

    try:
        return tomlkit.parse(text)
    except ParseError as exc:
        raise _unparsable(path, exc.line, "not valid TOML") from None

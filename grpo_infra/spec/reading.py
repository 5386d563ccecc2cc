"""Reading a stack file's YAML within bounds, before anything is built from it.

A stack file is untrusted input: a platform team reviews stack files from many contributors, and
`check` runs on them before anyone has. So the reader bounds what it reads before PyYAML builds a
single Python object: the file's size, the nesting depth, and the YAML features a stack file has no
use for and that make a small file expand into a huge or cyclic value (anchors and aliases, merge
keys, complex keys, explicit tags). Every refusal is a `StackFileRefusal` with a line, a column and,
where there is one, the field path, so the loader can say it in one line.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
import yaml.cyaml

from .strings import shown

# Far above any real stack file (the shipped ones are about 5 KB); small enough to read at once.
MAX_FILE_BYTES = 1024 * 1024
# The shipped image locks are under 0.5 MiB (the hashes of a few hundred wheels).
MAX_LOCK_BYTES = 16 * 1024 * 1024
# The deepest real path (config, environment, job, overrides, key, list, value) is about 8 levels.
MAX_DEPTH = 32
# Explicit tags a stack file may carry: those of plain YAML values. `!!binary`, `!!set`, `!!omap`,
# `!!python/...` and local `!tags` build values no field of the spec takes.
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map"))
# The characters YAML refuses anywhere in a stream (PyYAML reports them with a character offset only).
_NOT_YAML = yaml.reader.Reader.NON_PRINTABLE
_MERGE_KEY = "<<"


class StackFileRefusal(Exception):
    """A stack file the reader will not build: where (1-based line and column, field path) and why."""

    def __init__(self, reason: str, line: int | None = None, column: int | None = None, path: str = "") -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.path = path
        super().__init__(self.render())

    def render(self) -> str:
        where = f"line {self.line}, column {self.column}: " if self.line is not None else ""
        field = f"{self.path}: " if self.path else ""
        return f"{where}{field}{self.reason}"


def read_document(path: Path) -> Any:
    """The stack file's YAML document as plain Python values; StackFileRefusal for anything out of bounds."""
    data = _bounded_bytes(path)
    text = _utf8(data)
    _refuse_unprintable(text)
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        reason = " ".join(str(exc.problem or exc).split())
        raise StackFileRefusal(f"YAML does not parse: {where}{reason}") from None
    except yaml.YAMLError as exc:
        raise StackFileRefusal(f"YAML does not parse: {' '.join(str(exc).split())}") from None
    finally:
        loader.dispose()


def _bounded_bytes(path: Path, limit: int = MAX_FILE_BYTES, what: str = "a stack file is a few KiB of YAML") -> bytes:
    """At most `limit` bytes of the file: a larger one (or an endless device) is refused, never read whole."""
    with path.open("rb") as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise StackFileRefusal(f"larger than {limit // 1024} KiB; {what}")
    return data


def read_lock(path: Path) -> str:
    """An image lock's text, read with a bound: it is a file of the stack, as untrusted as the stack file."""
    text = _utf8(_bounded_bytes(path, MAX_LOCK_BYTES, "an image lock is a few hundred KiB of hashes"))
    _refuse_unprintable(text)
    return text


def _utf8(data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line, column = _line_column(data[: exc.start].decode("utf-8", errors="replace"))
        raise StackFileRefusal(f"not UTF-8 text (byte 0x{data[exc.start]:02x})", line, column) from None


def _refuse_unprintable(text: str) -> None:
    """NUL and other control characters (a binary file) are named with their line and column."""
    found = _NOT_YAML.search(text)
    if found is not None:
        line, column = _line_column(text[: found.start()])
        raise StackFileRefusal(
            f"control character {shown(found.group())} is not allowed in a stack file (is it a binary file?)",
            line,
            column,
        )


def _line_column(before: str) -> tuple[int, int]:
    """1-based line and column of the character after `before`."""
    lines = re.split(r"\r\n|\r|\n", before)
    return len(lines), len(lines[-1]) + 1


def _at(mark: yaml.Mark | None, reason: str, path: str = "") -> StackFileRefusal:
    if mark is None:
        return StackFileRefusal(reason, path=path)
    return StackFileRefusal(reason, mark.line + 1, mark.column + 1, path)


class _EventSource(yaml.cyaml.CParser if yaml.__with_libyaml__ else yaml.SafeLoader):  # type: ignore[misc]
    """YAML events from libyaml when PyYAML has it (several times faster), else from PyYAML's own parser."""


class _BoundedLoader(_EventSource, yaml.composer.Composer, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):
    """A safe loader that composes only plain trees: bounded depth, scalar keys, no aliases.

    The bounds are checked while composing nodes, before any Python value exists, so neither an alias
    bomb nor a recursive alias nor a deep nest ever reaches the constructor or a recursive walk. The
    composition is PyYAML's Python one even over libyaml's events: libyaml's own composer has no hook.
    """

    get_single_node = yaml.composer.Composer.get_single_node
    compose_document = yaml.composer.Composer.compose_document
    compose_scalar_node = yaml.composer.Composer.compose_scalar_node
    compose_sequence_node = yaml.composer.Composer.compose_sequence_node
    compose_mapping_node = yaml.composer.Composer.compose_mapping_node

    def __init__(self, stream: str) -> None:
        _EventSource.__init__(self, stream)
        yaml.composer.Composer.__init__(self)
        yaml.constructor.SafeConstructor.__init__(self)
        yaml.resolver.Resolver.__init__(self)
        self._path: list[str] = []

    def field_path(self) -> str:
        """The dotted path of the node being composed, as the spec's messages spell field paths."""
        out = ""
        for part in self._path:
            out += part if part.startswith("[") or not out else f".{part}"
        return out.removeprefix("config.")

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        event = self.peek_event()
        is_key = isinstance(parent, yaml.MappingNode) and index is None
        pushed = self._push(parent, index)
        try:
            self._refuse_shape(event, is_key)
            if len(self._path) > MAX_DEPTH:
                raise _at(event.start_mark, f"nested deeper than {MAX_DEPTH} levels", self.field_path())
            return super().compose_node(parent, index)
        finally:
            if pushed:
                self._path.pop()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        """Refuse a key given twice, which PyYAML would otherwise let the last one win."""
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"duplicate key {key!r} (first at line {seen[key].start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)

    def _push(self, parent: yaml.Node | None, index: Any) -> bool:
        """Step into a mapping value (its key's text) or a list item (`[i]`); keys and the root add no level."""
        if isinstance(parent, yaml.SequenceNode) and isinstance(index, int):
            self._path.append(f"[{index}]")
            return True
        if isinstance(parent, yaml.MappingNode) and isinstance(index, yaml.ScalarNode):
            self._path.append(shown(index.value))
            return True
        if parent is None:
            self._path.append("")
            return True
        return False

    def _refuse_shape(self, event: yaml.Event, is_key: bool) -> None:
        where = self.field_path()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _at(
                event.start_mark,
                "YAML anchors and aliases (&name, *name) are not accepted in a stack file; write the value out",
                where,
            )
        if is_key and not isinstance(event, yaml.ScalarEvent):
            raise _at(event.start_mark, "a mapping key must be a plain scalar, not a list or a mapping", where)
        if is_key and event.value == _MERGE_KEY and event.implicit[0]:
            raise _at(
                event.start_mark, "YAML merge keys (<<) are not accepted in a stack file; write the keys out", where
            )
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and tag not in _PLAIN_TAGS:
            raise _at(event.start_mark, f"YAML tag {shown(tag)} is not accepted in a stack file", where)

"""Read the YAML file, remembering the line where each field was written.

Syntax errors report line and column; a field written twice in one mapping is an error
(PyYAML would silently keep the last one). An empty file is an empty mapping.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import yaml

from nodeagent.config.problem import field_path
from nodeagent.errors import ConfigError
from nodeagent.yamlshape import NotRegularFile, TooBig, read_capped

Component = str | int
_TOKEN = re.compile(r'\.?([A-Za-z0-9_]+)|\[([0-9]+)\]|\[("(?:[^"\\]|\\.)*")\]')


def components(path: str) -> tuple[Component, ...]:
    """``a.b[1]["k.x"]`` -> ``("a", "b", 1, "k.x")``; unparseable tails are dropped."""
    out: list[Component] = []
    pos = 0
    while pos < len(path):
        m = _TOKEN.match(path, pos)
        if m is None:
            break
        name, index, quoted = m.groups()
        out.append(name if name is not None else int(index) if index else json.loads(quoted))
        pos = m.end()
    return tuple(out)


@dataclass(frozen=True)
class Document:
    data: dict[str, Any]
    source: str = ""
    lines: Mapping[tuple[Component, ...], int] = field(default_factory=dict)

    def line_of(self, path: str) -> int | None:
        """The line of ``path``, or of its nearest enclosing field written in the file."""
        comps = components(path)
        for n in range(len(comps), 0, -1):
            if (line := self.lines.get(comps[:n])) is not None:
                return line
        return None


MAX_BYTES: Final = 256 * 1024
MAX_DEPTH: Final = 64
MAX_VALUES: Final = 10_000
MAX_INT_CHARS: Final = 24
_INT_TAG: Final = "tag:yaml.org,2002:int"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# What YAML 1.1 allows in a stream (tab, newline, carriage return and the printable characters).
_UNPRINTABLE: Final = re.compile(
    "[^\x09\x0a\x0d\x20-\x7e\x85\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
)


def read(path: str, *, top_fields: tuple[str, ...] | None = None) -> Document:
    """Read and parse ``path``: a regular file of at most ``MAX_BYTES``, read without blocking.

    A FIFO, a device (``/dev/zero``) or a directory is refused before anything is read.
    ``top_fields``: as :func:`parse`.
    """
    try:
        raw = read_capped(path, MAX_BYTES)
    except NotRegularFile:
        raise ConfigError("--config", f"{path} is not a regular file", path) from None
    except TooBig:
        raise ConfigError(
            "--config",
            f"{path} is larger than {MAX_BYTES // 1024} KiB; a configuration is smaller",
            path,
        ) from None
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}", path) from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(
            "--config", f"{path} is not UTF-8 text: {e.reason} at byte {e.start}", path
        ) from e
    return parse(text, source=path, top_fields=top_fields)


def parse(text: str, *, source: str = "", top_fields: tuple[str, ...] | None = None) -> Document:
    """Parse ``text``; every problem is a ``ConfigError`` (never a traceback, never unbounded).

    A non-empty document must have one of ``top_fields`` (default: a NodeAgentConfiguration's);
    an empty tuple checks only that it is a mapping (another kind of document).
    """
    expected = _TOP_FIELDS if top_fields is None else top_fields
    _check_text(text, source)
    loader = _Loader(text, source)
    try:
        node = loader.get_single_node()
        walker = _Walker(source, loader)
        if node is not None:
            _check_expansion(node, source)
            walker.walk(node, (), "")
        data = _construct(loader, node, source) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = ", ".join(p for p in (e.context, e.problem) if p) or "syntax error"
        raise ConfigError(
            "",
            f"invalid YAML{where}: {problem[:200]}",
            source=source,
            line=mark.line + 1 if mark else None,
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {str(e)[:200]}", source=source) from e
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        fields = ", ".join(expected or ("apiVersion", "kind"))
        raise ConfigError(
            "",
            f"the file must be a mapping with {fields}, not a {type(data).__name__}",
            source=source,
            line=1,
        )
    if data and expected and not any(isinstance(k, str) and k in expected for k in data):
        raise ConfigError(
            "",
            "this is not a nodeagent configuration: it has none of the fields "
            + ", ".join(_TOP_FIELDS)
            + _misspelt(data),
            source=source,
            line=1,
        )
    return Document(data=data, source=source, lines=walker.lines)


_TOP_FIELDS: Final = ("apiVersion", "kind", "node", "kubelet", "proxy")


def _misspelt(data: dict[Any, Any]) -> str:
    """A hint for a top-level field written wrong; other keys are never echoed (the file may
    be anything, ``/etc/shadow`` included)."""
    for key in data:
        if isinstance(key, str) and len(key) <= 20:
            close = difflib.get_close_matches(key, _TOP_FIELDS, n=1, cutoff=0.75)
            if close:
                return f" (did you mean {close[0]} instead of {json.dumps(key)}?)"
    return ""


def _construct(loader: yaml.SafeLoader, node: yaml.Node, source: str) -> Any:
    """Build the Python data; a value PyYAML resolves but cannot build (``2001-13-01``) is
    an error, not a traceback."""
    try:
        return loader.construct_document(node)
    except (ValueError, OverflowError, TypeError) as e:
        raise ConfigError("", f"invalid YAML value: {str(e)[:200]}", source=source) from e


def _check_text(text: str, source: str) -> None:
    if len(text) > MAX_BYTES:
        raise ConfigError(
            "", f"the configuration is larger than {MAX_BYTES // 1024} KiB", source=source
        )
    if (bad := _UNPRINTABLE.search(text)) is None:
        return
    line = text.count("\n", 0, bad.start()) + 1
    column = bad.start() - (text.rfind("\n", 0, bad.start()) + 1) + 1
    raise ConfigError(
        "",
        f"invalid YAML at line {line}, column {column}: control character "
        f"U+{ord(bad.group()):04X} is not allowed (YAML allows tab, newline and printable text)",
        source=source,
        line=line,
    )


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing nesting deeper than ``MAX_DEPTH`` or more than
    ``MAX_VALUES`` nodes while composing, before the whole document is built."""

    def __init__(self, text: str, source: str) -> None:
        super().__init__(text)
        self._source = source
        self._depth = 0
        self._nodes = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self._depth += 1
        self._nodes += 1
        try:
            if self._nodes > MAX_VALUES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ConfigError(
                    "",
                    f"invalid YAML at line {mark.line + 1}: more than {MAX_VALUES} values",
                    source=self._source,
                    line=mark.line + 1,
                )
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise ConfigError(
                    "",
                    f"invalid YAML at line {mark.line + 1}, column {mark.column + 1}: "
                    f"nested more than {MAX_DEPTH} levels deep",
                    source=self._source,
                    line=mark.line + 1,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _check_expansion(root: yaml.Node, source: str) -> None:
    """Refuse aliases that expand (billion laughs, merge-key chains) or nest past the caps.

    Counts every value as it would be after expanding aliases and merge keys, once per node
    (memoised), without recursion; a node that contains itself is an error.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    stack: list[tuple[yaml.Node, str, bool]] = [(root, "", False)]
    open_: set[int] = set()
    while stack:
        node, path, done = stack.pop()
        key = id(node)
        if done:
            open_.discard(key)
            kids = [id(k) for k, _ in _children(node, path)]
            size[key] = 1 + sum(size[k] for k in kids)
            depth[key] = 1 + max((depth[k] for k in kids), default=0)
            if size[key] > MAX_VALUES or depth[key] > MAX_DEPTH:
                what = (
                    f"more than {MAX_VALUES} values"
                    if size[key] > MAX_VALUES
                    else f"more than {MAX_DEPTH} levels"
                )
                raise ConfigError(
                    path,
                    f"has {what}, counting what YAML aliases and merge keys expand to",
                    source=source,
                    line=node.start_mark.line + 1,
                )
            continue
        if key in size:
            continue
        if key in open_:
            raise ConfigError(
                path,
                "a YAML alias refers to a node that contains it; recursive data is not allowed",
                source=source,
                line=node.start_mark.line + 1,
            )
        open_.add(key)
        stack.append((node, path, True))
        todo = [(k, p, False) for k, p in _children(node, path) if id(k) not in size]
        stack.extend(reversed(todo))  # first child first: an anchor is named where written


def _children(node: yaml.Node, path: str) -> list[tuple[yaml.Node, str]]:
    if isinstance(node, yaml.SequenceNode):
        return [(n, f"{path}[{i}]") for i, n in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        out: list[tuple[yaml.Node, str]] = []
        for k, v in node.value:
            name = str(k.value)[:100] if isinstance(k, yaml.ScalarNode) else "?"
            out += [(k, path), (v, field_path(path, name))]
        return out
    return []


class _Walker:
    """Records the line of every field and item; refuses duplicate keys and alias cycles."""

    def __init__(self, source: str, loader: yaml.SafeLoader) -> None:
        self.source = source
        self._loader = loader
        self.lines: dict[tuple[Component, ...], int] = {}
        self._open: set[int] = set()  # nodes being walked, to stop on `&a [*a]`

    def walk(self, node: yaml.Node, comps: tuple[Component, ...], path: str) -> None:
        if id(node) in self._open:
            raise ConfigError(
                path,
                "a YAML alias refers to a node that contains it; recursive data is not allowed",
                source=self.source,
                line=node.start_mark.line + 1,
            )
        self._open.add(id(node))
        try:
            if isinstance(node, yaml.ScalarNode):
                self._scalar(node, path)
            elif isinstance(node, yaml.MappingNode):
                self._mapping(node, comps, path)
            elif isinstance(node, yaml.SequenceNode):
                for i, item_node in enumerate(node.value):
                    self.lines[(*comps, i)] = item_node.start_mark.line + 1
                    self.walk(item_node, (*comps, i), f"{path}[{i}]")
        finally:
            self._open.discard(id(node))

    def _mapping(self, node: yaml.MappingNode, comps: tuple[Component, ...], path: str) -> None:
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag.endswith(":merge"):
                continue
            key = str(key_node.value)
            line = key_node.start_mark.line + 1
            sub = field_path(path, key)
            self._scalar(key_node, sub)
            if key in seen:
                raise ConfigError(
                    sub,
                    f"field is written twice (first at line {seen[key]})",
                    key,
                    source=self.source,
                    line=line,
                )
            seen[key] = line
            self.lines[(*comps, key)] = line
            self.walk(value_node, (*comps, key), sub)

    def _scalar(self, node: yaml.ScalarNode, path: str) -> None:
        """Refuse lone surrogates, and integers no 64-bit field can hold, before PyYAML builds
        them."""
        text = str(node.value)
        if (bad := _SURROGATE.search(text)) is not None:  # from a "\ud800" escape
            raise ConfigError(
                path,
                f"contains \\u{ord(bad.group()):04x}, half of a UTF-16 surrogate pair, not text",
                source=self.source,
                line=node.start_mark.line + 1,
            )
        if node.tag != _INT_TAG:
            return
        if len(text) > MAX_INT_CHARS:
            raise ConfigError(
                path,
                f"an integer of {len(text)} characters is out of range for a 64-bit integer "
                f"({text[:MAX_INT_CHARS]}...)",
                source=self.source,
                line=node.start_mark.line + 1,
            )
        try:
            number = self._loader.construct_yaml_int(node)  # at most 24 characters: cheap
        except ValueError:
            number = None
        if number is None or not -(2**63) <= number < 2**63:
            raise ConfigError(
                path,
                f"{text} is not an integer"
                if number is None
                else f"{text} is out of range for a 64-bit integer",
                number,
                source=self.source,
                line=node.start_mark.line + 1,
            )

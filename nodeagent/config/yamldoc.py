"""Read the YAML file, remembering the line where each field was written.

Syntax errors report line and column; a field written twice in one mapping is an error
(PyYAML would silently keep the last one). An empty file is an empty mapping.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from nodeagent.config.problem import field_path
from nodeagent.errors import ConfigError

Component = str | int
_TOKEN = re.compile(r'\.?([A-Za-z0-9_]+)|\[(\d+)\]|\[("(?:[^"\\]|\\.)*")\]')


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


def read(path: str) -> Document:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("--config", f"cannot read {path}: {e.strerror}", path) from e
    except UnicodeDecodeError as e:
        raise ConfigError("--config", f"{path} is not UTF-8 text: {e.reason}", path) from e
    return parse(text, source=path)


def parse(text: str, *, source: str = "") -> Document:
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        walker = _Walker(source)
        if node is not None:
            walker.walk(node, (), "")
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = ", ".join(p for p in (e.context, e.problem) if p) or "syntax error"
        raise ConfigError(
            "",
            f"invalid YAML{where}: {problem}",
            source=source,
            line=mark.line + 1 if mark else None,
        ) from e
    except yaml.YAMLError as e:
        raise ConfigError("", f"invalid YAML: {e}", source=source) from e
    finally:
        loader.dispose()
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            "",
            "the file must be a mapping with apiVersion, kind, node, kubelet and proxy, "
            f"not a {type(data).__name__}",
            source=source,
            line=1,
        )
    return Document(data=data, source=source, lines=walker.lines)


class _Walker:
    """Records the line of every field and item; refuses duplicate keys and alias cycles."""

    def __init__(self, source: str) -> None:
        self.source = source
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
            if isinstance(node, yaml.MappingNode):
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

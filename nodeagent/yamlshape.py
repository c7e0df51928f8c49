"""Bounds on a YAML document, checked before it is turned into Python objects. Pure.

Used for the YAML that reaches the agent from files an operator or a tenant controls: static
pod manifests (``staticpods``) and kubeconfigs (``apiserver.kubeconfig``). The size cap is the
caller's (it reads at most one byte more); here:

- :data:`MAX_DEPTH` levels of nesting (the YAML composer recurses once per level);
- aliases may add at most :data:`MAX_ALIAS_NODES` nodes when expanded (a "billion laughs"
  file of 500 bytes would otherwise expand to 10^8 nodes), and may not refer to themselves.

:func:`check_yaml_shape` walks the parser's event stream (no recursion, nothing built);
:func:`check_json_values` walks the loaded document: only JSON types, string keys;
:func:`read_capped` (the one function here with I/O) reads a regular file of bounded size.
"""

from __future__ import annotations

import math
import os
import stat
from typing import Any, Final

import yaml

MAX_DEPTH: Final = 64
MAX_ALIAS_NODES: Final = 100_000
# The size caps of the files read under these bounds.
MAX_MANIFEST_BYTES: Final = 1536 * 1024  # a static pod: etcd's default request size limit
MAX_KUBECONFIG_BYTES: Final = 1024 * 1024  # a kubeconfig with embedded certificates: a few KiB


class ShapeError(ValueError):
    """The document is too big, too deep or expands too much; ``field`` may be empty."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}" if field else message)


def check_yaml_shape(data: bytes | str) -> None:
    """Raise :class:`ShapeError` when the YAML nests deeper than :data:`MAX_DEPTH` or its
    aliases expand too far; ``yaml.YAMLError`` when it is not YAML at all."""
    # Per open collection: [anchor, expanded node count]. Counts of finished anchored nodes.
    stack: list[list[Any]] = []
    anchors: dict[str, int] = {}
    added_by_aliases = 0
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    for event in yaml.parse(data, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            if len(stack) >= MAX_DEPTH:
                raise ShapeError("", f"nested more than {MAX_DEPTH} levels deep")
            stack.append([event.anchor, 1])
            continue
        if isinstance(event, yaml.CollectionEndEvent):
            anchor, count = stack.pop()
        elif isinstance(event, yaml.ScalarEvent):
            anchor, count = event.anchor, 1
        elif isinstance(event, yaml.AliasEvent):
            name = str(event.anchor)
            if any(open_anchor == name for open_anchor, _ in stack):
                raise ShapeError("", f"recursive alias *{name}")
            if name not in anchors:
                raise ShapeError("", f"undefined alias *{name}")
            anchor, count = None, anchors[name]
            added_by_aliases += count
            if added_by_aliases > MAX_ALIAS_NODES:
                raise ShapeError(
                    "", f"aliases expand to more than {MAX_ALIAS_NODES} nodes (a YAML bomb?)"
                )
        else:
            continue
        if anchor is not None:
            anchors[str(anchor)] = count
        if stack:
            stack[-1][1] += count


def check_json_values(doc: Any) -> None:
    """Raise :class:`ShapeError` at the first value JSON cannot hold: a key that is not a
    string, a binary, set or timestamp value, an infinite or NaN number."""
    pending: list[tuple[str, Any]] = [("", doc)]
    while pending:
        path, value = pending.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise ShapeError(path, f"keys must be strings, found {key!r}"[:120])
                pending.append((f"{path}.{key}" if path else key, item))
        elif isinstance(value, list):
            pending.extend((f"{path}[{i}]", item) for i, item in enumerate(value))
        elif isinstance(value, float) and not math.isfinite(value):
            raise ShapeError(path, f"Invalid value: {value}: not a finite number")
        elif value is not None and not isinstance(value, str | int | float | bool):
            raise ShapeError(path, f"a {type(value).__name__} value cannot be part of a pod")


class NotRegularFile(ShapeError):
    """A FIFO, a device, a directory: refused before anything is read."""


class TooBig(ShapeError):
    """More bytes than the caller's cap."""


def read_capped(path: str | os.PathLike[str], limit: int) -> bytes:
    """The bytes of the regular file ``path`` if it holds at most ``limit`` of them.

    Opened without blocking, so a FIFO or a device (``/dev/zero``) is refused before anything
    is read; a file whose size says it is too big is refused unread, and none is read more than
    one byte past ``limit`` (it may grow meanwhile). Raises :class:`NotRegularFile`,
    :class:`TooBig`, or ``OSError`` when it cannot be opened or read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile("", "not a regular file")
        chunks: list[bytes] = []
        size = st.st_size if st.st_size > limit else 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise TooBig("", f"larger than {limit} bytes")
    return b"".join(chunks)

"""What one configuration check found wrong, before it is located in a file or on a flag.

Paths are written the way the user wrote the field: ``kubelet.maxPods``,
``kubelet.shutdownGracePeriodByPodPriority[1].priority``,
``kubelet.evictionHard["memory.available"]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from nodeagent.config.units import Duration, printable, quoted


@dataclass(frozen=True, slots=True)
class Problem:
    path: str
    message: str
    value: object = None
    summary: str = ""  # the whole sentence, when "path: message" reads badly


def child(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def item(path: str, index: int) -> str:
    return f"{path}[{index}]"


def entry(path: str, key: str) -> str:
    return f"{path}[{json.dumps(key)}]"


def field_path(path: str, name: str) -> str:
    """A struct field (``a.name``) or, for names that are not identifiers, ``a["x.y"]``."""
    return child(path, name) if name.isidentifier() else entry(path, name)


def under(path: str, prefix: str) -> bool:
    """True when ``path`` is ``prefix`` or one of its fields, items or entries."""
    return path == prefix or path.startswith((prefix + ".", prefix + "["))


def show(value: object, *, limit: int = 100) -> str:
    """A value as the user would write it in YAML: ``"cgroupsfs"``, ``15s``, ``true``.

    Cut to about ``limit`` characters (a long string keeps its first 100 and its length), so
    a message never echoes a whole file.
    """
    if isinstance(value, str) and limit <= 100:
        return quoted(value)
    text = _show(value, limit + 1)
    return text if len(text) <= limit + 1 else text[:limit] + "..."


def _show(value: object, budget: int) -> str:
    if isinstance(value, Duration):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, str):
        return quoted(value) if budget <= 101 else json.dumps(value, ensure_ascii=False)
    if isinstance(value, int) and value.bit_length() > 300:
        return f"an integer of about {int(value.bit_length() * 0.30103)} digits"
    if isinstance(value, Mapping):
        return _joined("{", ((f"{_key(k, budget)}: ", v) for k, v in value.items()), "}", budget)
    if isinstance(value, Sequence):
        return _joined("[", (("", v) for v in value), "]", budget)
    return str(value)[: budget + 1]


def _key(key: object, budget: int) -> str:
    """A mapping key as written (``memory``), quoted when it would not read as one line."""
    text = key if isinstance(key, str) else _show(key, budget)
    plain = text.isprintable() and text == text.strip() and ":" not in text and bool(text)
    return text[:budget] if plain else quoted(text)


def _joined(left: str, parts: Iterator[tuple[str, object]], right: str, budget: int) -> str:
    out = left
    for i, (label, v) in enumerate(parts):
        if len(out) > budget:
            return out + "..."
        out += (", " if i else "") + label[:budget] + _show(v, budget - len(out))
    return out + right


def one_line(text: str, limit: int = 200) -> str:
    """``text`` (a message from a library) cut to ``limit`` characters, anything unprintable
    escaped, so one problem stays one line."""
    return printable(text[:limit]) + ("..." if len(text) > limit else "")


def one_of(allowed: Sequence[object]) -> str:
    return "one of " + ", ".join(show(a) for a in allowed)


class Invalid(Exception):
    """Internal: problems found while decoding or validating, not yet located."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in problems))


class Findings:
    """Collects problems; the ``check_*`` helpers word the common ones the same way."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: str, message: str, value: object = None, *, summary: str = "") -> None:
        self.problems.append(Problem(path, message, value, summary))

    def check(self, path: str, value: object, message: str | None) -> None:
        """Record ``message`` (from a ``syntax.check_*`` function) unless it is ``None``."""
        if message is not None:
            self.add(path, f"{show(value)} {message}", value)

    def in_range(self, path: str, value: int, low: int, high: int) -> None:
        if not low <= value <= high:
            self.add(path, f"{show(value)} must be between {low} and {high}", value)

    def at_least(self, path: str, value: int, low: int, high: int | None = None) -> None:
        """``value >= low`` (and ``<= high`` when given, for a Go int32 field)."""
        if value < low:
            self.add(path, f"{show(value)} must be >= {low}", value)
        elif high is not None and value > high:
            self.add(path, f"{show(value)} must be <= {high}", value)

    def positive(self, path: str, value: Duration) -> None:
        if value.nanoseconds <= 0:
            self.add(path, f"{value} must be greater than 0", value)

    def not_negative(self, path: str, value: Duration) -> None:
        if value.nanoseconds < 0:
            self.add(path, f"{value} must not be negative", value)

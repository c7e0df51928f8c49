"""YAML data <-> ``Config``, turning msgspec's errors into ones that name the field path.

msgspec checks types and unknown fields; its message (``Object contains unknown field
`clusterDomian` - at `$.kubelet```) becomes ``kubelet.clusterDomian: unknown field (did you
mean clusterDomain?)`` with the value the user wrote.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Final

import msgspec
import yaml
from msgspec import inspect

from nodeagent.config.problem import (
    Invalid,
    Problem,
    entry,
    field_path,
    one_line,
    one_of,
    show,
)
from nodeagent.config.schema import Config
from nodeagent.config.units import DURATION_HELP, Duration
from nodeagent.config.yamldoc import Component, components

_MSG = re.compile(r"(?P<msg>.*?)(?: - at `(?P<at>[^`]*)`(?: in `(?P<inside>[^`]*)`)?)?", re.S)
_UNKNOWN = re.compile(r"Object contains unknown field `(.*)`", re.S)
_MISSING = re.compile(r"Object missing required field `(.*)`", re.S)
_EXPECTED = re.compile(r"Expected `([^`]*)`, got `([^`]*)`")
_WORDS: Final = {
    "int": "an integer",
    "str": "a string",
    "bool": "true or false",
    "float": "a number",
    "object": "a mapping",
    "array": "a list",
    "null": "null",
}
_PY_TYPES: Final[dict[str, type | tuple[type, ...]]] = {
    "int": int,
    "str": str,
    "bool": bool,
    "float": (int, float),
    "object": dict,
    "array": list,
}
_ABSENT: Final = object()


def decode(data: dict[str, Any]) -> Config:
    try:
        return msgspec.convert(data, Config, dec_hook=_dec_hook)
    except msgspec.ValidationError as e:
        raise Invalid([translate(str(e), data)]) from e


def render(config: Config) -> str:
    """The configuration as YAML, every default included, durations in Go syntax."""
    builtins = msgspec.to_builtins(config, enc_hook=_enc_hook)
    return yaml.safe_dump(builtins, sort_keys=False, allow_unicode=True)


def _dec_hook(typ: type, obj: object) -> object:
    if typ is Duration:
        if isinstance(obj, str):
            try:
                return Duration.parse(obj)
            except ValueError:
                raise ValueError(f"{show(obj)} is not {DURATION_HELP}") from None
        if isinstance(obj, int | float) and not isinstance(obj, bool):
            raise ValueError(f"{show(obj)} has no unit; write it as {obj}s ({DURATION_HELP})")
        raise ValueError(f"expected {DURATION_HELP}, got {show(obj)}")
    raise NotImplementedError(typ)


def _enc_hook(obj: object) -> object:
    if isinstance(obj, Duration):
        return str(obj)
    raise NotImplementedError(type(obj))


def translate(text: str, data: dict[str, Any]) -> Problem:
    """One msgspec ``ValidationError`` message -> a ``Problem`` naming the field path."""
    m = _MSG.fullmatch(text)
    assert m is not None  # the pattern matches any text
    msg, at, inside = m.group("msg"), m.group("at") or "", m.group("inside")
    if inside is not None:  # "- at `key` in `$.x`": a mapping key of the wrong type
        path = _strip(inside)
        bad = next((k for k in _lookup(data, path) or {} if not isinstance(k, str)), None)
        return Problem(path, f"keys must be strings, got {show(bad)}", bad)
    path = _strip(at)
    if um := _UNKNOWN.fullmatch(msg):
        name = um.group(1)
        return Problem(field_path(path, name), "unknown field" + _hint(path, name), name)
    if mm := _MISSING.fullmatch(msg):
        return Problem(field_path(path, mm.group(1)), "required field is missing")
    if path.endswith("[...]"):
        path = _find_entry(data, path.removesuffix("[...]"), msg)
    value = _lookup(data, path)
    if em := _EXPECTED.fullmatch(msg):
        return Problem(path, f"expected {_describe(em.group(1))}, got {show(value)}", value)
    if msg.startswith("Invalid enum value"):
        allowed = getattr(_type_at(components(path)), "values", ())
        return Problem(path, f"{show(value)} is not {one_of(allowed)}", value)
    return Problem(path, one_line(msg), value)


def _strip(at: str) -> str:
    return at.removeprefix("$").removeprefix(".")


def _describe(expected: str) -> str:
    return " or ".join(_WORDS.get(t, f"`{t}`") for t in expected.split(" | "))


def _lookup(data: object, path: str) -> Any:
    for comp in components(path):
        if isinstance(data, dict) and isinstance(comp, str) and comp in data:
            data = data[comp]
            continue
        if isinstance(data, list) and isinstance(comp, int) and comp < len(data):
            data = data[comp]
            continue
        return _ABSENT
    return data


def _find_entry(data: dict[str, Any], path: str, msg: str) -> str:
    """msgspec says ``x[...]`` for a bad mapping value; find which key it was."""
    mapping = _lookup(data, path)
    em = _EXPECTED.fullmatch(msg)
    expected = _PY_TYPES.get(em.group(1), object) if em else object
    if isinstance(mapping, dict):
        for key, value in mapping.items():
            wrong_bool = isinstance(value, bool) and expected is int
            if isinstance(key, str) and (wrong_bool or not isinstance(value, expected)):
                return entry(path, key)
    return path


def _unwrap(t: inspect.Type) -> inspect.Type:
    while isinstance(t, inspect.Metadata):
        t = t.type
    return t


def _type_at(comps: tuple[Component, ...]) -> inspect.Type | None:
    t: inspect.Type = inspect.type_info(Config)
    for comp in comps:
        t = _unwrap(t)
        if isinstance(t, inspect.StructType) and isinstance(comp, str):
            found = next((f for f in t.fields if f.encode_name == comp), None)
            if found is None:
                return None
            t = found.type
        elif isinstance(t, inspect.ListType | inspect.VarTupleType) and isinstance(comp, int):
            t = t.item_type
        elif isinstance(t, inspect.DictType) and isinstance(comp, str):
            t = t.value_type
        else:
            return None
    return _unwrap(t)


def _hint(path: str, name: str) -> str:
    struct = _type_at(components(path))
    if not isinstance(struct, inspect.StructType):
        return ""
    known = [f.encode_name for f in struct.fields]
    kubelet = _type_at(("kubelet",))
    in_kubelet = isinstance(kubelet, inspect.StructType) and any(
        f.encode_name == name for f in kubelet.fields
    )
    if not path and in_kubelet:
        return f" (KubeletConfiguration fields go under kubelet:, e.g. kubelet.{name})"
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]}?)"
    if len(known) <= 8:
        return f" (known fields: {', '.join(known)})"
    return ""

"""The error tree drawn in ``nodeagent/errors.py`` is the one the code has: every exception
class defined in nodeagent is drawn under ``AgentError`` when it derives from it, and named in
the "outside the tree" list (with its module path) when it does not."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import nodeagent
from nodeagent import errors
from nodeagent.errors import AgentError

TREE, _, OUTSIDE = (errors.__doc__ or "").partition("Outside the tree, deliberately:")


def _error_classes() -> list[type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(nodeagent.__path__, "nodeagent."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, BaseException)
                and obj.__module__ == info.name
            ):
                found[f"{obj.__module__}.{obj.__qualname__}"] = obj
    return [found[name] for name in sorted(found)]


CLASSES = _error_classes()


def test_the_walk_finds_the_known_classes() -> None:
    names = {c.__qualname__ for c in CLASSES}
    assert {"AgentError", "CriError", "ContainerConfigError", "LogindError"} <= names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_class_is_drawn_where_it_is(cls: type[BaseException]) -> None:
    if issubclass(cls, AgentError):
        assert cls.__qualname__ in TREE, f"{cls} derives from AgentError but is not in the tree"
    else:
        where = f"{cls.__module__.removeprefix('nodeagent.')}.{cls.__qualname__}"
        assert where in OUTSIDE, f"{where} is outside AgentError but not listed as deliberately so"


def test_the_tree_draws_only_classes_that_exist_under_agent_error() -> None:
    drawing = TREE.split("::", 1)[1].strip("\n").split("\n\n", 1)[0]
    drawn = set()
    for line in drawing.splitlines():
        names = line.lstrip(" │├└─").split("  ", 1)[0]
        drawn |= {name.strip() for name in names.split(",") if name.strip()}
    existing = {c.__qualname__ for c in CLASSES if issubclass(c, AgentError)}
    assert drawn == existing

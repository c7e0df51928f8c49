"""File, then flags, then defaults, then validation: the one way a ``Config`` is made.

Problems are reported where the user can fix them: a field the file set is named by its path,
with the file and line; a field a flag set is named by the flag (``--node-ip``).
"""

from __future__ import annotations

import argparse
import copy

from nodeagent.config import flags, yamldoc
from nodeagent.config.decode import decode
from nodeagent.config.defaults import apply_dependent_defaults
from nodeagent.config.problem import Invalid, Problem, show, under
from nodeagent.config.schema import API_VERSION, KIND, Config
from nodeagent.config.validate import validate
from nodeagent.errors import ConfigError


def load(args: argparse.Namespace) -> Config:
    """The effective configuration for parsed command-line ``args``; ``ConfigError`` if bad."""
    path: str | None = getattr(args, "config", None)
    doc = yamldoc.read(path) if path else yamldoc.Document(data={})
    data = copy.deepcopy(doc.data)
    header = _missing_header(data)
    given = flags.overlay(data, args)
    apply_dependent_defaults(data)
    try:
        config = decode(data)
    except Invalid as e:
        raise _located(e.problems, doc, given) from None
    problems = header + validate(config)
    if problems:
        raise _located(problems, doc, given)
    return config


def _missing_header(data: dict[str, object]) -> list[Problem]:
    """A non-empty file must say what it is; an empty one means all defaults."""
    if not data:
        return []
    return [
        Problem(name, f"required field is missing; must be {show(expected)}")
        for name, expected in (("apiVersion", API_VERSION), ("kind", KIND))
        if name not in data
    ]


def _located(
    problems: tuple[Problem, ...] | list[Problem], doc: yamldoc.Document, given: dict[str, str]
) -> ConfigError:
    errors = sorted((_locate(p, doc, given) for p in problems), key=lambda e: e.line or 0)
    first = errors[0]
    return ConfigError(
        first.path,
        first.message,
        first.value,
        source=first.source,
        line=first.line,
        summary=first.summary,
        more=tuple(errors[1:]),
    )


def _locate(p: Problem, doc: yamldoc.Document, given: dict[str, str]) -> ConfigError:
    for field, flag in given.items():
        if under(p.path, field):
            return ConfigError(flag, p.message, p.value, summary=p.summary)
    return ConfigError(
        p.path,
        p.message,
        p.value,
        source=doc.source,
        line=doc.line_of(p.path) if doc.source else None,
        summary=p.summary,
    )

"""File, then flags, then defaults, then validation: the one way a ``Config`` is made.

Problems are reported where the user can fix them: a field the file set is named by its path,
with the file and line; a field a flag set is named by the flag (``--node-ip``); a field only
the cluster's kubelet configuration (``node.clusterKubeletConfig``) set by its path in that
file, with the file (or ConfigMap) and line.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from nodeagent.config import clusterkubelet, flags, yamldoc
from nodeagent.config.clusterkubelet import ClusterKubelet
from nodeagent.config.decode import decode
from nodeagent.config.defaults import apply_dependent_defaults
from nodeagent.config.problem import Invalid, Problem, show, under
from nodeagent.config.schema import API_VERSION, KIND, Config
from nodeagent.config.validate import validate
from nodeagent.errors import ConfigError


def load(args: argparse.Namespace, *, cluster_kubelet: ClusterKubelet | None = None) -> Config:
    """The effective configuration for parsed command-line ``args``; ``ConfigError`` if bad.

    ``cluster_kubelet``: the cluster's kubelet configuration to apply instead of the file
    ``node.clusterKubeletConfig`` names (``nodeagent join`` checks the ConfigMap with it before
    writing anything).
    """
    path: str | None = getattr(args, "config", None)
    doc = yamldoc.read(path) if path else yamldoc.Document(data={})
    data = copy.deepcopy(doc.data)
    header = _missing_header(data)
    given = flags.overlay(data, args)
    own = copy.deepcopy(data)
    base = cluster_kubelet or _read_cluster_kubelet(data, given)
    if base is not None:
        data["kubelet"] = clusterkubelet.merge(base.data, data.get("kubelet"))
    apply_dependent_defaults(data)
    try:
        config = decode(data)
    except Invalid as e:
        raise _located(e.problems, doc, given, own=own, base=base) from None
    problems = header + validate(config)
    if problems:
        raise _located(problems, doc, given, own=own, base=base)
    return config


def _read_cluster_kubelet(data: dict[str, object], given: dict[str, str]) -> ClusterKubelet | None:
    node = data.get("node")
    path = node.get("clusterKubeletConfig") if isinstance(node, dict) else None
    if not isinstance(path, str) or not path:
        return None  # a wrong type is named by decoding
    return clusterkubelet.read(path, named_by=given.get(clusterkubelet.FIELD, clusterkubelet.FIELD))


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
    problems: tuple[Problem, ...] | list[Problem],
    doc: yamldoc.Document,
    given: dict[str, str],
    *,
    own: dict[str, object] | None = None,
    base: ClusterKubelet | None = None,
) -> ConfigError:
    errors = sorted(
        (_locate(p, doc, given, own=own, base=base) for p in problems), key=lambda e: e.line or 0
    )
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


def _locate(
    p: Problem,
    doc: yamldoc.Document,
    given: dict[str, str],
    *,
    own: dict[str, object] | None = None,
    base: ClusterKubelet | None = None,
) -> ConfigError:
    for field, flag in given.items():
        if under(p.path, field):
            return ConfigError(flag, p.message, p.value, summary=p.summary)
    if base is not None and under(p.path, "kubelet") and p.path != "kubelet":
        inner = p.path.removeprefix("kubelet.")
        if not _written(own or {}, p.path) and _written(base.doc.data, inner):
            return ConfigError(
                inner,
                p.message,
                p.value,
                source=base.source,
                line=base.doc.line_of(inner),
                summary=p.summary,
            )
    return ConfigError(
        p.path,
        p.message,
        p.value,
        source=doc.source,
        line=doc.line_of(p.path) if doc.source else None,
        summary=p.summary,
    )


def _written(data: Any, path: str) -> bool:
    """Whether ``data`` holds ``path`` (or the field of it that is a list or a value)."""
    for comp in yamldoc.components(path):
        present = (isinstance(data, dict) and comp in data) or (
            isinstance(data, list) and isinstance(comp, int) and comp < len(data)
        )
        if not present:
            return not isinstance(data, dict)
        data = data[comp]
    return True

"""Bounds on a static pod manifest, checked before it is turned into Python objects. Pure.

The kubelet reads a manifest whole and converts any YAML to JSON; nodeagent caps what one file
may cost, so a bad file in ``staticPodPath`` can never stall or exhaust the daemon:
:data:`MAX_MANIFEST_BYTES` (1.5 MiB, etcd's default request size limit: a bigger pod could
never be stored as a mirror pod anyway; the reader reads at most one byte more), then the
nesting and alias bounds of :mod:`nodeagent.yamlshape`.
"""

from __future__ import annotations

from nodeagent.yamlshape import (
    MAX_ALIAS_NODES,
    MAX_DEPTH,
    MAX_MANIFEST_BYTES,
    ShapeError,
    check_json_values,
    check_yaml_shape,
)

__all__ = [
    "MAX_ALIAS_NODES",
    "MAX_DEPTH",
    "MAX_MANIFEST_BYTES",
    "ShapeError",
    "check_json_values",
    "check_yaml_shape",
]

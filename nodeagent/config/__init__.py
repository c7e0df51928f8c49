"""Configuration: one YAML file (``--config``) plus kubelet-compatible flags.

- ``add_flags(parser)`` adds ``--config`` and the kubelet-compatible flags to a parser;
- ``resolve(args)`` reads the file, overlays the flags, puts the cluster's kubelet
  configuration (:mod:`.clusterkubelet`) beneath its ``kubelet:``, applies defaults, validates, and
  returns a frozen :class:`Config` or raises :class:`nodeagent.errors.ConfigError` naming
  the field path (or flag), the value and what is allowed;
- ``render(config)`` gives the effective configuration as YAML (``nodeagent config show``);
- ``reference()`` gives the Markdown reference generated from the schema
  (``docs/configuration.md``).

The file format, every field and its default: ``docs/configuration.md``.
"""

from __future__ import annotations

import argparse

from nodeagent.config.clusterkubelet import ClusterKubelet
from nodeagent.config.decode import render
from nodeagent.config.flags import add_flags
from nodeagent.config.load import load
from nodeagent.config.reference import reference
from nodeagent.config.schema import (
    API_VERSION,
    KIND,
    Config,
    ConntrackConfiguration,
    NodeConfiguration,
    ProxyConfiguration,
)
from nodeagent.config.schema_kubelet import (
    KubeletConfiguration,
    LoggingConfiguration,
    ShutdownGracePeriodByPodPriority,
    Taint,
)
from nodeagent.config.units import Duration

__all__ = [
    "API_VERSION",
    "KIND",
    "ClusterKubelet",
    "Config",
    "ConntrackConfiguration",
    "Duration",
    "KubeletConfiguration",
    "LoggingConfiguration",
    "NodeConfiguration",
    "ProxyConfiguration",
    "ShutdownGracePeriodByPodPriority",
    "Taint",
    "add_flags",
    "reference",
    "render",
    "resolve",
]


def resolve(args: argparse.Namespace, *, cluster_kubelet: ClusterKubelet | None = None) -> Config:
    """The effective configuration for parsed ``args`` (see :func:`add_flags`); with
    ``cluster_kubelet``, that cluster kubelet configuration instead of the file
    ``node.clusterKubeletConfig`` names."""
    return load(args, cluster_kubelet=cluster_kubelet)

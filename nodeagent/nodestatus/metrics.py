"""The node's identity on the default Prometheus registry, set once at start as the kubelet
sets them: ``kubelet_node_name{node="<name>"} 1`` and ``kubelet_cgroup_version`` (1 or 2, the
host's cgroup hierarchy)."""

from __future__ import annotations

from typing import Final

from prometheus_client import Gauge

NODE_NAME: Final = Gauge("kubelet_node_name", "The node's name. The count is always 1.", ["node"])
CGROUP_VERSION: Final = Gauge("kubelet_cgroup_version", "cgroup version on the hosts.")


def describe_node(name: str, *, cgroup_version: int) -> None:
    NODE_NAME.labels(name).set(1)
    CGROUP_VERSION.set(cgroup_version)

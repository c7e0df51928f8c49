"""The PSI of one housekeeping pass in the Summary API's shape, for the contention monitor.

The PSI contention monitor (KEP-5394) reads ``node.memory.psi``, ``node.io.psi`` and the
``pods`` system container's, as they appear in ``/stats/summary``. :func:`psi_summary` builds
just those from the cgroup sampler's newest pass (``/proc/pressure`` and the kubepods cgroup):
no CRI call, nothing read twice. Pure.
"""

from __future__ import annotations

from typing import Any, Final

from nodeagent.stats.cgroup import TreeSample
from nodeagent.stats.summary_json import psi_json

RESOURCES: Final = ("memory", "io")


def psi_summary(tree: TreeSample | None) -> dict[str, Any]:
    """``{"node": {"memory": {"psi": ...}, "io": ..., "systemContainers": [pods]}}`` from one
    pass; empty without a pass (cgroup v1 has no PSI)."""
    if tree is None:
        return {}
    node: dict[str, Any] = {
        r: {"psi": psi_json(p)} for r, p in tree.node_psi.items() if r in RESOURCES
    }
    if tree.kubepods is not None:
        pods = {r: {"psi": psi_json(p)} for r, p in tree.kubepods.psi.items() if r in RESOURCES}
        node["systemContainers"] = [{"name": "pods", **pods}]
    return {"node": node}

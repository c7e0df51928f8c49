"""Compose the setters: the Node as it should be now, and whether that differs from the server's.

``compute_node(old, facts, settings)`` is the kubelet's ``updateNode``/``setNodeStatus``: a copy
of ``old`` with every setter applied, plus the events the transitions call for. It is pure;
facts are gathered by the caller.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from nodeagent import __version__
from nodeagent.apiserver import Obj
from nodeagent.gotext import rfc3339
from nodeagent.hostinfo import HostInfo, HostNetwork, IPAddress
from nodeagent.nodestatus import setters
from nodeagent.nodestatus.setters import Event, Pressure, RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings

KUBERNETES_VERSION: Final = "v1.36.3"
"""The Kubernetes release whose kubelet nodeagent behaves as (tests/harness/versions.env)."""


def kubelet_version(agent_version: str = __version__) -> str:
    """``nodeInfo.kubeletVersion``: ``v1.36.3+nodeagent.0.1.0``.

    A valid semantic version whose core is the Kubernetes release we implement, so version-skew
    checks and ``kubectl get nodes`` treat the node as that kubelet; the build metadata (ignored
    in version precedence, as k3s's ``+k3s1``) names nodeagent and its own version.
    """
    return f"{KUBERNETES_VERSION}+nodeagent.{agent_version}"


@dataclass(frozen=True, kw_only=True)
class NodeFacts:
    now: dt.datetime
    host: HostInfo
    network: HostNetwork
    rootfs_bytes: int | None
    runtime: RuntimeStatus
    pressure: Pressure = field(default_factory=Pressure)
    resolved_hostname: tuple[IPAddress, ...] = ()
    other_errors: tuple[str, ...] = ()
    """Further Ready=False causes (network plugin, shutdown in progress, ...)."""
    images: tuple[setters.RuntimeImage, ...] | None = None
    """The runtime's images; None when not listed yet (``status.images`` is left as it is)."""
    volumes_in_use: tuple[str, ...] = ()
    """Attachable volumes mounted or being mounted (``kubernetes.io/csi/<driver>^<handle>``):
    the attach/detach controller does not detach them."""


@dataclass(frozen=True)
class Computed:
    node: Obj
    events: list[Event] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    """Setters that could not run (their part of the status was left as it was)."""


CONDITION_ORDER: Final = ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")


def compute_node(
    old: Obj, facts: NodeFacts, s: NodeSettings, *, version: str | None = None
) -> Computed:
    node = copy.deepcopy(old)
    meta = node.setdefault("metadata", {})
    labels = meta.setdefault("labels", {})
    labels["kubernetes.io/os"] = facts.host.operating_system
    labels["kubernetes.io/arch"] = facts.host.architecture
    status = node.setdefault("status", {})
    events: list[Event] = []
    problems: list[str] = []
    now = rfc3339(facts.now)

    try:
        status["addresses"] = setters.node_addresses(
            node_ips=s.node_ips,
            hostname=s.hostname,
            host=facts.network,
            lookup=lambda _: facts.resolved_hostname,
        )
    except setters.AddressError as e:
        problems.append(f"addresses: {e}")

    cap = setters.capacity(host=facts.host, max_pods=s.max_pods, rootfs_bytes=facts.rootfs_bytes)
    alloc = setters.allocatable(
        cap,
        kube_reserved=s.kube_reserved,
        system_reserved=s.system_reserved,
        eviction_hard=s.eviction_hard,
    )
    status["capacity"] = _merge_resources(status.get("capacity"), setters.render_resources(cap))
    status["allocatable"] = _merge_resources(
        status.get("allocatable"), setters.render_resources(alloc)
    )

    old_info = status.get("nodeInfo") or {}
    status["nodeInfo"] = {
        **old_info,
        **setters.node_info(
            host=facts.host,
            runtime_version=facts.runtime.version,
            kubelet_version=version or kubelet_version(),
        ),
    }
    if rebooted := setters.rebooted_event(
        str(old_info.get("bootID") or ""), facts.host.boot_id, s.node_name
    ):
        events.append(rebooted)
    status["daemonEndpoints"] = setters.daemon_endpoints(s.kubelet_port)
    if s.declared_features:
        status["declaredFeatures"] = list(s.declared_features)
    elif s.declared_features is not None:
        status.pop("declaredFeatures", None)
    if facts.images is not None:
        listed = setters.images(facts.images, max_images=s.node_status_max_images)
        if listed:
            status["images"] = listed
        else:
            status.pop("images", None)

    if facts.volumes_in_use:
        status["volumesInUse"] = sorted(facts.volumes_in_use)
    else:
        status.pop("volumesInUse", None)

    status["conditions"] = _conditions(
        status.get("conditions") or [], facts, s, cap=cap, now=now, events=events
    )
    return Computed(node=node, events=events, problems=problems)


def _conditions(
    old: list[Obj],
    facts: NodeFacts,
    s: NodeSettings,
    *,
    cap: Mapping[str, Fraction],
    now: str,
    events: list[Event],
) -> list[Obj]:
    """The pressure and Ready conditions, then the PSI contention ones (when enabled)."""
    conditions: list[Obj] = [dict(c) for c in old]
    by_type = {c.get("type"): i for i, c in enumerate(conditions)}
    pressures = {
        "MemoryPressure": facts.pressure.memory,
        "DiskPressure": facts.pressure.disk,
        "PIDPressure": facts.pressure.pid,
    }
    for kind in CONDITION_ORDER:
        existing = conditions[by_type[kind]] if kind in by_type else None
        if kind == "Ready":
            errors = setters.ready_errors(
                runtime=facts.runtime,
                other=facts.other_errors,
                cap=cap,
                local_storage=s.local_storage_capacity_isolation,
            )
            cond, event = setters.ready_condition(
                existing, errors=errors, now=now, node_name=s.node_name
            )
        else:
            cond, event = setters.pressure_condition(
                existing, kind=kind, under_pressure=pressures[kind], now=now, node_name=s.node_name
            )
        if kind in by_type:
            conditions[by_type[kind]] = cond
        else:
            by_type[kind] = len(conditions)
            conditions.append(cond)
        if event:
            events.append(event)
    for c in facts.pressure.contention:
        existing = conditions[by_type[c.type]] if c.type in by_type else None
        cond, event = setters.contention_condition(existing, c, now=now, node_name=s.node_name)
        if c.type in by_type:
            conditions[by_type[c.type]] = cond
        else:
            by_type[c.type] = len(conditions)
            conditions.append(cond)
        if event:
            events.append(event)
    return conditions


def _merge_resources(old: Mapping[str, str] | None, ours: Mapping[str, str]) -> dict[str, str]:
    """Our resources replace theirs; hugepage sizes that vanished go; extended resources stay."""
    kept = {
        k: v
        for k, v in (old or {}).items()
        if k not in ours and not k.startswith("hugepages-") and "/" in k
    }
    return {**kept, **ours}


def _comparable_status(node: Mapping[str, Any]) -> Obj:
    status = copy.deepcopy(dict(node.get("status") or {}))
    conds = [
        {k: v for k, v in c.items() if k != "lastHeartbeatTime"}
        for c in status.pop("conditions", None) or []
    ]
    status["conditions"] = sorted(conds, key=lambda c: str(c.get("type")))
    return status


def node_changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """``nodeStatusHasChanged`` (heartbeat times ignored, conditions by type) or labels changed."""
    old_labels = (old.get("metadata") or {}).get("labels") or {}
    new_labels = (new.get("metadata") or {}).get("labels") or {}
    return old_labels != new_labels or _comparable_status(old) != _comparable_status(new)

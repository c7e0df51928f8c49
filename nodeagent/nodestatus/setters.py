"""Node status setters: small pure functions from facts to pieces of ``Node.status``.

As the kubelet's ``nodestatus/setters.go``, each setter owns one part (addresses, capacity and
allocatable, nodeInfo, daemon endpoints, one condition) and is tested on its own; the status
manager composes them in :func:`nodeagent.nodestatus.compute.compute_node`.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Protocol

from nodeagent.apiserver import Obj
from nodeagent.hostinfo import HostInfo, HostNetwork, IPAddress
from nodeagent.nodestatus.quantity import (
    format_binary,
    format_decimal,
    parse_percentage,
    parse_quantity,
)

RUNTIME_NOT_CHECKED: Final = "container runtime status check may not have completed yet"
RUNTIME_VERSION_UNKNOWN: Final = "unknown"


@dataclass(frozen=True)
class RuntimeStatus:
    """What the container runtime adds to Ready: error texts (empty when ready) and version."""

    errors: tuple[str, ...]
    version: str


def runtime_not_checked() -> RuntimeStatus:
    """The runtime status until CRI is wired in: never checked, version unknown."""
    return RuntimeStatus(errors=(RUNTIME_NOT_CHECKED,), version=RUNTIME_VERSION_UNKNOWN)


@dataclass(frozen=True)
class Contention:
    """A PSI contention condition (KEP-5394) as the contention monitor decided it."""

    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class Pressure:
    memory: bool = False
    disk: bool = False
    pid: bool = False
    contention: tuple[Contention, ...] = ()
    """The enabled PSI contention conditions (empty when ``PSINodeCondition`` is off)."""


@dataclass(frozen=True)
class Event:
    type: str
    reason: str
    message: str


# --- addresses ------------------------------------------------------------------------------


class AddressError(Exception):
    pass


def validate_node_ip(ip: IPAddress, host: HostNetwork) -> str | None:
    """The kubelet's ``validateNodeIP``: an error text, or None when usable."""
    if ip.is_loopback:
        return "nodeIP can't be loopback address"
    if ip.is_multicast:
        return "nodeIP can't be a multicast address"
    if ip.is_link_local:
        return "nodeIP can't be a link-local unicast address"
    if ip.is_unspecified:
        return "nodeIP can't be an all zeros address"
    if ip not in host.all_addresses():
        return f'node IP: "{ip}" not found in the host\'s network interfaces'
    return None


def _global(ip: IPAddress) -> bool:
    return not (ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified)


def node_addresses(
    *,
    node_ips: Sequence[IPAddress],
    hostname: str,
    host: HostNetwork,
    lookup: Callable[[str], Sequence[IPAddress]],
) -> list[Obj]:
    """``[{InternalIP, ip}..., {Hostname, hostname}]`` as the kubelet reports without a cloud."""
    hostname_entry = {"type": "Hostname", "address": hostname}
    explicit = [ip for ip in node_ips if not ip.is_unspecified]
    if explicit:
        for ip in explicit:
            if problem := validate_node_ip(ip, host):
                raise AddressError(problem)
        return [*({"type": "InternalIP", "address": str(ip)} for ip in explicit), hostname_entry]
    want_v6 = bool(node_ips) and node_ips[0].version == 6
    chosen = _from_hostname(hostname) or _from_lookup(hostname, lookup, host, want_v6)
    chosen = chosen or _from_default_route(host, want_v6)
    if chosen is None:
        raise AddressError(
            f"can't get ip address of node {hostname}: no default-route interface "
            "has a global address"
        )
    return [{"type": "InternalIP", "address": str(chosen)}, hostname_entry]


def _from_hostname(hostname: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(hostname)
    except ValueError:
        return None


def _from_lookup(
    hostname: str, lookup: Callable[[str], Sequence[IPAddress]], host: HostNetwork, want_v6: bool
) -> IPAddress | None:
    for ip in lookup(hostname):
        if validate_node_ip(ip, host) is None and (ip.version == 6) == want_v6:
            return ip
    return None


def _from_default_route(host: HostNetwork, want_v6: bool) -> IPAddress | None:
    for iface in host.default_route_interfaces:
        for ip in host.addresses.get(iface, ()):
            if _global(ip) and (ip.version == 6) == want_v6:
                return ip
    return None


# --- capacity and allocatable ---------------------------------------------------------------


def _hugepage_name(size: int) -> str:
    return f"hugepages-{format_binary(size)}"


def capacity(*, host: HostInfo, max_pods: int, rootfs_bytes: int | None) -> dict[str, Fraction]:
    cap: dict[str, Fraction] = {
        "cpu": Fraction(host.num_cpus),
        "memory": Fraction(host.memory_bytes),
        "pods": Fraction(max_pods),
    }
    if rootfs_bytes is not None:
        cap["ephemeral-storage"] = Fraction(rootfs_bytes)
    for size, pages in sorted(host.hugepages.items()):
        cap[_hugepage_name(size)] = Fraction(size * pages)
    return cap


def eviction_reservation(
    eviction_hard: Mapping[str, str], cap: Mapping[str, Fraction]
) -> dict[str, Fraction]:
    """``hardEvictionReservation``: memory.available and nodefs.available as resources."""
    out: dict[str, Fraction] = {}
    for signal, resource in (
        ("memory.available", "memory"),
        ("nodefs.available", "ephemeral-storage"),
    ):
        value = eviction_hard.get(signal)
        if not value or resource not in cap:
            continue
        percent = parse_percentage(value)
        if percent is not None:
            out[resource] = Fraction(int(float(cap[resource]) * float(percent / 100)))
        else:
            out[resource] = parse_quantity(value)
    return out


def allocatable(
    cap: Mapping[str, Fraction],
    *,
    kube_reserved: Mapping[str, Fraction],
    system_reserved: Mapping[str, Fraction],
    eviction_hard: Mapping[str, str],
) -> dict[str, Fraction]:
    eviction = eviction_reservation(eviction_hard, cap)
    alloc: dict[str, Fraction] = {}
    for name, value in cap.items():
        reserved = kube_reserved.get(name, 0) + system_reserved.get(name, 0) + eviction.get(name, 0)
        alloc[name] = max(Fraction(0), value - reserved)
    hugepages = sum((v for k, v in cap.items() if k.startswith("hugepages-")), Fraction(0))
    if "memory" in alloc:
        alloc["memory"] = max(Fraction(0), alloc["memory"] - hugepages)
    return alloc


_BINARY_RESOURCES: Final = ("memory", "ephemeral-storage")


def render_resources(values: Mapping[str, Fraction]) -> dict[str, str]:
    return {
        name: (
            format_binary(v)
            if name in _BINARY_RESOURCES or name.startswith("hugepages-")
            else format_decimal(v)
        )
        for name, v in values.items()
    }


# --- nodeInfo and endpoints -----------------------------------------------------------------


def node_info(*, host: HostInfo, runtime_version: str, kubelet_version: str) -> Obj:
    info: Obj = {
        "machineID": host.machine_id,
        "systemUUID": host.system_uuid,
        "bootID": host.boot_id,
        "kernelVersion": host.kernel_version,
        "osImage": host.os_image,
        "containerRuntimeVersion": runtime_version,
        "kubeletVersion": kubelet_version,
        "kubeProxyVersion": "",
        "operatingSystem": host.operating_system,
        "architecture": host.architecture,
    }
    if host.swap_bytes:
        info["swap"] = {"capacity": host.swap_bytes}
    return info


def daemon_endpoints(port: int) -> Obj:
    return {"kubeletEndpoint": {"Port": port}}


# --- images ---------------------------------------------------------------------------------

MAX_NAMES_PER_IMAGE: Final = 5  # MaxNamesPerImageInNodeStatus


class RuntimeImage(Protocol):
    """An image as the runtime lists it (a CRI ``Image`` has these fields)."""

    @property
    def id(self) -> str: ...

    @property
    def repo_tags(self) -> Sequence[str]: ...

    @property
    def repo_digests(self) -> Sequence[str]: ...

    @property
    def size(self) -> int: ...


def images(listed: Sequence[RuntimeImage], *, max_images: int) -> list[Obj]:
    """``status.images``: largest first (equal sizes by id, descending, as ``ByImageSize``),
    at most ``max_images`` (-1: all), each named by its repo digests then its repo tags, at
    most 5 names."""
    ordered = sorted(listed, key=lambda image: (image.size, image.id), reverse=True)
    if max_images > -1:
        ordered = ordered[:max_images]
    return [
        {
            "names": [*image.repo_digests, *image.repo_tags][:MAX_NAMES_PER_IMAGE],
            "sizeBytes": image.size,
        }
        for image in ordered
    ]


# --- conditions -----------------------------------------------------------------------------

# type -> (True reason, True message, True event), (False reason, False message, False event)
PRESSURE: Final[Mapping[str, tuple[tuple[str, str, str], tuple[str, str, str]]]] = {
    "MemoryPressure": (
        (
            "KubeletHasInsufficientMemory",
            "kubelet has insufficient memory available",
            "NodeHasInsufficientMemory",
        ),
        (
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available",
            "NodeHasSufficientMemory",
        ),
    ),
    "DiskPressure": (
        ("KubeletHasDiskPressure", "kubelet has disk pressure", "NodeHasDiskPressure"),
        ("KubeletHasNoDiskPressure", "kubelet has no disk pressure", "NodeHasNoDiskPressure"),
    ),
    "PIDPressure": (
        (
            "KubeletHasInsufficientPID",
            "kubelet has insufficient PID available",
            "NodeHasInsufficientPID",
        ),
        ("KubeletHasSufficientPID", "kubelet has sufficient PID available", "NodeHasSufficientPID"),
    ),
}


def status_event(node_name: str, reason: str) -> Event:
    """``recordNodeStatusEvent``: a Normal event "Node <name> status is now: <reason>"."""
    return Event("Normal", reason, f"Node {node_name} status is now: {reason}")


def pressure_condition(
    existing: Mapping[str, Any] | None, *, kind: str, under_pressure: bool, now: str, node_name: str
) -> tuple[Obj, Event | None]:
    """A pressure condition; a new one starts Unknown so its first evaluation is a transition."""
    cond: Obj = dict(existing) if existing else {"type": kind, "status": "Unknown"}
    cond["lastHeartbeatTime"] = now
    (t_reason, t_msg, t_event), (f_reason, f_msg, f_event) = PRESSURE[kind]
    want, reason, msg, event = (
        ("True", t_reason, t_msg, t_event)
        if under_pressure
        else ("False", f_reason, f_msg, f_event)
    )
    if cond.get("status") == want:
        return cond, None
    cond.update(status=want, reason=reason, message=msg, lastTransitionTime=now)
    return cond, status_event(node_name, event)


def contention_condition(
    existing: Mapping[str, Any] | None, c: Contention, *, now: str, node_name: str
) -> tuple[Obj, Event | None]:
    """A PSI contention condition; a transition to True or False records the node status event
    ``NodeHas<Type>`` / ``NodeHasNo<Type>`` as the pressure conditions do."""
    cond: Obj = dict(existing) if existing else {"type": c.type, "status": "Unknown"}
    cond["lastHeartbeatTime"] = now
    if cond.get("status") == c.status and cond.get("reason") == c.reason:
        return cond, None
    transition = cond.get("status") != c.status
    cond.update(status=c.status, reason=c.reason, message=c.message)
    if not transition:
        return cond, None
    cond["lastTransitionTime"] = now
    if c.status == "True":
        return cond, status_event(node_name, f"NodeHas{c.type}")
    if c.status == "False":
        return cond, status_event(node_name, f"NodeHasNo{c.type}")
    return cond, None


def aggregate(errors: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(...).Error()``: one text alone, several as ``[a, b]``."""
    return errors[0] if len(errors) == 1 else "[" + ", ".join(errors) + "]"


def ready_errors(
    *, runtime: RuntimeStatus, other: Sequence[str], cap: Mapping[str, Any], local_storage: bool
) -> list[str]:
    errors = [*runtime.errors, *other]
    required = ["cpu", "memory", "pods"] + (["ephemeral-storage"] if local_storage else [])
    missing = [r for r in required if r not in cap]
    if missing:
        errors.append(f"missing node capacity for resources: {', '.join(missing)}")
    return errors


def ready_condition(
    existing: Mapping[str, Any] | None, *, errors: Sequence[str], now: str, node_name: str
) -> tuple[Obj, Event | None]:
    if errors:
        new: Obj = {
            "type": "Ready",
            "status": "False",
            "reason": "KubeletNotReady",
            "message": aggregate(errors),
        }
    else:
        new = {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
        }
    new["lastHeartbeatTime"] = now
    if existing is None:
        new["lastTransitionTime"] = now
        return new, None
    if existing.get("status") == new["status"]:
        new["lastTransitionTime"] = existing.get("lastTransitionTime", now)
        return new, None
    new["lastTransitionTime"] = now
    reason = "NodeReady" if new["status"] == "True" else "NodeNotReady"
    return new, status_event(node_name, reason)


def rebooted_event(old_boot_id: str, new_boot_id: str, node_name: str) -> Event | None:
    if old_boot_id and new_boot_id and old_boot_id != new_boot_id:
        return Event(
            "Warning", "Rebooted", f"Node {node_name} has been rebooted, boot id: {new_boot_id}"
        )
    return None

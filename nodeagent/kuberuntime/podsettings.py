"""The node settings the sandbox and container builders need, as one frozen value.

Built by the composition root from the configuration (``kubelet.clusterDNS``, ``podLogsDir``,
``cgroupDriver``, ...) and the machine (memory capacity, cgroup version), so the builders stay
pure and the runtime package does not depend on the configuration's layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from nodeagent.kuberuntime.resources import SwapInputs

CgroupDriver = Literal["cgroupfs", "systemd"]


@dataclass(frozen=True, kw_only=True)
class ResolvConf:
    """The host's resolver settings (the base of ``dnsPolicy: Default``)."""

    servers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[str, ...] = ()


@dataclass(frozen=True, kw_only=True)
class PodRuntimeSettings:
    node_name: str
    root_dir: str = "/var/lib/nodeagent"
    pod_logs_dir: str = "/var/log/pods"
    container_logs_dir: str = "/var/log/containers"
    cluster_dns: tuple[str, ...] = ()
    cluster_domain: str = ""
    resolv_conf: str = "/etc/resolv.conf"
    node_ips: tuple[str, ...] = ()
    cgroup_driver: CgroupDriver = "cgroupfs"
    cgroups_per_qos: bool = True
    cgroup_root: str = "/"
    cgroup_v2: bool = False
    cpu_cfs_quota: bool = True
    cpu_cfs_quota_period_us: int = 100_000
    memory_capacity: int = 0
    """Node memory in bytes: Burstable containers' OOM score adjustment is relative to it."""
    node_allocatable: dict[str, str] = field(default_factory=dict)
    """Defaults for downward-API ``limits.*`` of containers that set no limit."""
    runtime_name: str = "containerd"
    runtime_handler: str = ""
    seccomp_default: bool = False
    """``kubelet.seccompDefault``: containers without a seccompProfile get RuntimeDefault."""
    single_process_oom_kill: bool = False
    """``kubelet.singleProcessOOMKill``: without it (cgroup v2) a container's processes are
    OOM-killed together (``memory.oom.group`` 1)."""
    swap: SwapInputs = field(default_factory=SwapInputs)
    """``memorySwap.swapBehavior`` and the node's memory, swap and swap controller."""
    hostname_override: bool = True
    """The ``HostnameOverride`` feature gate: ``spec.hostnameOverride`` names the pod."""
    node_hosts_file: str = "/etc/hosts"
    """The node's hosts file: what a ``hostNetwork`` pod's managed /etc/hosts starts from."""

    def pod_log_dir(self, *, namespace: str, name: str, uid: str) -> str:
        """``/var/log/pods/<namespace>_<name>_<uid>``."""
        return str(PurePosixPath(self.pod_logs_dir) / f"{namespace}_{name}_{uid}")

    def pod_dir(self, uid: str) -> str:
        return str(PurePosixPath(self.root_dir) / "pods" / uid)

    @property
    def seccomp_profile_root(self) -> str:
        """Where ``Localhost`` seccomp profiles live: ``<rootDir>/seccomp``."""
        return str(PurePosixPath(self.root_dir) / "seccomp")

"""The PodSandboxConfig of a pod, as the kubelet's ``generatePodSandboxConfig`` builds it.

Metadata (name, namespace, uid, attempt), the ``io.kubernetes.*`` labels, the pod's
annotations, hostname (none with host networking), DNS, the log directory
``<podLogsDir>/<namespace>_<name>_<uid>``, port mappings of every container port, and the
Linux part: the cgroup parent in the QoS hierarchy, namespaces, sysctls and the sandbox
security context. Pure.
"""

from __future__ import annotations

import ipaddress
from typing import Final

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.dns import kernel_hostname, pod_dns
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.podspec import Pod
from nodeagent.qos import QOSClass, pod_qos_class
from nodeagent.sysctl import normalize_name

PROTOCOLS: Final = {"TCP": api.TCP, "UDP": api.UDP, "SCTP": api.SCTP}
POD_CGROUP_PREFIX: Final = "pod"
KUBEPODS: Final = "kubepods"
# the cgroupfs directories of the QoS classes below kubepods (Guaranteed pods sit in kubepods)
QOS_DIRS: Final = ("", "burstable", "besteffort")


def _root_parts(cgroup_root: str) -> list[str]:
    parts = [p for p in cgroup_root.split("/") if p]
    if parts and parts[-1].endswith(".slice"):
        last = parts[-1].removesuffix(".slice")
        return [p.replace("_", "-") for p in last.split("-")] if last != "-" else []
    return parts


def _to_systemd(parts: list[str]) -> str:
    """``ToSystemd``: ``[kubepods, burstable, pod1-2]`` ->
    ``/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1_2.slice``."""
    if not parts:
        return "/"
    escaped = [p.replace("-", "_") for p in parts]
    return "/" + "/".join("-".join(escaped[: i + 1]) + ".slice" for i in range(len(escaped)))


def pod_cgroup_name(pod: Pod, *, cgroups_per_qos: bool, cgroup_root: str) -> list[str]:
    """The pod's cgroup as the kubelet's internal ``CgroupName`` (a list of parts)."""
    root = _root_parts(cgroup_root)
    if not cgroups_per_qos:
        return root
    qos = pod_qos_class(pod)
    tier = {QOSClass.BURSTABLE: ["burstable"], QOSClass.BEST_EFFORT: ["besteffort"]}.get(qos, [])
    return [*root, KUBEPODS, *tier, f"{POD_CGROUP_PREFIX}{pod.uid}"]


def cgroup_path(parts: list[str], driver: CgroupDriver) -> str:
    """A cgroup name as a path below the cgroup mount: ``/kubepods/burstable/pod<uid>``
    (cgroupfs) or the expanded systemd slice path."""
    if driver == "systemd":
        return _to_systemd(parts)
    return "/" + "/".join(parts)


def root_cgroup_name(cgroup_root: str) -> list[str]:
    """``cgroupRoot`` as a ``CgroupName`` (``/`` -> ``[]``)."""
    return _root_parts(cgroup_root)


def pod_cgroup_parent(pod: Pod, settings: PodRuntimeSettings) -> str:
    """``/kubepods/burstable/pod<uid>`` (cgroupfs) or the expanded systemd slice path."""
    parts = pod_cgroup_name(
        pod, cgroups_per_qos=settings.cgroups_per_qos, cgroup_root=settings.cgroup_root
    )
    return cgroup_path(parts, settings.cgroup_driver)


def port_mappings(pod: Pod) -> list[cri.PortMapping]:
    """Every container port, skipping a name used twice in one container."""
    out = []
    for container in pod.spec.containers:
        names: set[str] = set()
        for port in container.ports:
            family = "any"
            if port.host_ip:
                family = "v6" if ipaddress.ip_address(port.host_ip).version == 6 else "v4"
            name = port.name or (
                f"{family}-{port.protocol}-{port.host_ip}:{port.container_port}:{port.host_port}"
            )
            if name in names:
                continue
            names.add(name)
            out.append(
                cri.PortMapping(
                    protocol=PROTOCOLS.get(port.protocol, api.TCP),
                    container_port=port.container_port,
                    host_port=port.host_port,
                    host_ip=port.host_ip,
                )
            )
    return out


def namespace_options(pod: Pod) -> api.NamespaceOption:
    spec = pod.spec
    pid = api.CONTAINER
    if spec.host_pid:
        pid = api.NODE
    elif spec.share_process_namespace:
        pid = api.POD
    return api.NamespaceOption(
        network=api.NODE if spec.host_network else api.POD,
        ipc=api.NODE if spec.host_ipc else api.POD,
        pid=pid,
    )


def _privileged(pod: Pod) -> bool:
    return any(
        c.security_context is not None and bool(c.security_context.privileged)
        for c in (*pod.spec.init_containers, *pod.spec.containers)
    )


def linux_sandbox_config(pod: Pod, settings: PodRuntimeSettings) -> cri.LinuxPodSandboxConfig:
    sc = api.LinuxSandboxSecurityContext(
        namespace_options=namespace_options(pod),
        privileged=_privileged(pod),
        seccomp=api.SecurityProfile(profile_type=api.SecurityProfile.RuntimeDefault),
    )
    psc = pod.spec.security_context
    sysctls: dict[str, str] = {}
    if psc is not None:
        if psc.run_as_user is not None:
            sc.run_as_user.value = psc.run_as_user
        if psc.run_as_group is not None:
            sc.run_as_group.value = psc.run_as_group
        if psc.fs_group is not None:
            sc.supplemental_groups.append(psc.fs_group)
        sc.supplemental_groups.extend(psc.supplemental_groups)
        # dotted names (net/ipv4/ip_forward -> net.ipv4.ip_forward): runc checks the dotted
        # form against the namespaces it creates, as the kubelet converts them
        sysctls = {normalize_name(s.name): s.value for s in psc.sysctls}
    return cri.LinuxPodSandboxConfig(
        cgroup_parent=pod_cgroup_parent(pod, settings), security_context=sc, sysctls=sysctls
    )


def build_sandbox_config(
    pod: Pod, *, settings: PodRuntimeSettings, attempt: int, host_dns: ResolvConf
) -> tuple[cri.PodSandboxConfig, list[str]]:
    """The sandbox config and DNS warnings. Raises ``PodDNSError`` for a bad hostname."""
    dns, warnings = pod_dns(pod, settings=settings, host=host_dns)
    config = cri.PodSandboxConfig(
        metadata=cri.PodSandboxMetadata(
            name=pod.name, namespace=pod.namespace, uid=pod.uid, attempt=attempt
        ),
        labels=labels.pod_labels(pod),
        annotations=dict(pod.metadata.annotations),
        dns_config=dns,
        log_directory=settings.pod_log_dir(namespace=pod.namespace, name=pod.name, uid=pod.uid),
        port_mappings=port_mappings(pod),
        linux=linux_sandbox_config(pod, settings),
    )
    if not pod.spec.host_network:
        config.hostname = kernel_hostname(
            pod,
            cluster_domain=settings.cluster_domain,
            hostname_override=settings.hostname_override,
        )
    return config, warnings

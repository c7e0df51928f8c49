"""The pod's kubelet-managed /etc/hosts, as the kubelet's ``makeHostsMount`` builds it.

``<rootDir>/pods/<uid>/etc-hosts`` is (re)written before each container is created, once the
pod's IPs are known (after the sandbox), and bind-mounted read-write at ``/etc/hosts`` into
every container (init containers and sidecars too) that does not mount something at
``/etc/hosts`` itself. A pod on the pod network gets the managed header, the localhost lines and
one line per pod IP naming the pod (``<hostname>.<domain>`` and ``<hostname>`` with a subdomain,
else the hostname); a ``hostNetwork`` pod gets the node's own hosts file under the host-network
header. ``spec.hostAliases`` follow in both, one line per alias.

The content and the mount decision are pure; the caller writes the file.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from typing import Final

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.podspec import Container, HostAlias, Pod

ETC_HOSTS: Final = "/etc/hosts"
FILE_NAME: Final = "etc-hosts"
FILE_MODE: Final = 0o644
MANAGED_HEADER: Final = "# Kubernetes-managed hosts file.\n"
HOST_NETWORK_HEADER: Final = "# Kubernetes-managed hosts file (host network).\n"
ALIASES_HEADER: Final = "# Entries added by HostAliases.\n"
LOCALHOST_LINES: Final = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)


def host_alias_entries(aliases: Sequence[HostAlias]) -> bytes:
    """A blank line, the HostAliases header and ``<ip>\\t<name>\\t<name>...`` per alias;
    nothing without aliases."""
    if not aliases:
        return b""
    lines = ["\n", ALIASES_HEADER]
    for alias in aliases:
        names = "\t".join(alias.hostnames)
        lines.append(f"{alias.ip}\t{names}\n")
    return "".join(lines).encode()


def managed_hosts_content(
    pod_ips: Sequence[str], hostname: str, domain: str, aliases: Sequence[HostAlias]
) -> bytes:
    """The hosts file of a pod on the pod network (``managedHostsFileContent``)."""
    lines = [MANAGED_HEADER, LOCALHOST_LINES]
    for ip in pod_ips:
        if domain:
            lines.append(f"{ip}\t{hostname}.{domain}\t{hostname}\n")
        else:
            lines.append(f"{ip}\t{hostname}\n")
    return "".join(lines).encode() + host_alias_entries(aliases)


def host_network_hosts_content(node_hosts: bytes, aliases: Sequence[HostAlias]) -> bytes:
    """The hosts file of a ``hostNetwork`` pod: the node's, as it is, under its own header
    (``nodeHostsFileContent``)."""
    return HOST_NETWORK_HEADER.encode() + node_hosts + host_alias_entries(aliases)


def should_mount_hosts_file(pod: Pod, pod_ips: Sequence[str]) -> bool:
    """The pod gets a managed /etc/hosts once it has an IP, or at once on the host network
    (``shouldMountHostsFile``)."""
    return bool(pod_ips) or pod.spec.host_network


def mounts_own_hosts_file(container: Container) -> bool:
    """The container mounts a volume at ``/etc/hosts`` itself: it keeps that one (the
    kubelet compares the mount path as written)."""
    return any(mount.mount_path == ETC_HOSTS for mount in container.volume_mounts)


def hosts_file_path(settings: PodRuntimeSettings, uid: str) -> str:
    """``<rootDir>/pods/<uid>/etc-hosts``."""
    return posixpath.join(settings.pod_dir(uid), FILE_NAME)


def hosts_mount(host_path: str) -> cri.Mount:
    """The bind mount of the pod's hosts file; read-write, as the kubelet mounts it; no
    SELinux relabel, as for every other mount (nodeagent runs no SELinux labelling)."""
    return cri.Mount(
        container_path=ETC_HOSTS,
        host_path=host_path,
        readonly=False,
        selinux_relabel=False,
        propagation=api.PROPAGATION_PRIVATE,
    )

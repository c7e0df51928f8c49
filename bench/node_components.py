"""How `node_idle` runs each node component, and undoing what the kubelet does to the host.

Both components get a node client certificate (``CN=system:node:<name>``) from the control
plane's CA, their own root directory under the bench's temp dir, the bench's containerd, and
default verbosity. The kubelet gets a KubeletConfiguration for this kind of host: cgroup v1
allowed, cgroupfs driver, no swap check, its servers on 127.0.0.1 free ports with x509 client
auth against the cluster CA and no webhook, and every path it would create under /var or /usr
moved under its root dir.

What the kubelet changes outside its root dir, and `HostState` puts back: the sysctls of its
"kernel tunables" (it sets them when ``protectKernelDefaults`` is false), the ``kubepods``
cgroups it makes in every cgroup v1 hierarchy (``cgroupsPerQOS``), ``/var/log/containers``.
Its root dir becomes a (shared) bind mount of itself; the caller unmounts it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harness.controlplane_args import LOCALHOST, free_port
from harness.hoststate import CONTAINER_LOGS, cgroup_hierarchies
from harness.versions import Versions


def nodeagent_argv(
    *, name: str, kubeconfig: Path, root: Path, endpoint: str, config: Path | None = None
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "nodeagent",
        "run",
        *([f"--config={config}"] if config else []),
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={name}",
        f"--root-dir={root}",
        f"--container-runtime-endpoint={endpoint}",
    ]


def x509_only(ca: Path) -> dict[str, object]:
    """The kubelet API's authentication and authorization: client certificates from ``ca``,
    no anonymous user, no webhook, every authenticated request allowed."""
    return {
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "AlwaysAllow"},
    }


def nodeagent_config(
    *, root: Path, versions: Versions, cgroup_root: str = "", ca: Path | None = None
) -> dict[str, object]:
    """A nodeagent configuration matching `kubelet_config` where both have the field, with the
    service proxy off (it would program nftables in this host's root namespace); with ``ca``,
    its API's authentication and authorization as the kubelet's (`x509_only`)."""
    kubelet: dict[str, object] = {
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "address": LOCALHOST,
        "port": free_port(),
        "healthzBindAddress": LOCALHOST,
        "healthzPort": free_port(),
        "clusterDomain": versions.cluster_domain,
        "clusterDNS": [versions.cluster_dns_ip],
        "resolvConf": "/etc/resolv.conf",
        "podLogsDir": str(root / "pod-logs"),
    }
    if cgroup_root:
        kubelet["cgroupRoot"] = cgroup_root
    if ca is not None:
        kubelet.update(x509_only(ca))
    return {
        "apiVersion": "nodeagent.io/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "kubelet": kubelet,
        "proxy": {"enabled": False},
    }


def kubelet_config(*, root: Path, endpoint: str, ca: Path, versions: Versions) -> dict[str, object]:
    """A KubeletConfiguration for a cgroup v1 host without systemd (JSON is valid YAML)."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": endpoint,
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "address": LOCALHOST,
        "port": free_port(),
        "readOnlyPort": 0,
        "healthzBindAddress": LOCALHOST,
        "healthzPort": free_port(),
        **x509_only(ca),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "clusterDomain": versions.cluster_domain,
        "clusterDNS": [versions.cluster_dns_ip],
        "resolvConf": "/etc/resolv.conf",
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE here: it could not lower its own score
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "volume-plugins"),
    }


def kubelet_argv(
    binary: Path, *, name: str, kubeconfig: Path, root: Path, config: Path
) -> list[str]:
    return [
        str(binary),
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--hostname-override={name}",
        f"--root-dir={root}",
        f"--cert-dir={root / 'pki'}",
    ]


def write_config(path: Path, config: dict[str, object]) -> Path:
    """Write a component's config file (JSON, which is valid YAML for both)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def make_cgroup_root(name: str) -> str:
    """Create ``/<name>`` in every cgroup hierarchy (the kubelet refuses a ``cgroupRoot`` that
    does not exist); cpuset gets the root's cpus and mems so children can be populated."""
    for hierarchy in cgroup_hierarchies():
        (hierarchy / name).mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            for knob in ("cpuset.cpus", "cpuset.mems"):
                (hierarchy / name / knob).write_text((hierarchy / knob).read_text())
    return f"/{name}"


def remove_log_links(namespace: str) -> int:
    """Remove the ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log`` links of the
    bench's pods (both components make them; stopping containerd leaves them behind)."""
    links = list(CONTAINER_LOGS.glob(f"*_{namespace}_*.log"))
    for link in links:
        link.unlink(missing_ok=True)
    return len(links)

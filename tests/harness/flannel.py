"""flannel as the pod network of a multi-node cluster: its DaemonSet in the upstream manifest's
shape (flannel's Documentation/kube-flannel.yml at FLANNEL_VERSION), with images made here.

- ``ghcr.io/flannel-io/flannel:<FLANNEL_VERSION>``: ``/opt/bin/flanneld`` and
  ``/opt/bin/install-conf`` (`cnibuild`), plus Debian's iptables (``xtables-nft-multi``, its
  shared libraries and extensions), which flanneld runs for its masquerade and forward rules, as
  the upstream image's Alpine iptables.
- ``ghcr.io/flannel-io/flannel-cni-plugin:<FLANNEL_CNI_PLUGIN_VERSION>``: ``/flannel`` and a
  static busybox for the init container's ``cp``.

Both are pushed to the local registry under those names and pulled through the mirrors. The
objects are upstream's: Namespace ``kube-flannel``, ClusterRole/Binding ``flannel``,
ServiceAccount, ConfigMap ``kube-flannel-cfg`` and DaemonSet ``kube-flannel-ds`` (hostNetwork,
``system-node-critical``, tolerates every NoSchedule taint, NET_ADMIN/NET_RAW, hostPaths
``/run/flannel``, ``/opt/cni/bin``, ``/etc/cni/net.d``, ``/run/xtables.lock``, the two init
containers that copy the plugin and write ``10-flannel.conflist``). Two values differ: the
ConfigMap's ``Network`` is this cluster's pod range (upstream's is the same 10.244.0.0/16), and
the CNI config says ``cniVersion: 0.4.0``, the newest the v0.9.1 plugin speaks (upstream's
``1.0.0`` needs the newer plugin the module proxy does not serve).

The node's standard plugins (bridge, host-local, portmap, loopback) are not part of flannel's
manifest: a kubeadm node gets them from its OS package. `install_node_plugins` puts them in a
node's ``/opt/cni/bin``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import cnibuild, mirrors
from harness.controlplane import ControlPlane
from harness.images import oci
from harness.images.recipes import BUSYBOX, busybox_applets
from harness.versions import load_versions

NAMESPACE = "kube-flannel"
DAEMONSET = "kube-flannel-ds"
CONFIGMAP = "kube-flannel-cfg"
CNI_VERSION = "0.4.0"  # the newest the flannel CNI plugin at FLANNEL_CNI_PLUGIN_VERSION speaks
IPTABLES = Path("/usr/sbin/xtables-nft-multi")
XTABLES_DIR = Path("/usr/lib/x86_64-linux-gnu/xtables")
IPTABLES_NAMES = (
    "iptables",
    "iptables-save",
    "iptables-restore",
    "ip6tables",
    "ip6tables-save",
    "ip6tables-restore",
)


def flannel_image() -> str:
    return f"ghcr.io/flannel-io/flannel:{load_versions().flannel}"


def cni_plugin_image() -> str:
    return f"ghcr.io/flannel-io/flannel-cni-plugin:{load_versions().flannel_cni_plugin}"


# --- images -------------------------------------------------------------------------------------


def shared_libraries(binaries: list[Path]) -> list[Path]:
    """The shared objects `binaries` load (ldd), and the dynamic loader, as ldd names them."""
    found: dict[str, None] = {}
    for binary in binaries:
        out = subprocess.run(
            ["ldd", str(binary)], capture_output=True, text=True, check=False
        ).stdout
        for line in out.splitlines():
            parts = line.split()
            if "=>" in parts and len(parts) >= 3 and parts[2].startswith("/"):
                found[parts[2]] = None
            elif parts and parts[0].startswith("/"):
                found[parts[0]] = None
    return [Path(p) for p in found]


def _file(path: Path, *, at: str | None = None, mode: int = 0o755) -> oci.Entry:
    return oci.Entry(
        path=(at or str(path)).lstrip("/"), kind="file", mode=mode, data=path.read_bytes()
    )


def iptables_entries() -> list[oci.Entry]:
    """Debian's iptables-nft: the multi-call binary, its names, extensions and libraries."""
    extensions = sorted(XTABLES_DIR.glob("*.so"))
    entries = [_file(IPTABLES.resolve(), at=str(IPTABLES))]
    entries += [
        oci.Entry(path=f"usr/sbin/{name}", kind="symlink", target="xtables-nft-multi")
        for name in IPTABLES_NAMES
    ]
    entries += [_file(so, mode=0o644) for so in extensions]
    entries += [
        _file(lib.resolve(), at=str(lib), mode=0o755)
        for lib in shared_libraries([IPTABLES, *extensions])
    ]
    return entries


def _base_entries() -> list[oci.Entry]:
    return [
        oci.Entry(path="run", kind="dir"),
        oci.Entry(path="tmp", kind="dir", mode=0o1777),
        oci.Entry(path="etc/passwd", kind="file", mode=0o644, data=b"root:x:0:0:root:/root:/\n"),
        oci.Entry(path="etc/group", kind="file", mode=0o644, data=b"root:x:0:\n"),
    ]


def _write(out_dir: Path, name: str, entries: list[oci.Entry], config: oci.ImageConfig) -> Path:
    slug = name.replace("/", "_").replace(":", "_")
    layout = out_dir / slug
    work = Path(tempfile.mkdtemp(prefix=f".{slug}-", dir=out_dir))
    try:
        oci.write_layout(work / "layout", entries=entries, config=config, names=[name])
        shutil.rmtree(layout, ignore_errors=True)
        (work / "layout").rename(layout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return layout


def build_images(out_dir: Path) -> dict[str, Path]:
    """Both images as OCI layouts under `out_dir`: image name -> layout."""
    flannel, plugin, _ = cnibuild.ensure_all()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    flannel_entries = [
        *_base_entries(),
        _file(flannel.path("flanneld"), at="/opt/bin/flanneld"),
        _file(flannel.path("install-conf"), at="/opt/bin/install-conf"),
        *iptables_entries(),
    ]
    plugin_entries = [
        *_base_entries(),
        _file(plugin.path("flannel"), at="/flannel"),
        _file(BUSYBOX, at="/bin/busybox"),
        *[oci.Entry(path=p, kind="symlink", target="/bin/busybox") for p in busybox_applets()],
    ]
    return {
        flannel_image(): _write(
            out_dir,
            flannel_image(),
            flannel_entries,
            oci.ImageConfig(entrypoint=("/opt/bin/flanneld",), env=path),
        ),
        cni_plugin_image(): _write(
            out_dir, cni_plugin_image(), plugin_entries, oci.ImageConfig(cmd=("sh",), env=path)
        ),
    }


def push(registry_host: str, out_dir: Path) -> list[str]:
    """Build both images and push them under their upstream names (mirrored)."""
    return [
        mirrors.push_mirrored(registry_host, layout, name)
        for name, layout in build_images(out_dir).items()
    ]


def install_node_plugins(bin_dir: Path) -> list[str]:
    """Copy the standard plugins into a node's plugin directory (its OS package's job)."""
    plugins = cnibuild.ensure(cnibuild.cni_plugins_set(load_versions()))
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in cnibuild.STANDARD_PLUGINS:
        partial = bin_dir / f".{name}.tmp"
        shutil.copyfile(plugins.path(name), partial)
        os.chmod(partial, 0o755)
        partial.rename(bin_dir / name)
    return list(cnibuild.STANDARD_PLUGINS)


# --- objects ------------------------------------------------------------------------------------


def cni_conf() -> dict[str, Any]:
    return {
        "name": "cbr0",
        "cniVersion": CNI_VERSION,
        "plugins": [
            {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def net_conf(cluster_cidr: str) -> dict[str, Any]:
    return {"Network": cluster_cidr, "EnableNFTables": False, "Backend": {"Type": "vxlan"}}


LABELS = {"tier": "node", "app": "flannel", "k8s-app": "flannel"}


def _daemonset() -> dict[str, Any]:
    field = {"fieldRef": {"fieldPath": "metadata.name"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": DAEMONSET, "namespace": NAMESPACE, "labels": LABELS},
        "spec": {
            "selector": {"matchLabels": {"app": "flannel"}},
            "template": {
                "metadata": {"labels": {"tier": "node", "app": "flannel"}},
                "spec": {
                    "affinity": {
                        "nodeAffinity": {
                            "requiredDuringSchedulingIgnoredDuringExecution": {
                                "nodeSelectorTerms": [
                                    {
                                        "matchExpressions": [
                                            {
                                                "key": "kubernetes.io/os",
                                                "operator": "In",
                                                "values": ["linux"],
                                            }
                                        ]
                                    }
                                ]
                            }
                        }
                    },
                    "hostNetwork": True,
                    "priorityClassName": "system-node-critical",
                    "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                    "serviceAccountName": "flannel",
                    "initContainers": [
                        {
                            "name": "install-cni-plugin",
                            "image": cni_plugin_image(),
                            "command": ["cp"],
                            "args": ["-f", "/flannel", "/opt/cni/bin/flannel"],
                            "volumeMounts": [{"name": "cni-plugin", "mountPath": "/opt/cni/bin"}],
                        },
                        {
                            "name": "install-cni",
                            "image": flannel_image(),
                            "command": ["/opt/bin/install-conf"],
                            "args": [
                                "/etc/kube-flannel/cni-conf.json",
                                "/etc/cni/net.d/10-flannel.conflist",
                            ],
                            "volumeMounts": [
                                {"name": "cni", "mountPath": "/etc/cni/net.d"},
                                {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"},
                            ],
                        },
                    ],
                    "containers": [
                        {
                            "name": "kube-flannel",
                            "image": flannel_image(),
                            "command": ["/opt/bin/flanneld"],
                            "args": ["--ip-masq", "--kube-subnet-mgr", "--healthz-port=8081"],
                            "ports": [
                                {"name": "healthz", "containerPort": 8081, "protocol": "TCP"}
                            ],
                            "livenessProbe": {
                                "httpGet": {"path": "/healthz", "port": "healthz"},
                                "initialDelaySeconds": 10,
                                "periodSeconds": 30,
                            },
                            "readinessProbe": {
                                "httpGet": {"path": "/readyz", "port": "healthz"},
                                "initialDelaySeconds": 5,
                                "periodSeconds": 10,
                            },
                            "resources": {"requests": {"cpu": "100m", "memory": "50Mi"}},
                            "securityContext": {
                                "privileged": False,
                                "capabilities": {"add": ["NET_ADMIN", "NET_RAW"]},
                            },
                            "env": [
                                {"name": "POD_NAME", "valueFrom": field},
                                {
                                    "name": "POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                },
                                {"name": "EVENT_QUEUE_DEPTH", "value": "5000"},
                                {"name": "CONT_WHEN_CACHE_NOT_READY", "value": "false"},
                            ],
                            "volumeMounts": [
                                {"name": "run", "mountPath": "/run/flannel"},
                                {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"},
                                {"name": "xtables-lock", "mountPath": "/run/xtables.lock"},
                            ],
                        }
                    ],
                    "volumes": [
                        {"name": "run", "hostPath": {"path": "/run/flannel"}},
                        {"name": "cni-plugin", "hostPath": {"path": "/opt/cni/bin"}},
                        {"name": "cni", "hostPath": {"path": "/etc/cni/net.d"}},
                        {"name": "flannel-cfg", "configMap": {"name": CONFIGMAP}},
                        {
                            "name": "xtables-lock",
                            "hostPath": {"path": "/run/xtables.lock", "type": "FileOrCreate"},
                        },
                    ],
                },
            },
        },
    }


def manifests(cluster_cidr: str) -> list[dict[str, Any]]:
    meta_labels = {"k8s-app": "flannel"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": NAMESPACE,
                "labels": {**meta_labels, "pod-security.kubernetes.io/enforce": "privileged"},
            },
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "flannel", "labels": meta_labels},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "flannel", "labels": meta_labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "flannel",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "flannel", "namespace": NAMESPACE}],
        },
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "flannel", "namespace": NAMESPACE, "labels": meta_labels},
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE, "labels": LABELS},
            "data": {
                "cni-conf.json": json.dumps(cni_conf(), indent=2) + "\n",
                "net-conf.json": json.dumps(net_conf(cluster_cidr), indent=2) + "\n",
            },
        },
        _daemonset(),
    ]


def deploy(plane: ControlPlane, *, registry_host: str, work_dir: Path) -> None:
    """Push the images, then apply the objects (idempotent)."""
    push(registry_host, work_dir)
    body = {"apiVersion": "v1", "kind": "List", "items": manifests(plane.cluster_cidr)}
    plane.kubectl("apply", "-f", "-", input=json.dumps(body))


def rollout(plane: ControlPlane, *, timeout: str = "300s") -> None:
    """Wait until a flannel pod runs Ready on every node."""
    plane.kubectl(
        "-n", NAMESPACE, "rollout", "status", f"daemonset/{DAEMONSET}", f"--timeout={timeout}"
    )

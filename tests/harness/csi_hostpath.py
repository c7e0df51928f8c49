"""The CSI hostpath driver on a nodeagent (or kubelet) node: ``make up``'s dynamic storage and the
integration tests' (``csi_hostpath`` fixture in tests/integration/conftest.py).

- The binaries: ``csi_build.ensure_csi()``: the kubernetes-csi sidecars external-provisioner,
  -attacher, -resizer and -snapshotter from their Go modules at ``CSI_*_VERSION``, and this
  repository's stand-in (tests/harness/csi-hostpath/) for the hostpath plugin,
  node-driver-registrar and livenessprobe, whose modules the proxy does not serve.
- The images: each binary alone on an empty base, as upstream's distroless images
  (``/<name>``, entrypoint ``/<name>``), pushed to the local registry under the upstream names
  ``registry.k8s.io/sig-storage/<name>:<tag>`` and pulled through the registry mirror
  (harness/mirrors.py). The sidecars' tags are their pins; the stand-ins' are ``STANDIN_TAGS``
  (the versions the e2e suite's manifests name at KUBERNETES_VERSION).
- The objects, in the shape of upstream's deployment (deploy/kubernetes-1.x/hostpath): a
  ServiceAccount with the sidecars' RBAC, the ``CSIDriver`` (attach required, pod info on
  mount, persistent and ephemeral volumes, fsGroupPolicy File), one StatefulSet pod with the
  plugin and its sidecars (the driver serves one node), and the default StorageClass
  ``csi-hostpath-sc`` (WaitForFirstConsumer, expandable). As upstream's, they live in
  ``default``: not ``kube-system``, whose pods the e2e suite waits to see all Ready before any
  spec runs (a node that cannot run the plugin would stop every conformance run).

The node's paths come from its root dir (nodeagent's ``node.rootDir``, the kubelet's
``--root-dir``): the plugin's socket in ``<root>/plugins/csi-hostpath/``, the registration
socket in ``<root>/plugins_registry/`` (which the node must have: the pod waits otherwise, as
upstream's ``type: Directory`` asks), and ``<root>/pods`` and ``<root>/plugins`` mounted at the
same paths in the plugin with Bidirectional propagation, so its stage and publish mounts reach
the node. Volumes are directories under ``data_dir`` on the host.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from harness import mirrors
from harness.controlplane import ControlPlane
from harness.csi_build import ensure_csi, sidecars
from harness.images import oci
from harness.registry import push_image

DRIVER = "hostpath.csi.k8s.io"
NAMESPACE = "default"
NAME = "csi-hostpathplugin"
ACCOUNT = "csi-hostpathplugin-sa"
STORAGE_CLASS = "csi-hostpath-sc"
SIG_STORAGE = "registry.k8s.io/sig-storage"
TOPOLOGY_KEY = "topology.hostpath.csi/node"
# The stand-ins' tags: the versions that the e2e suite's csi-hostpath manifests name at
# KUBERNETES_VERSION (test/e2e/testing-manifests/storage-csi/hostpath).
STANDIN_TAGS = {
    "hostpathplugin": "v1.17.1",
    "csi-node-driver-registrar": "v2.16.0",
    "livenessprobe": "v2.18.0",
}
LABELS = {
    "app.kubernetes.io/instance": DRIVER,
    "app.kubernetes.io/part-of": "csi-driver-host-path",
    "app.kubernetes.io/name": NAME,
    "app.kubernetes.io/component": "plugin",
}
ROLLOUT_TIMEOUT = 100.0  # below kubectl's subprocess limit (harness.controlplane: 120 s)


def image_names() -> dict[str, str]:
    """Each image's upstream name (binary name -> reference) as ``make up`` deploys it."""
    names = {s.name: f"{SIG_STORAGE}/{s.name}:{s.version}" for s in sidecars()}
    names.update({role: f"{SIG_STORAGE}/{role}:{tag}" for role, tag in STANDIN_TAGS.items()})
    return names


def build_images(out_dir: Path) -> dict[str, Path]:
    """Each image's OCI layout under `out_dir` (rebuilt), by binary name."""
    binaries = ensure_csi(quiet=True)
    sources = {s.name: binaries[s.name] for s in sidecars()}
    sources.update({role: binaries["csi-hostpath"] for role in STANDIN_TAGS})
    out_dir.mkdir(parents=True, exist_ok=True)
    layouts: dict[str, Path] = {}
    names = image_names()
    for name, binary in sources.items():
        layout = out_dir / f"{name}-layout"
        shutil.rmtree(layout, ignore_errors=True)
        work = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=out_dir))
        try:
            oci.write_layout(
                work / "layout",
                entries=[oci.Entry(path=name, kind="file", mode=0o755, data=binary.read_bytes())],
                config=oci.ImageConfig(entrypoint=(f"/{name}",)),
                names=[names[name]],
            )
            (work / "layout").rename(layout)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        layouts[name] = layout
    return layouts


def push(registry_host: str, out_dir: Path) -> list[str]:
    """Build the images and push each under its upstream name (pulled through the mirror)."""
    names = image_names()
    return [
        mirrors.push_mirrored(registry_host, layout, names[name])
        for name, layout in build_images(out_dir).items()
    ]


def push_tagged(registry_host: str, out_dir: Path, references: dict[str, list[str]]) -> list[str]:
    """Build the images and push each as the given registry-relative references (binary name
    -> e.g. ``["sig-storage/csi-provisioner:v6.1.1"]``): the e2e suite's names."""
    pushed = []
    for name, layout in build_images(out_dir).items():
        for reference in references.get(name, ()):
            push_image(registry_host, layout, reference)
            pushed.append(f"{registry_host}/{reference}")
    return pushed


# --- objects ---------------------------------------------------------------------------------


def _rule(groups: list[str], resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs}


WATCH = ["get", "list", "watch"]
EVENTS = _rule([""], ["events"], ["list", "watch", "create", "update", "patch"])
LEASES = _rule(["coordination.k8s.io"], ["leases"], [*WATCH, "delete", "update", "create"])
# What each sidecar reads and writes, cluster-wide (its ClusterRole) and in its own namespace
# (its Role: leader-election leases, and the provisioner's capacity objects).
CLUSTER_RULES: dict[str, list[dict[str, Any]]] = {
    "provisioner": [
        _rule([""], ["persistentvolumes"], [*WATCH, "create", "patch", "delete"]),
        _rule([""], ["persistentvolumeclaims"], [*WATCH, "update"]),
        _rule(["storage.k8s.io"], ["storageclasses", "csinodes", "volumeattachments"], WATCH),
        _rule(["storage.k8s.io"], ["volumeattributesclasses"], WATCH),
        _rule([""], ["nodes"], WATCH),
        EVENTS,
        _rule(["snapshot.storage.k8s.io"], ["volumesnapshots", "volumesnapshotcontents"], WATCH),
    ],
    "attacher": [
        _rule([""], ["persistentvolumes"], [*WATCH, "patch"]),
        _rule(["storage.k8s.io"], ["csinodes"], WATCH),
        _rule(["storage.k8s.io"], ["volumeattachments"], [*WATCH, "patch"]),
        _rule(["storage.k8s.io"], ["volumeattachments/status"], ["patch"]),
    ],
    "resizer": [
        _rule([""], ["persistentvolumes"], [*WATCH, "patch"]),
        _rule([""], ["persistentvolumeclaims", "pods"], WATCH),
        _rule([""], ["persistentvolumeclaims/status"], ["patch"]),
        _rule(["storage.k8s.io"], ["volumeattributesclasses"], WATCH),
        EVENTS,
    ],
}
NAMESPACE_RULES: dict[str, list[dict[str, Any]]] = {
    "provisioner": [
        LEASES,
        _rule(
            ["storage.k8s.io"],
            ["csistoragecapacities"],
            [*WATCH, "create", "update", "patch", "delete"],
        ),
        _rule([""], ["pods"], ["get"]),
        _rule(["apps"], ["replicasets"], ["get"]),
    ],
    "attacher": [LEASES],
    "resizer": [LEASES],
}


def _rbac(namespace: str) -> list[dict[str, Any]]:
    account = {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
    items: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": ACCOUNT, "namespace": namespace},
        }
    ]
    for sidecar, rules in CLUSTER_RULES.items():
        name = f"csi-hostpath-{sidecar}"
        items.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name},
                "rules": rules,
            }
        )
        items.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [account],
            }
        )
    for sidecar, rules in NAMESPACE_RULES.items():
        name = f"csi-hostpath-{sidecar}"
        meta = {"name": name, "namespace": namespace}
        items.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": meta,
                "rules": rules,
            }
        )
        items.append(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [account],
            }
        )
    return items


def csi_driver() -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSIDriver",
        "metadata": {
            "name": DRIVER,
            "labels": {"app.kubernetes.io/part-of": "csi-driver-host-path"},
        },
        "spec": {
            "attachRequired": True,
            "podInfoOnMount": True,
            "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            "fsGroupPolicy": "File",
        },
    }


def storage_class(*, default: bool = True) -> dict[str, Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "annotations": annotations},
        "provisioner": DRIVER,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }


def _socket_mount() -> dict[str, Any]:
    return {"name": "socket-dir", "mountPath": "/csi"}


KUBECONFIG_DIR = "/etc/csi-hostpath"


def _containers(root: str, *, kubeconfig: bool, health_port: int) -> list[dict[str, Any]]:
    names = image_names()
    node_name = {
        "name": "KUBE_NODE_NAME",
        "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "spec.nodeName"}},
    }
    privileged = {"privileged": True}

    def sidecar(name: str, image: str, *args: str) -> dict[str, Any]:
        mounts = [_socket_mount()]
        if kubeconfig:
            args = (*args, f"--kubeconfig={KUBECONFIG_DIR}/kubeconfig")
            mounts.append({"name": "api-kubeconfig", "mountPath": KUBECONFIG_DIR, "readOnly": True})
        return {
            "name": name,
            "image": names[image],
            "args": ["--v=2", "--csi-address=/csi/csi.sock", *args],
            "securityContext": privileged,
            "volumeMounts": mounts,
        }

    return [
        {
            "name": "hostpath",
            "image": names["hostpathplugin"],
            "args": [
                f"--drivername={DRIVER}",
                "--endpoint=unix:///csi/csi.sock",
                "--nodeid=$(KUBE_NODE_NAME)",
            ],
            "env": [node_name],
            "securityContext": privileged,
            "ports": [{"containerPort": health_port, "name": "healthz", "protocol": "TCP"}],
            "livenessProbe": {
                "httpGet": {"path": "/healthz", "port": "healthz"},
                "initialDelaySeconds": 10,
                "periodSeconds": 2,
                "timeoutSeconds": 3,
                "failureThreshold": 5,
            },
            "volumeMounts": [
                _socket_mount(),
                {
                    "name": "mountpoint-dir",
                    "mountPath": f"{root}/pods",
                    "mountPropagation": "Bidirectional",
                },
                {
                    "name": "plugins-dir",
                    "mountPath": f"{root}/plugins",
                    "mountPropagation": "Bidirectional",
                },
                {"name": "csi-data-dir", "mountPath": "/csi-data-dir"},
                {"name": "dev-dir", "mountPath": "/dev"},
            ],
        },
        {
            "name": "node-driver-registrar",
            "image": names["csi-node-driver-registrar"],
            "args": [
                "--v=2",
                "--csi-address=/csi/csi.sock",
                f"--kubelet-registration-path={root}/plugins/csi-hostpath/csi.sock",
            ],
            "env": [node_name],
            "securityContext": privileged,
            "volumeMounts": [
                _socket_mount(),
                {"name": "registration-dir", "mountPath": "/registration"},
            ],
        },
        {
            "name": "liveness-probe",
            "image": names["livenessprobe"],
            "args": ["--csi-address=/csi/csi.sock", f"--health-port={health_port}"],
            "volumeMounts": [_socket_mount()],
        },
        sidecar("csi-attacher", "csi-attacher"),
        sidecar("csi-provisioner", "csi-provisioner", "--feature-gates=Topology=true"),
        sidecar("csi-resizer", "csi-resizer"),
    ]


def _host_path(name: str, path: str, kind: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path, "type": kind}}


def plugin_statefulset(
    *,
    root_dir: Path,
    data_dir: Path,
    namespace: str,
    node_name: str | None = None,
    kubeconfig_secret: str | None = None,
    health_port: int = 9898,
) -> dict[str, Any]:
    root = str(root_dir).rstrip("/")
    pin: dict[str, Any] = {"nodeName": node_name} if node_name else {}
    extra_volumes: list[dict[str, Any]] = []
    if kubeconfig_secret:
        # the API through a kubeconfig on the host's network: no Service proxy needed
        pin["hostNetwork"] = True
        extra_volumes.append(
            {"name": "api-kubeconfig", "secret": {"secretName": kubeconfig_secret}}
        )
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": NAME, "namespace": namespace, "labels": LABELS},
        "spec": {
            "serviceName": NAME,
            "replicas": 1,  # the driver's volumes live on one node
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS},
                "spec": {
                    **pin,
                    "serviceAccountName": ACCOUNT,
                    "terminationGracePeriodSeconds": 10,
                    "containers": _containers(
                        root, kubeconfig=bool(kubeconfig_secret), health_port=health_port
                    ),
                    "volumes": [
                        _host_path(
                            "socket-dir", f"{root}/plugins/csi-hostpath", "DirectoryOrCreate"
                        ),
                        _host_path("mountpoint-dir", f"{root}/pods", "DirectoryOrCreate"),
                        _host_path("registration-dir", f"{root}/plugins_registry", "Directory"),
                        _host_path("plugins-dir", f"{root}/plugins", "DirectoryOrCreate"),
                        _host_path("csi-data-dir", str(data_dir), "DirectoryOrCreate"),
                        _host_path("dev-dir", "/dev", "Directory"),
                        *extra_volumes,
                    ],
                },
            },
        },
    }


def manifests(
    *,
    root_dir: Path,
    data_dir: Path,
    namespace: str = NAMESPACE,
    node_name: str | None = None,
    default_class: bool = True,
    kubeconfig_secret: str | None = None,
    health_port: int = 9898,
) -> list[dict[str, Any]]:
    """Every object of the driver, in apply order. `node_name` pins the plugin to one node
    (a test's); `root_dir` is the node's kubelet root dir, `data_dir` where volumes live.
    With `kubeconfig_secret` (a Secret in `namespace` with a ``kubeconfig`` key) the pod runs
    on the host's network and the sidecars reach the API with that kubeconfig instead of the
    ``kubernetes`` Service (a test's node has no Service proxy); `health_port` is then the
    liveness probe's port on the host."""
    return [
        *_rbac(namespace),
        csi_driver(),
        plugin_statefulset(
            root_dir=root_dir,
            data_dir=data_dir,
            namespace=namespace,
            node_name=node_name,
            kubeconfig_secret=kubeconfig_secret,
            health_port=health_port,
        ),
        storage_class(default=default_class),
    ]


def _body(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def deploy(
    plane: ControlPlane,
    *,
    registry_host: str,
    work_dir: Path,
    root_dir: Path,
    data_dir: Path,
    namespace: str = NAMESPACE,
    node_name: str | None = None,
    default_class: bool = True,
) -> None:
    """Build and push the images, then apply the objects (idempotent)."""
    push(registry_host, work_dir / "images")
    items = manifests(
        root_dir=root_dir,
        data_dir=data_dir,
        namespace=namespace,
        node_name=node_name,
        default_class=default_class,
    )
    plane.kubectl("apply", "-f", "-", input=_body(items))


def remove(plane: ControlPlane, *, namespace: str = NAMESPACE) -> None:
    """Delete what ``deploy`` applied (the volumes' directories stay in `data_dir`)."""
    items = manifests(root_dir=Path("/x"), data_dir=Path("/x"), namespace=namespace)
    plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=_body(items))


def wait_registered(plane: ControlPlane, node: str, *, timeout: float = ROLLOUT_TIMEOUT) -> bool:
    """Wait until the node's CSINode lists the driver (the node registered it)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = plane.kubectl("get", "csinode", node, "-o", "json", check=False)
        if got.returncode == 0:
            drivers = json.loads(got.stdout).get("spec", {}).get("drivers") or []
            if any(d.get("name") == DRIVER for d in drivers):
                return True
        time.sleep(1)
    return False


def node_root_dir(agent_config: Path) -> Path:
    """The root dir in a nodeagent config file (``node.rootDir``)."""
    config = yaml.safe_load(agent_config.read_text())
    return Path(config["node"]["rootDir"])


def up(
    plane: ControlPlane, *, registry_host: str, work_dir: Path, root_dir: Path, node: str
) -> None:
    """``make up``'s step: a failure is reported, not fatal (the cluster works without it)."""
    try:
        deploy(
            plane,
            registry_host=registry_host,
            work_dir=work_dir,
            root_dir=root_dir,
            data_dir=work_dir / "data",
        )
    except (OSError, RuntimeError, subprocess.SubprocessError, SystemExit) as e:
        print(f">>> CSI hostpath driver not deployed ({e}); claims will stay Pending", flush=True)
        return
    if not (root_dir / "plugins_registry").is_dir():
        print(
            f">>> CSI hostpath driver deployed ({NAMESPACE}/{NAME}), but node {node} has no "
            f"{root_dir / 'plugins_registry'} (no CSI plugin registration): its pod waits for "
            "that directory and claims stay Pending",
            flush=True,
        )
        return
    rollout = plane.kubectl(
        "-n", NAMESPACE, "rollout", "status", f"statefulset/{NAME}",
        f"--timeout={ROLLOUT_TIMEOUT:.0f}s", check=False,
    )  # fmt: skip
    if rollout.returncode != 0:
        print(
            f">>> CSI hostpath driver deployed but its pod is not Ready after "
            f"{ROLLOUT_TIMEOUT:.0f} s: {rollout.stderr.strip()} (kubectl -n {NAMESPACE} "
            f"describe pod {NAME}-0)",
            flush=True,
        )
        return
    registered = wait_registered(plane, node, timeout=60.0)
    print(
        f">>> CSI hostpath driver {DRIVER} deployed ({NAMESPACE}/{NAME}); default StorageClass "
        f"{STORAGE_CLASS} (WaitForFirstConsumer, expandable): claims bind when a pod uses them"
        + ("" if registered else f"; but node {node} has not registered the driver yet"),
        flush=True,
    )

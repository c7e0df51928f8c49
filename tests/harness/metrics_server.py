"""metrics-server on a nodeagent node, so that ``kubectl top node/pod`` works (``make up`` and
``test_metrics_server``).

- The binary: ``build.ensure_metrics_server()`` (sigs.k8s.io/metrics-server at
  METRICS_SERVER_VERSION, from the Go module proxy, cached like the other binaries).
- The image ``localhost/metrics-server:<version>``, built here: the binary, a writable ``/tmp``
  for its self-signed serving pair, and ``/etc/metrics-server/kubeconfig`` with a client
  certificate of the cluster CA (CN ``system:metrics-server``). nodeagent does not mount volumes
  yet (no ServiceAccount token in the pod), so the credentials travel in the image; the image
  holds this cluster's key and is only ever imported into this cluster's containerd.
- The objects: RBAC for the user ``system:metrics-server`` (read nodes/pods and
  ``nodes/metrics``; delegated authentication and authorization), a Deployment of one
  ``hostNetwork`` pod pinned to the node (``--kubelet-insecure-tls``: it reads ``/metrics/resource``
  from the node's :10250 at its InternalIP and the port the Node reports), a Service and the
  APIService ``v1beta1.metrics.k8s.io``. The apiserver reaches the pod at its endpoint
  (``--enable-aggregator-routing``), not through the Service's ClusterIP.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import kubeconfig
from harness.build import ensure_metrics_server
from harness.containerd import CTR
from harness.controlplane import ControlPlane
from harness.images import oci
from harness.versions import load_versions

NAMESPACE = "kube-system"
NAME = "metrics-server"
USER = "system:metrics-server"
KUBECONFIG_IN_IMAGE = "/etc/metrics-server/kubeconfig"
DEFAULT_PORT = 4443


def image_name() -> str:
    return f"localhost/metrics-server:{load_versions().metrics_server}"


def build_image(plane: ControlPlane, out_dir: Path) -> Path:
    """The image tarball (for ``ctr images import``) with this cluster's credentials."""
    binary = ensure_metrics_server()
    client = plane.pki.client_cert("metrics-server", common_name=USER)
    config = kubeconfig.render(server=plane.server, ca=plane.ca_path, user=USER, client=client)
    entries = [
        oci.Entry(path="metrics-server", kind="file", mode=0o755, data=binary.read_bytes()),
        oci.Entry(path="etc", kind="dir", mode=0o755),
        oci.Entry(path="etc/metrics-server", kind="dir", mode=0o755),
        oci.Entry(
            path=KUBECONFIG_IN_IMAGE.lstrip("/"),
            kind="file",
            mode=0o644,
            data=json.dumps(config).encode(),
        ),
        oci.Entry(path="tmp", kind="dir", mode=0o1777),
    ]
    out_dir.mkdir(parents=True, exist_ok=True)
    tarball = out_dir / "metrics-server.tar"
    work = Path(tempfile.mkdtemp(prefix=".metrics-server-", dir=out_dir))
    try:
        oci.write_layout(
            work / "layout",
            entries=entries,
            config=oci.ImageConfig(entrypoint=("/metrics-server",)),
            names=[image_name()],
        )
        oci.pack(work / "layout", tarball)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return tarball


def manifests(*, node_name: str, port: int = DEFAULT_PORT) -> list[dict[str, Any]]:
    labels = {"k8s-app": NAME}
    user = [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": USER}]
    args = [
        f"--kubeconfig={KUBECONFIG_IN_IMAGE}",
        f"--authentication-kubeconfig={KUBECONFIG_IN_IMAGE}",
        f"--authorization-kubeconfig={KUBECONFIG_IN_IMAGE}",
        "--cert-dir=/tmp",
        f"--secure-port={port}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        "--kubelet-insecure-tls",
        "--metric-resolution=15s",
    ]
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": USER},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["nodes/metrics", "nodes/stats"],
                    "verbs": ["get"],
                },
                {
                    "apiGroups": [""],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {
                "name": "system:aggregated-metrics-reader",
                "labels": {
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                    "rbac.authorization.k8s.io/aggregate-to-view": "true",
                },
            },
            "rules": [
                {
                    "apiGroups": ["metrics.k8s.io"],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": USER},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": USER,
            },
            "subjects": user,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "metrics-server:system:auth-delegator"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:auth-delegator",
            },
            "subjects": user,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "metrics-server-auth-reader", "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": user,
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "selector": labels,
                "ports": [{"name": "https", "port": 443, "targetPort": port, "protocol": "TCP"}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": labels},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeName": node_name,
                        "hostNetwork": True,
                        "automountServiceAccountToken": False,
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": NAME,
                                "image": image_name(),
                                "imagePullPolicy": "IfNotPresent",
                                "args": args,
                                "ports": [
                                    {"name": "https", "containerPort": port, "protocol": "TCP"}
                                ],
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io", "labels": labels},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "insecureSkipTLSVerify": True,
                "service": {"name": NAME, "namespace": NAMESPACE, "port": 443},
            },
        },
    ]


def deploy(
    plane: ControlPlane,
    *,
    node_name: str,
    import_image: Callable[[Path], None],
    work_dir: Path,
    port: int = DEFAULT_PORT,
) -> None:
    """Build and import the image, then apply the objects (idempotent)."""
    import_image(build_image(plane, work_dir))
    body = {"apiVersion": "v1", "kind": "List", "items": manifests(node_name=node_name, port=port)}
    plane.kubectl("apply", "-f", "-", input=json.dumps(body))


def remove(plane: ControlPlane) -> None:
    """Delete what ``deploy`` applied."""
    body = {"apiVersion": "v1", "kind": "List", "items": manifests(node_name="x")}
    plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=json.dumps(body))


def up(plane: ControlPlane, *, node_name: str, containerd_socket: Path, work_dir: Path) -> None:
    """``make up``'s step: deploy on the node; a failure is reported, not fatal (the cluster
    is usable without ``kubectl top``)."""

    def import_image(tarball: Path) -> None:
        argv = [CTR, "--address", str(containerd_socket), "--namespace", "k8s.io"]
        argv += ["images", "import", "--snapshotter", "overlayfs", str(tarball)]
        subprocess.run(argv, check=True, capture_output=True, timeout=300)

    try:
        deploy(plane, node_name=node_name, import_image=import_image, work_dir=work_dir)
    except (OSError, RuntimeError, subprocess.SubprocessError, SystemExit) as e:
        print(f">>> metrics-server not deployed ({e}); kubectl top will not work", flush=True)
        return
    print(
        f">>> metrics-server {load_versions().metrics_server} deployed on {node_name}"
        " (kubectl top node/pod answer after its first two scrapes, ~30s)",
        flush=True,
    )

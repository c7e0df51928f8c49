"""Cluster DNS for ``make up`` and the integration tests: CoreDNS as the ``kube-dns`` Service,
deployed as kubeadm deploys it.

- The binary: ``build.ensure_coredns()`` (github.com/coredns/coredns at COREDNS_VERSION, from
  the Go module proxy, cached like the other binaries).
- The image ``registry.k8s.io/coredns/coredns:<version>``, built here: the static binary alone
  (``/coredns``, entrypoint ``/coredns``, user root so that the kubeadm securityContext, all
  capabilities dropped but ``NET_BIND_SERVICE``, can bind :53 without file capabilities). It is
  pushed to the local registry under that name and pulled through the registry mirror
  (``harness/mirrors.py``) as on a connected cluster.
- The objects, as ``kubeadm init`` creates them (cmd/kubeadm/app/phases/addons/dns): the
  ServiceAccount ``coredns``, ClusterRole and ClusterRoleBinding ``system:coredns``, the
  ConfigMap ``coredns`` with the kubeadm Corefile, the Deployment ``coredns`` (priority class
  ``system-cluster-critical``, the kubeadm probes, ``dnsPolicy: Default``, the Corefile from the
  ConfigMap volume; one replica on one node) and the Service ``kube-dns`` at CLUSTER_DNS_IP
  (53/UDP, 53/TCP, 9153/TCP).

One line of the Corefile differs from kubeadm's: ``forward . /etc/resolv.conf`` would send every
outside name to the node's resolver, i.e. the internet (or, on a machine without one, a resolver
that may time out). There is no upstream for these clusters, so outside names are forwarded to
``NO_UPSTREAM``, a port nothing listens on inside the CoreDNS pod: the kernel answers with ICMP
port unreachable, forward gives up after its three connect attempts and the client gets
SERVFAIL in milliseconds (``nslookup example.com``: "server can't find example.com: SERVFAIL").
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from harness import mirrors
from harness.build import ensure_coredns
from harness.controlplane import ControlPlane
from harness.images import oci
from harness.versions import load_versions

NAMESPACE = "kube-system"
NAME = "coredns"
SERVICE = "kube-dns"
LABELS = {"k8s-app": "kube-dns"}
NO_UPSTREAM = "127.0.0.1:9"  # nothing listens there in the pod: refused at once


def image_name() -> str:
    return f"registry.k8s.io/coredns/coredns:{load_versions().coredns}"


def build_image(out_dir: Path) -> Path:
    """The image's OCI layout (the binary alone) under `out_dir`; returns the layout path."""
    binary = ensure_coredns()
    layout = out_dir / "coredns-layout"
    shutil.rmtree(layout, ignore_errors=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".coredns-", dir=out_dir))
    try:
        oci.write_layout(
            work / "layout",
            entries=[oci.Entry(path="coredns", kind="file", mode=0o755, data=binary.read_bytes())],
            config=oci.ImageConfig(entrypoint=("/coredns",)),
            names=[image_name()],
        )
        (work / "layout").rename(layout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return layout


def push(registry_host: str, out_dir: Path) -> str:
    """Build the image and push it to the local registry under its mirrored name."""
    return mirrors.push_mirrored(registry_host, build_image(out_dir), image_name())


def corefile(cluster_domain: str, upstream: str = NO_UPSTREAM) -> str:
    """kubeadm's Corefile, but outside names go to `upstream` (see the module docstring)."""
    return f""".:53 {{
    errors
    health {{
       lameduck 5s
    }}
    ready
    kubernetes {cluster_domain} in-addr.arpa ip6.arpa {{
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }}
    prometheus :9153
    forward . {upstream} {{
       max_concurrent 1000
    }}
    cache 30 {{
       disable success {cluster_domain}
       disable denial {cluster_domain}
    }}
    loop
    reload
    loadbalance
}}
"""


def _container() -> dict[str, Any]:
    return {
        "name": NAME,
        "image": image_name(),
        "imagePullPolicy": "IfNotPresent",
        "resources": {
            "limits": {"memory": "170Mi"},
            "requests": {"cpu": "100m", "memory": "70Mi"},
        },
        "args": ["-conf", "/etc/coredns/Corefile"],
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
        "ports": [
            {"containerPort": 53, "name": "dns", "protocol": "UDP"},
            {"containerPort": 53, "name": "dns-tcp", "protocol": "TCP"},
            {"containerPort": 9153, "name": "metrics", "protocol": "TCP"},
            {"containerPort": 8080, "name": "liveness-probe", "protocol": "TCP"},
            {"containerPort": 8181, "name": "readiness-probe", "protocol": "TCP"},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/health", "port": "liveness-probe", "scheme": "HTTP"},
            "initialDelaySeconds": 60,
            "timeoutSeconds": 5,
            "successThreshold": 1,
            "failureThreshold": 5,
        },
        "readinessProbe": {
            "httpGet": {"path": "/ready", "port": "readiness-probe", "scheme": "HTTP"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
        },
    }


def manifests(
    *,
    cluster_dns_ip: str,
    cluster_domain: str,
    upstream: str = NO_UPSTREAM,
    node_name: str | None = None,
) -> list[dict[str, Any]]:
    """`node_name` pins the pod to one node (a test's); kubeadm lets the scheduler choose."""
    pin = {"nodeName": node_name} if node_name else {}
    account = {"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [account],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": NAME, "namespace": NAMESPACE},
            "data": {"Corefile": corefile(cluster_domain, upstream)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": LABELS},
            "spec": {
                "replicas": 1,
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
                "selector": {"matchLabels": LABELS},
                "template": {
                    "metadata": {"labels": LABELS},
                    "spec": {
                        **pin,
                        "priorityClassName": "system-cluster-critical",
                        "serviceAccountName": NAME,
                        "tolerations": [
                            {"key": "CriticalAddonsOnly", "operator": "Exists"},
                            {
                                "key": "node-role.kubernetes.io/control-plane",
                                "effect": "NoSchedule",
                            },
                        ],
                        "nodeSelector": {"kubernetes.io/os": "linux"},
                        "containers": [_container()],
                        "dnsPolicy": "Default",
                        "volumes": [
                            {
                                "name": "config-volume",
                                "configMap": {
                                    "name": NAME,
                                    "items": [{"key": "Corefile", "path": "Corefile"}],
                                },
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {
                "name": SERVICE,
                "namespace": NAMESPACE,
                "labels": {
                    **LABELS,
                    "kubernetes.io/cluster-service": "true",
                    "kubernetes.io/name": "CoreDNS",
                },
                "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"},
            },
            "spec": {
                "clusterIP": cluster_dns_ip,
                "selector": LABELS,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                    {"name": "metrics", "port": 9153, "protocol": "TCP", "targetPort": 9153},
                ],
            },
        },
    ]


def _body(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def deploy(
    plane: ControlPlane, *, registry_host: str, work_dir: Path, node_name: str | None = None
) -> None:
    """Build and push the image, then apply the objects (idempotent)."""
    push(registry_host, work_dir)
    versions = load_versions()
    items = manifests(
        cluster_dns_ip=versions.cluster_dns_ip,
        cluster_domain=versions.cluster_domain,
        node_name=node_name,
    )
    plane.kubectl("apply", "-f", "-", input=_body(items))


def remove(plane: ControlPlane) -> None:
    """Delete what ``deploy`` applied."""
    versions = load_versions()
    items = manifests(
        cluster_dns_ip=versions.cluster_dns_ip, cluster_domain=versions.cluster_domain
    )
    plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=_body(items))


def up(plane: ControlPlane, *, registry_host: str, work_dir: Path) -> None:
    """``make up``'s step: a failure is reported, not fatal (the cluster works without DNS)."""
    try:
        deploy(plane, registry_host=registry_host, work_dir=work_dir)
    except (OSError, RuntimeError, subprocess.SubprocessError, SystemExit) as e:
        print(f">>> CoreDNS not deployed ({e}); pods cannot resolve Service names", flush=True)
        return
    # A pod started before CoreDNS is Ready gets "connection refused" from 10.96.0.10: say
    # ready only once it is (it serves on its readiness probe a few seconds after start).
    rollout = plane.kubectl(
        "-n", NAMESPACE, "rollout", "status", f"deployment/{NAME}", "--timeout=120s",
        check=False,
    )  # fmt: skip
    if rollout.returncode != 0:
        print(f">>> CoreDNS deployed but not Ready after 120 s: {rollout.stderr.strip()}")
        return
    versions = load_versions()
    print(
        f">>> CoreDNS {versions.coredns} deployed as Service {NAMESPACE}/{SERVICE} at "
        f"{versions.cluster_dns_ip} ({image_name()} from the local registry); names under "
        f"{versions.cluster_domain} resolve, outside names fail at once (no upstream)",
        flush=True,
    )

"""Cluster DNS and stock image names on a nodeagent node, with the machinery ``make up`` uses:
CoreDNS built from its Go module and deployed as kubeadm does (``harness/coredns``),
its image pulled through containerd's registry mirrors (``harness/mirrors``) from the local
registry, the agent with ``clusterDNS``/``clusterDomain`` and its proxy in the root network
namespace (as ``make up`` runs it) so pods reach ``kube-dns`` at its ClusterIP.

What a user sees, from ``kubectl``:

- a pod resolves ``web.<ns>.svc.cluster.local`` and the short name ``web`` to the Service's
  ClusterIP and fetches a page through it; ``example.com`` fails within seconds (no upstream);
- ``kubectl run --image=busybox`` (default pull policy: ``Always`` for ``:latest``) is pulled
  through the mirror (the local registry's log shows the request) and its log says what it
  echoed; an image nobody pushed fails with ``ErrImagePull`` ("not found") within seconds.
"""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, api_get, wait_ready
from harness import coredns
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.versions import load_versions
from podnode import until
from test_pod_api_access import host_proxy_table, wait_default_service_account

pytestmark = pytest.mark.integration

PAGE = "served-by-web"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configure(node: AgentNode, control_plane: ControlPlane) -> None:
    """The cluster DNS settings ``make up`` gives its node, and the kubelet API (for kubectl
    exec and logs) on free ports with webhook authn/authz."""
    versions = load_versions()
    settings = yaml.safe_load(node.config.read_text())
    settings["kubelet"].update(
        {
            "clusterDNS": [versions.cluster_dns_ip],
            "clusterDomain": versions.cluster_domain,
            "port": free_port(),
            "healthzPort": free_port(),
            "authentication": {
                "x509": {"clientCAFile": str(control_plane.ca_path)},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
        }
    )
    node.config.write_text(yaml.safe_dump(settings))


def web_objects(namespace: str, node: str) -> list[dict[str, Any]]:
    labels = {"app": "web"}
    script = f"echo {PAGE} > /var/www/index.html && exec httpd -f -p 8080 -h /var/www"
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": namespace, "labels": labels},
            "spec": {
                "nodeName": node,
                "terminationGracePeriodSeconds": 1,
                "containers": [
                    {
                        "name": "web",
                        "image": "busybox",
                        "command": ["sh", "-c", script],
                        "ports": [{"containerPort": 8080}],
                    }
                ],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": labels, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ]


def coredns_pod(control_plane: ControlPlane) -> dict[str, Any] | None:
    pods = api_get(
        control_plane, "/api/v1/namespaces/kube-system/pods?labelSelector=k8s-app%3Dkube-dns"
    )
    items = (pods or {}).get("items", [])
    return items[0] if items else None


def is_ready(pod: dict[str, Any] | None) -> bool:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def explain_dns(control_plane: ControlPlane, node: AgentNode) -> str:
    kubectl = control_plane.kubectl
    pods = kubectl("get", "pods", "-A", "-o", "wide", check=False)
    events = kubectl("get", "events", "-n", "kube-system", check=False)
    logs = kubectl("logs", "-n", "kube-system", "deploy/coredns", "--tail=20", check=False)
    return (
        f"{pods.stdout}\n{events.stdout}\ncoredns log:\n{logs.stdout}{logs.stderr}\n"
        f"{node.log_tail(2000)}"
    )


def run_in(
    control_plane: ControlPlane, namespace: str, pod: str, script: str
) -> tuple[int, str, float]:
    """``kubectl exec pod -- sh -c script``: (exit code, stdout+stderr, seconds)."""
    started = time.monotonic()
    done = control_plane.kubectl(
        "exec", "-n", namespace, pod, "--", "sh", "-c", script, check=False
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def waiting_reason(control_plane: ControlPlane, namespace: str, pod: str) -> dict[str, Any]:
    got = api_get(control_plane, f"/api/v1/namespaces/{namespace}/pods/{pod}") or {}
    statuses = (got.get("status") or {}).get("containerStatuses") or []
    return (statuses[0].get("state") or {}).get("waiting") or {} if statuses else {}


async def busybox_run_from_the_mirror(
    control_plane: ControlPlane, containerd: RuntimeEnv, node: AgentNode
) -> None:
    """``kubectl run --image=busybox`` (and a Service's backend on ``busybox``) pulled through
    the mirror with the default pull policy; the log says what it echoed."""
    kubectl, ns = control_plane.kubectl, node.namespace
    body = {"apiVersion": "v1", "kind": "List", "items": web_objects(ns, node.name)}
    kubectl("create", "-f", "-", input=json.dumps(body))
    # kubectl run: no node, no pull policy; the scheduler and the defaults decide
    kubectl(
        "run", "client", "-n", ns, "--image=busybox", "--restart=Never",
        "--", "sh", "-c", "echo hello from busybox; exec sleep 3600",
    )  # fmt: skip

    def ready(name: str) -> bool:
        return is_ready(api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/{name}"))

    for name in ("web", "client"):
        await until(
            f"pod {name} Ready", lambda n=name: ready(n), within=90, every=1,
            explain=lambda: explain_dns(control_plane, node),
        )  # fmt: skip
    client = api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/client")
    assert client["spec"]["containers"][0]["imagePullPolicy"] == "Always"
    # containerd names the image by one of its tags (1.36 is imported too, same image)
    assert client["status"]["containerStatuses"][0]["image"].startswith(
        "docker.io/library/busybox:"
    )
    registry_log = containerd.registry.log_path.read_text()
    assert "/v2/docker.io/library/busybox/manifests/latest" in registry_log
    assert kubectl("logs", "-n", ns, "client").stdout == "hello from busybox\n"


async def names_resolve(control_plane: ControlPlane, node: AgentNode) -> None:
    """The client's resolv.conf as the kubelet writes it; Service names resolve to the
    ClusterIP and answer through it; an outside name fails within seconds."""
    versions, ns = load_versions(), node.namespace
    code, resolv, _ = run_in(control_plane, ns, "client", "cat /etc/resolv.conf")
    assert code == 0, resolv
    lines = resolv.splitlines()
    assert f"nameserver {versions.cluster_dns_ip}" in lines, resolv
    domain = versions.cluster_domain
    search = f"search {ns}.svc.{domain} svc.{domain} {domain}"
    assert any(line.startswith(search) for line in lines), resolv
    assert "options ndots:5" in lines, resolv

    service = api_get(control_plane, f"/api/v1/namespaces/{ns}/services/web")
    cluster_ip = service["spec"]["clusterIP"]
    fqdn = f"web.{ns}.svc.{domain}"

    last: list[str] = []

    def resolves(name: str) -> str | None:
        # busybox nslookup asks for the name as given (no search list); ping resolves through
        # the C library's resolver, as programs do (no reply from a ClusterIP is expected)
        script = f"nslookup {name}" if name == fqdn else f"ping -c 1 -W 1 {name}"
        _, out, _ = run_in(control_plane, ns, "client", script)
        last[:] = [out]
        wanted = f"Address: {cluster_ip}" if name == fqdn else f"({cluster_ip})"
        return out if wanted in out else None

    for name in (fqdn, "web", f"web.{ns}"):
        await until(
            f"{name} resolves to {cluster_ip}", lambda n=name: resolves(n),
            within=30, every=1, explain=lambda: (last, explain_dns(control_plane, node)),
        )  # fmt: skip

    # (no `wget -T`: Debian's static busybox 1.35 wget segfaults with it)
    for name in (fqdn, "web"):
        code, page, _ = run_in(control_plane, ns, "client", f"wget -q -O - http://{name}/")
        assert (code, page) == (0, f"{PAGE}\n"), (name, code, page)

    code, out, took = run_in(control_plane, ns, "client", "nslookup example.com")
    assert code != 0, out
    assert "can't find example.com" in out, out
    assert took < 5, f"nslookup example.com took {took:.1f}s: {out}"
    code, out, took = run_in(control_plane, ns, "client", "wget -q -O - http://example.com/")
    assert code != 0 and "bad address 'example.com'" in out, out
    assert took < 5, f"wget example.com took {took:.1f}s: {out}"


async def unknown_image_fails_fast(control_plane: ControlPlane, node: AgentNode) -> None:
    """An image nobody pushed: the local registry refuses it at once, nothing is tried
    upstream."""
    ns = node.namespace
    started = time.monotonic()
    control_plane.kubectl(
        "run", "nothere", "-n", ns, "--image=registry.k8s.io/no-such-image:1", "--restart=Never"
    )

    def failed() -> dict[str, Any] | None:
        waiting = waiting_reason(control_plane, ns, "nothere")
        return waiting if waiting.get("reason") in ("ErrImagePull", "ImagePullBackOff") else None

    waiting = await until("ErrImagePull for no-such-image", failed, within=30, every=0.2)
    took = time.monotonic() - started
    assert "registry.k8s.io/no-such-image:1: not found" in waiting.get("message", ""), waiting
    assert took < 10, f"ErrImagePull after {took:.1f}s"


async def remove_pods(control_plane: ControlPlane, node: AgentNode, tmp_path: Path) -> None:
    """Delete CoreDNS and the test's pods (``kubectl run`` gives them 30 s of grace, and
    ``sleep`` ignores SIGTERM: 1 s here) and wait until the agent has removed every pod
    directory, so no volume stays mounted when the node's teardown stops the agent."""
    kubectl = control_plane.kubectl
    kubectl("delete", "pods", "--all", "-n", node.namespace, "--grace-period=1", "--wait=false")
    coredns.remove(control_plane)
    kubectl(
        "delete", "pods", "-n", "kube-system", "-l", "k8s-app=kube-dns", "--grace-period=1",
        "--wait=false",
    )  # fmt: skip
    pods = tmp_path / "root" / "pods"
    await until(
        "every pod directory removed by the agent",
        lambda: not pods.exists() or not any(pods.iterdir()),
        within=90,
        every=0.5,
        explain=lambda: (list(pods.iterdir()), node.log_tail(1500)),
    )


def image_names(containerd: RuntimeEnv) -> set[str]:
    return set(containerd.ctr("images", "list", "--quiet").stdout.split())


def remove_pulled_images(containerd: RuntimeEnv, before: set[str]) -> None:
    """Drop the names this test pulled (CoreDNS, the mirrored busybox): the containerd is
    the session's, and image GC tests count what is unused in it."""
    pulled = sorted(image_names(containerd) - before)
    if pulled:
        containerd.ctr("images", "remove", *pulled)


async def test_pods_resolve_services_through_coredns_and_stock_images_pull_from_the_mirror(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    versions = load_versions()
    images_before = image_names(containerd)
    try:
        await _resolve_and_pull(control_plane, containerd, tmp_path, versions)
    finally:
        remove_pulled_images(containerd, images_before)


async def _resolve_and_pull(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, versions: Any
) -> None:
    with host_proxy_table():
        async with agent_node(
            control_plane, tmp_path, containerd.endpoint, host_proxy=True
        ) as node:
            configure(node, control_plane)
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            await wait_default_service_account(control_plane, node.namespace)
            coredns.deploy(
                control_plane,
                registry_host=containerd.registry.host,
                work_dir=tmp_path / "coredns",
                node_name=node.name,
            )
            try:
                pod = await until(
                    "the CoreDNS pod Ready (its readiness probe on :8181)",
                    lambda: (p := coredns_pod(control_plane)) and is_ready(p) and p,
                    within=120,
                    every=1,
                    explain=lambda: explain_dns(control_plane, node),
                )
                [status] = pod["status"]["containerStatuses"]
                assert status["image"] == coredns.image_name()
                service = api_get(control_plane, "/api/v1/namespaces/kube-system/services/kube-dns")
                assert service["spec"]["clusterIP"] == versions.cluster_dns_ip

                await busybox_run_from_the_mirror(control_plane, containerd, node)
                await names_resolve(control_plane, node)
                await unknown_image_fails_fast(control_plane, node)
            finally:
                await remove_pods(control_plane, node, tmp_path)

"""Pod traffic between a joined machine and a node of the host, both ways, as a user checks it:
a web pod on each node behind a Service of its own, a `kubectl exec` from the host's node to the
machine's pod (by pod IP and by ClusterIP), and a client pod on the machine that fetches the
host's node's pod both ways and logs what it got. Used by the VM tier's cluster test and the
Vagrant test (the machine is a qemu guest there, a vagrant-libvirt domain here).

    seen = reach_both_ways(plane, namespace, host_node="node-1", guest_node="vm", read=cat)
    assert seen.from_host == {"pod IP": "web-guest", "ClusterIP": "web-guest"}
    assert seen.from_guest == seen.expected_from_guest

`read` reads a file on the machine (the client's log under /var/log/pods): the answers are read
where the container wrote them, so the check needs nothing of the machine's agent but running
the pods. Also here: whether flannel has taken a node (`flannel_took`), which the tests wait for
before sending a packet.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml
from harness import flannel
from harness.controlplane import ControlPlane
from harness.vm.pods import wait_pod

PUBLIC_IP = "flannel.alpha.coreos.com/public-ip"
WEB = "echo $(hostname) > /tmp/index.html; exec httpd -f -p 8080 -h /tmp"
READY_TIMEOUT_S = 300.0


def apply(plane: ControlPlane, *objects: dict[str, Any]) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(doc))


def pod(name: str, namespace: str, node: str, command: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": name}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "c",
                    "image": "busybox",
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", command],
                }
            ],
            **spec,
        },
    }


def web(name: str, namespace: str, node: str) -> dict[str, Any]:
    """busybox httpd on :8080 answering its pod's name, Ready once it listens."""
    manifest = pod(name, namespace, node, WEB)
    manifest["spec"]["containers"][0]["readinessProbe"] = {
        "tcpSocket": {"port": 8080},
        "periodSeconds": 1,
    }
    return manifest


def service(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": {"app": name}, "ports": [{"port": 80, "targetPort": 8080}]},
    }


def is_ready(obj: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in obj.get("status", {}).get("conditions", [])
    )


def node_object(plane: ControlPlane, name: str) -> dict[str, Any] | None:
    got = plane.kubectl("get", "node", name, "-o", "json", check=False)
    return yaml.safe_load(got.stdout) if got.returncode == 0 else None


def flannel_pods(plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    pods = plane.get_json("pods", "-n", flannel.NAMESPACE)["items"]
    return [p for p in pods if p["spec"].get("nodeName") == node]


def flannel_took(plane: ControlPlane, node: str) -> bool:
    """flanneld on the node has leased its subnet (it annotates the Node with its public IP)
    and its pod is Ready, as `kubectl rollout status` waits for. The Node is Ready before that:
    flannel's init container writes the CNI config (the runtime's network is then ready)
    before flanneld starts."""
    obj = node_object(plane, node)
    if obj is None or PUBLIC_IP not in obj["metadata"].get("annotations", {}):
        return False
    return any(is_ready(p) for p in flannel_pods(plane, node))


def fetch_from(
    plane: ControlPlane, namespace: str, pod_name: str, url: str, within: float = 60
) -> str | None:
    """GET `url` from inside `pod_name` (busybox wget), retried until it answers or `within`
    ends."""
    deadline = time.monotonic() + within
    while True:
        done = plane.kubectl(
            "exec", "-n", namespace, pod_name, "--", "timeout", "3", "wget", "-q", "-O", "-", url,
            check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return str(done.stdout.strip())
        if time.monotonic() > deadline:
            return None
        time.sleep(1)


def client_script(urls: list[str]) -> str:
    """Fetch each URL (30 tries a second apart), print ``GOT <url> <body>``, or ``FAILED <url>``
    and exit 1. ``timeout 3 wget``, not ``wget -T 3``: Debian 12's static busybox 1.35 wget
    segfaults with -T."""
    return (
        "for u in " + " ".join(urls) + "; do ok=; for i in $(seq 30); do "
        'if b=$(timeout 3 wget -q -O - "$u"); then echo "GOT $u $b"; ok=1; break; fi; '
        "sleep 1; done; "
        '[ -n "$ok" ] || { echo "FAILED $u"; exit 1; }; done'
    )


@dataclass(frozen=True)
class Seen:
    """What each side got. `from_host`: what the host's node's pod fetched from the guest's,
    by target; `from_guest`: the guest's client's log lines; `expected_from_guest`: those lines
    had every fetch answered by the host's node's pod."""

    from_host: dict[str, str | None]
    from_guest: list[str]
    expected_from_guest: list[str]
    client_phase: str
    client_log: str


def reach_both_ways(
    plane: ControlPlane,
    namespace: str,
    *,
    host_node: str,
    guest_node: str,
    read: Callable[[str], str],
) -> Seen:
    """Web pods `web-host` on `host_node` and `web-guest` on `guest_node`, each behind its own
    Service; then the host's node's pod fetches the guest's by pod IP and by ClusterIP (the
    only endpoint is on the guest), and a client pod on the guest fetches the host's node's
    pod both ways. `read(path)` returns a file of the guest."""
    apply(
        plane,
        web("web-host", namespace, host_node),
        web("web-guest", namespace, guest_node),
        service("web-host", namespace),
        service("web-guest", namespace),
    )
    pods = {
        name: wait_pod(
            plane, name, is_ready, namespace=namespace, timeout=READY_TIMEOUT_S, what="Ready"
        )
        for name in ("web-host", "web-guest")
    }
    ips = {name: obj["status"]["podIP"] for name, obj in pods.items()}
    cluster_ips = {
        name: plane.get_json("service", name, "-n", namespace)["spec"]["clusterIP"]
        for name in ("web-host", "web-guest")
    }
    from_host = {
        target: fetch_from(plane, namespace, "web-host", url)
        for target, url in (
            ("pod IP", f"http://{ips['web-guest']}:8080/"),
            ("ClusterIP", f"http://{cluster_ips['web-guest']}/"),
        )
    }
    urls = [f"http://{ips['web-host']}:8080/", f"http://{cluster_ips['web-host']}/"]
    apply(plane, pod("client", namespace, guest_node, client_script(urls), restartPolicy="Never"))
    client = wait_pod(
        plane,
        "client",
        lambda p: p.get("status", {}).get("phase") in {"Succeeded", "Failed"},
        namespace=namespace,
        timeout=READY_TIMEOUT_S,
        what="the client pod to finish",
    )
    uid = client["metadata"]["uid"]
    log = read(f"/var/log/pods/{namespace}_client_{uid}/c/0.log")
    return Seen(
        from_host=from_host,
        from_guest=[line.split(" F ", 1)[1] for line in log.splitlines() if " F " in line],
        expected_from_guest=[f"GOT {u} web-host" for u in urls],
        client_phase=client["status"]["phase"],
        client_log=log,
    )

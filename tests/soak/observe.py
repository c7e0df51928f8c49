"""What the soak's checker sees, from outside the node: the API (over HTTPS as admin), each
node's CRI (a grpc client of our cri_protos on the node's containerd socket) and its kernel
(cgroups, the node's mounts, nft, conntrack, /proc). Each function returns the plain records
`invariants` judges; none of them judges anything."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.multinode import Node
from harness.pki import tls_client_context

from soak.invariants import (
    ApiNode,
    ApiPod,
    ApiWorkload,
    NodeArtifacts,
    RuntimeContainer,
    RuntimeSandbox,
)

POD_UID = "io.kubernetes.pod.uid"
POD_NAME = "io.kubernetes.pod.name"
POD_NAMESPACE = "io.kubernetes.pod.namespace"
CONTAINER_NAME = "io.kubernetes.container.name"
CGROUPS = Path("/sys/fs/cgroup")
UID_RE = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
CRI_TIMEOUT = 10.0
API_TIMEOUT = 8.0


class Unavailable(RuntimeError):
    """The API or a node's runtime did not answer (a fault in progress)."""


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


# --- the API ----------------------------------------------------------------------------------


def api_get(plane: ControlPlane, path: str) -> Any:
    """GET `path` as admin, within `API_TIMEOUT` (the apiserver hangs requests while etcd is
    away: the checker must not hang with them)."""
    context = tls_client_context(plane.pki.admin, ca=plane.ca_path)
    request = urllib.request.Request(
        f"{plane.server}{path}", headers={"Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=API_TIMEOUT, context=context) as response:
            return json.loads(response.read())
    except (OSError, ValueError) as error:
        raise Unavailable(f"GET {path}: {error}") from error


def to_api_pod(item: dict[str, Any]) -> ApiPod:
    meta, spec, status = item["metadata"], item["spec"], item.get("status") or {}
    owners = meta.get("ownerReferences") or [{}]
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    grace = float(meta.get("deletionGracePeriodSeconds") or 0)
    deleting = parse_time(meta.get("deletionTimestamp"))
    return ApiPod(
        uid=meta["uid"],
        namespace=meta["namespace"],
        name=meta["name"],
        node=spec.get("nodeName", ""),
        phase=status.get("phase", ""),
        ready=ready,
        deleting_since=None if deleting is None else deleting - grace,
        grace=grace,
        owner=owners[0].get("kind", ""),
        ip=status.get("podIP", ""),
        reason=status.get("reason", ""),
    )


def ready_transition(item: dict[str, Any]) -> tuple[float, bool] | None:
    """The pod's Ready condition and when it last changed (the node's own time)."""
    for c in (item.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            at = parse_time(c.get("lastTransitionTime"))
            return (at, c.get("status") == "True") if at is not None else None
    return None


def pods(plane: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api_get(plane, "/api/v1/pods")["items"]
    return items


def nodes(plane: ControlPlane) -> list[ApiNode]:
    out = []
    for item in api_get(plane, "/api/v1/nodes")["items"]:
        conditions = item["status"].get("conditions") or []
        ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        out.append(ApiNode(item["metadata"]["name"], ready))
    return out


def workloads(plane: ControlPlane, namespace: str) -> list[ApiWorkload]:
    out = []
    for d in api_get(plane, f"/apis/apps/v1/namespaces/{namespace}/deployments")["items"]:
        st = d.get("status") or {}
        out.append(
            ApiWorkload(
                "Deployment",
                namespace,
                d["metadata"]["name"],
                desired=d["spec"].get("replicas", 1),
                ready=min(st.get("readyReplicas", 0), st.get("replicas", 0)),
                updated=st.get("updatedReplicas", 0)
                if st.get("replicas") == st.get("updatedReplicas")
                else -1,
                observed=st.get("observedGeneration", 0) >= d["metadata"].get("generation", 0),
            )
        )
    for j in api_get(plane, f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]:
        st = j.get("status") or {}
        conditions = {c["type"]: c["status"] for c in st.get("conditions") or []}
        out.append(
            ApiWorkload(
                "Job",
                namespace,
                j["metadata"]["name"],
                desired=j["spec"].get("completions", 1),
                ready=st.get("succeeded", 0),
                updated=st.get("succeeded", 0),
                observed=True,
                done=conditions.get("Complete") == "True" or conditions.get("Failed") == "True",
            )
        )
    return out


def lease_renewals(plane: ControlPlane) -> dict[str, float]:
    path = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    out = {}
    for lease in api_get(plane, path)["items"]:
        renewed = parse_time(lease["spec"].get("renewTime"))
        if renewed is not None:
            out[lease["metadata"]["name"]] = renewed
    return out


# --- CRI --------------------------------------------------------------------------------------

_STATES = {0: "created", 1: "running", 2: "exited", 3: "unknown"}


@dataclass
class Runtime:
    containers: list[RuntimeContainer]
    sandboxes: list[RuntimeSandbox]


def runtime(node: Node, *, exit_codes_of: Iterable[str] = ()) -> Runtime:
    """Every container and sandbox on the node's containerd; exit codes for the exited
    containers among `exit_codes_of`."""
    import grpc

    from cri_protos.runtime.v1 import api_pb2, api_pb2_grpc

    wanted = set(exit_codes_of)
    try:
        with grpc.insecure_channel(f"unix://{node.containerd_dir / 'c.sock'}") as channel:
            stub = api_pb2_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]  # generated stubs are untyped
            listed = stub.ListContainers(api_pb2.ListContainersRequest(), timeout=CRI_TIMEOUT)
            boxes = stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=CRI_TIMEOUT)
            codes: dict[str, int] = {}
            for c in listed.containers:
                if c.id in wanted and c.state == 2:  # CONTAINER_EXITED
                    status = stub.ContainerStatus(
                        api_pb2.ContainerStatusRequest(container_id=c.id), timeout=CRI_TIMEOUT
                    )
                    codes[c.id] = status.status.exit_code
    except grpc.RpcError as error:
        raise Unavailable(f"{node.name} CRI: {error.code()}") from error
    containers = [
        RuntimeContainer(
            node=node.name,
            id=c.id,
            pod_uid=c.labels.get(POD_UID, ""),
            pod=f"{c.labels.get(POD_NAMESPACE, '')}/{c.labels.get(POD_NAME, '')}",
            name=c.labels.get(CONTAINER_NAME, c.metadata.name),
            attempt=c.metadata.attempt,
            state=_STATES.get(c.state, "unknown"),
            exit_code=codes.get(c.id),
        )
        for c in listed.containers
    ]
    sandboxes = [
        RuntimeSandbox(
            node=node.name,
            id=s.id,
            pod_uid=s.metadata.uid,
            pod=f"{s.metadata.namespace}/{s.metadata.name}",
            attempt=s.metadata.attempt,
            ready=s.state == 0,  # SANDBOX_READY
        )
        for s in boxes.items
    ]
    return Runtime(containers, sandboxes)


# --- the kernel -------------------------------------------------------------------------------


def _uid(text: str) -> str:
    return text.replace("_", "-")


def pod_cgroups(node: Node) -> frozenset[str]:
    """Pod UIDs with a `pod<uid>` cgroup under the node's cgroup root, in any hierarchy."""
    found: set[str] = set()
    seen: set[str] = set()
    for hierarchy in CGROUPS.iterdir() if CGROUPS.is_dir() else []:
        top = hierarchy / node.cgroup_root.lstrip("/")
        if not top.is_dir() or os.path.realpath(top) in seen:
            continue
        seen.add(os.path.realpath(top))
        for _, dirs, _ in os.walk(top):
            for d in dirs:
                m = re.fullmatch(rf"pod({UID_RE})(\.slice)?", d)
                if m:
                    found.add(_uid(m.group(1)))
    return frozenset(found)


def pod_mounts(node: Node) -> frozenset[str]:
    """Pod UIDs with a mount under `<root dir>/pods/<uid>/` in the node's mount namespace."""
    done = node.run("cat", "/proc/self/mountinfo", check=False, timeout=30)
    return frozenset(_uid(m) for m in re.findall(rf"/pods/({UID_RE})/", done.stdout))


def pod_dirs(root_dir: Path) -> frozenset[str]:
    try:
        return frozenset(
            p.name for p in (root_dir / "pods").iterdir() if re.fullmatch(UID_RE, p.name)
        )
    except OSError:
        return frozenset()


def _ips_in(text: str, cidr: str) -> frozenset[str]:
    net = ipaddress.ip_network(cidr)
    out = set()
    for candidate in re.findall(r"\b\d+\.\d+\.\d+\.\d+\b", text):
        try:
            if ipaddress.ip_address(candidate) in net:
                out.add(candidate)
        except ValueError:
            continue
    return frozenset(out)


def nft_pod_ips(node: Node, cluster_cidr: str) -> frozenset[str]:
    """Pod IPs (endpoint addresses) in the node's proxy rules: nodeagent's table or
    kube-proxy's, whichever the node has."""
    done = node.run("nft", "list", "ruleset", check=False, timeout=30)
    # the cluster CIDR itself is in masquerade rules as a prefix, not an address
    return _ips_in(re.sub(r"\d+\.\d+\.\d+\.\d+/\d+", "", done.stdout), cluster_cidr)


def conntrack_pod_ips(node: Node, cluster_cidr: str) -> frozenset[str]:
    """Pod IPs in the node's UDP conntrack entries (the proxy flushes those of a removed UDP
    endpoint; TCP entries are left to time out, by kube-proxy too)."""
    done = node.run("conntrack", "-L", "-p", "udp", check=False, timeout=30)
    return _ips_in(done.stdout, cluster_cidr)


def artifacts(node: Node, rt: Runtime, cluster_cidr: str, root_dir: Path) -> NodeArtifacts:
    return NodeArtifacts(
        node=node.name,
        sandboxes=frozenset(s.pod_uid for s in rt.sandboxes),
        containers=frozenset(c.pod_uid for c in rt.containers),
        cgroups=pod_cgroups(node),
        mounts=pod_mounts(node),
        pod_dirs=pod_dirs(root_dir),
        nft_ips=nft_pod_ips(node, cluster_cidr),
        conntrack_ips=conntrack_pod_ips(node, cluster_cidr),
    )


# --- processes --------------------------------------------------------------------------------

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_usage(pid: int | None) -> tuple[int, float] | None:
    """RSS (bytes) and CPU seconds (user + system) of `pid`, or None when it is gone."""
    if pid is None:
        return None
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rss = re.search(r"VmRSS:\s+(\d+) kB", status)
    fields = stat.rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    return (int(rss.group(1)) * 1024 if rss else 0), cpu

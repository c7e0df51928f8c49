"""Pod admission on the real control plane and containerd.

- Churn: pods the scheduler binds to the node while others leave it (force-deleted with grace
  0, as a namespace deletion removes the e2e suite's pods, or deleted with a grace period),
  some with init containers and sidecars, some resized in place: no pod the scheduler placed
  may be refused for resources (the node must count what the scheduler and the kubelet count).
- Host ports: two pods with the same ``hostPort`` bound to the node directly: the second is
  Failed with the kubelet's ``NodePorts`` reason, message and Event.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import remove_cgroup_tree, until
from test_pods import _get, cluster_node, remove_namespace_pods

from nodeagent.quantity import milli_value

pytestmark = pytest.mark.integration

SLOT = 400  # millicores a regular churn pod asks


def app(cpu: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": "app",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "3600"],
        "resources": {"requests": {"cpu": f"{cpu}m"}, "limits": {"cpu": f"{cpu}m"}},
        "resizePolicy": [{"resourceName": "cpu", "restartPolicy": "NotRequired"}],
        **extra,
    }


def churn_pod(name: str, node: str, kind: str) -> dict[str, Any]:
    """A pod the scheduler places (only a nodeSelector), one slot each: ``plain``; ``init``
    300m of app after a 400m init container (one slot maxed, 700m if they were summed);
    ``sidecar`` 100m of sidecar beside 300m of app."""
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [app(SLOT)],
    }
    if kind == "init":
        spec["containers"] = [app(300)]
        spec["initContainers"] = [
            {**app(SLOT), "name": "setup", "command": ["true"], "resizePolicy": []}
        ]
    elif kind == "sidecar":
        spec["containers"] = [app(300)]
        spec["initContainers"] = [{**app(100), "name": "proxy", "restartPolicy": "Always"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


class Api:
    """Raw API calls as cluster admin, each in a thread so several run at once."""

    def __init__(self, control_plane: Any, namespace: str) -> None:
        self._plane = control_plane
        self._base = f"/api/v1/namespaces/{namespace}/pods"

    async def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return await asyncio.to_thread(self._plane.api_request, method, path, body=body)

    async def create(self, body: dict[str, Any]) -> None:
        code, answer = await self._call("POST", self._base, body)
        assert code == 201, answer

    async def delete(self, name: str, grace: int) -> None:
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": grace}
        code, answer = await self._call("DELETE", f"{self._base}/{name}", body)
        assert code in (200, 202, 404), answer

    async def resize(self, name: str, cpu: int) -> None:
        patch = {"spec": {"containers": [{"name": "app", "resources": {
            "requests": {"cpu": f"{cpu}m"}, "limits": {"cpu": f"{cpu}m"}}}]}}  # fmt: skip
        code, answer = await self._call("PATCH", f"{self._base}/{name}/resize", patch)
        assert code == 200, answer

    async def pods(self) -> list[dict[str, Any]]:
        code, answer = await self._call("GET", self._base)
        assert code == 200, answer
        return list(answer.get("items") or [])


def refused(pods: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    out = []
    for p in pods:
        status = p.get("status") or {}
        if str(status.get("reason", "")).startswith("OutOf"):
            out.append((p["metadata"]["name"], status["reason"], status.get("message", "")))
    return out


@pytest.fixture
def namespace(control_plane: Any, containerd: RuntimeEnv) -> Iterator[str]:
    name = f"it-admit-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", name)
    yield name
    control_plane.kubectl("delete", "namespace", name, "--wait=false", check=False)


async def ready(control_plane: Any, node: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        obj = _get(control_plane, "node", node) or {}
        conditions = obj.get("status", {}).get("conditions", [])
        ok = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
        return obj if ok else None

    return dict(await until("the node Ready", check, within=90, every=1))


def forget_node(control_plane: Any, node: str) -> None:
    kubectl = control_plane.kubectl
    kubectl("delete", "node", node, "--ignore-not-found", check=False)
    kubectl("delete", "lease", node, "-n", "kube-node-lease", "--ignore-not-found", check=False)


async def test_no_pod_the_scheduler_binds_is_refused_while_others_leave(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path, namespace: str
) -> None:
    node = f"it-churn-{secrets.token_hex(3)}"
    api = Api(control_plane, namespace)
    kinds = ("plain", "init", "sidecar")
    created = 0

    async def create(count: int) -> list[str]:
        nonlocal created
        names = [f"p{created + i}" for i in range(count)]
        bodies = [
            churn_pod(n, node, kinds[(created + i) % len(kinds)]) for i, n in enumerate(names)
        ]
        created += count
        await asyncio.gather(*(api.create(b) for b in bodies))
        return names

    async def bound(names: list[str]) -> None:
        async def check() -> bool:
            pods = {p["metadata"]["name"]: p for p in await api.pods()}
            return all(pods.get(n, {}).get("spec", {}).get("nodeName") == node for n in names)

        await until(f"{names} bound to the node", check, within=60, every=0.2)

    try:
        async with cluster_node(control_plane, containerd, tmp_path, node, pod_events=True):
            allocatable = (await ready(control_plane, node))["status"]["allocatable"]
            slots = milli_value(allocatable["cpu"]) // SLOT
            assert slots >= 3, allocatable
            live = await create(slots)
            await bound(live)
            for round_ in range(6):
                # half of them leave the API at once while their workers are still starting
                # them; the same number of new pods is bound into the room they free
                leaving, live = live[: slots // 2], live[slots // 2 :]
                grace = 0 if round_ % 3 else 2  # every third round a graceful deletion
                removal = asyncio.gather(*(api.delete(n, grace) for n in leaving))
                arriving = create(len(leaving))
                _, new = await asyncio.gather(removal, arriving)
                live += new
                if round_ == 3:  # an in-place resize down, then back up
                    pods = {p["metadata"]["name"]: p for p in await api.pods()}
                    running = [
                        n
                        for n in live
                        if (pods.get(n) or {}).get("status", {}).get("phase") == "Running"
                    ]
                    if running:
                        await api.resize(running[0], SLOT // 2)
                        await api.resize(running[0], SLOT)
                await bound(new)
                assert refused(await api.pods()) == []

            async def settled() -> list[dict[str, Any]] | None:
                pods = [p for p in await api.pods() if p["metadata"]["name"] in live]
                phases = {p.get("status", {}).get("phase") for p in pods}
                return pods if len(pods) == len(live) and phases <= {"Running", "Failed"} else None

            pods = await until("the last pods Running", settled, within=180, every=1)
            assert refused(pods) == []
            assert {p["status"]["phase"] for p in pods} == {"Running"}
            events = (_get(control_plane, "events", "-n", namespace) or {}).get("items", [])
            assert [e for e in events if str(e.get("reason", "")).startswith("OutOf")] == []
            print(f"{created} pods created over 6 rounds on {slots} slots: none refused")
    finally:
        forget_node(control_plane, node)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(node) == []


def host_port_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,  # bound directly: the scheduler's NodePorts filter is not asked
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "ports": [{"containerPort": 8080, "hostPort": 18080, "protocol": "TCP"}],
                }
            ],
        },
    }


async def test_a_pod_whose_host_port_is_taken_is_refused_with_the_kubelets_reason(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path, namespace: str
) -> None:
    node = f"it-ports-{secrets.token_hex(3)}"
    kubectl = control_plane.kubectl
    try:
        async with cluster_node(control_plane, containerd, tmp_path, node, pod_events=True):
            await ready(control_plane, node)
            kubectl(
                "apply", "-n", namespace, "-f", "-", input=json.dumps(host_port_pod("first", node))
            )
            await until(
                "the first pod Running",
                lambda: (
                    (
                        (_get(control_plane, "pod", "first", "-n", namespace) or {}).get("status")
                        or {}
                    ).get("phase")
                    == "Running"
                ),
                within=90,
                every=0.5,
            )
            kubectl(
                "apply", "-n", namespace, "-f", "-", input=json.dumps(host_port_pod("second", node))
            )

            def failed() -> dict[str, Any] | None:
                pod = _get(control_plane, "pod", "second", "-n", namespace) or {}
                return pod if (pod.get("status") or {}).get("phase") == "Failed" else None

            pod = await until("the second pod Failed", failed, within=60, every=0.5)
            message = (
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested "
                "pod ports"
            )
            assert pod["status"]["reason"] == "NodePorts"
            assert pod["status"]["message"] == f"Pod was rejected: {message}"

            def event() -> list[dict[str, Any]]:
                items = (_get(control_plane, "events", "-n", namespace) or {}).get("items", [])
                return [
                    e
                    for e in items
                    if e["involvedObject"].get("name") == "second" and e["reason"] == "NodePorts"
                ]

            [seen] = await until("the NodePorts Event", event, within=30, every=0.5)
            assert (seen["type"], seen["message"]) == ("Warning", message)
            first = _get(control_plane, "pod", "first", "-n", namespace) or {}
            assert first["status"]["phase"] == "Running"
    finally:
        forget_node(control_plane, node)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(node) == []

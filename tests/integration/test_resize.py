"""In-place pod resize on the real containerd and kube-apiserver: ``kubectl patch pod
--subresource resize`` raising a Burstable pod's cpu and memory limits reaches the container's
cgroup (cgroup v1 on this host: the container manager is in maintenance mode, CRI
``UpdateContainerResources`` alone carries the limits) and the pod's status, with the
``ResizeStarted``/``ResizeCompleted`` Events; a resize with no room beside another pod stays
``PodResizePending``/``Deferred`` with the kubelet's message until that pod is gone.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import pytest
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import remove_cgroup_tree, until
from test_pods import _get, cluster_node, remove_namespace_pods

from nodeagent.kuberuntime import CriClient
from nodeagent.pods.managers import PodManagers
from nodeagent.quantity import milli_value

pytestmark = pytest.mark.integration

V1 = Path("/sys/fs/cgroup")


def resize_pod(name: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "32Mi"},
                        "limits": {"cpu": "200m", "memory": "64Mi"},
                    },
                    "resizePolicy": [
                        {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                        {"resourceName": "memory", "restartPolicy": "NotRequired"},
                    ],
                }
            ],
        },
    }


def _cgroup_dir(cgroups_path: str) -> str:
    """The container's cgroup below each v1 hierarchy (cgroupfs or systemd notation)."""
    if ":" not in cgroups_path:
        return cgroups_path.lstrip("/")
    slice_, prefix, name = cgroups_path.split(":")
    parts = slice_.removesuffix(".slice").split("-")
    slices = ["-".join(parts[: i + 1]) + ".slice" for i in range(len(parts))]
    return "/".join([*slices, f"{prefix}-{name}.scope"])


async def container_cgroup(endpoint: str, container_id: str) -> str:
    async with CriClient.open(endpoint) as client:
        response = await client.container_status(container_id, verbose=True)
    info = json.loads(response.info["info"])
    return _cgroup_dir(info["runtimeSpec"]["linux"]["cgroupsPath"])


def v1_limits(cgroup: str) -> tuple[int, int]:
    quota = int((V1 / "cpu" / cgroup / "cpu.cfs_quota_us").read_text())
    memory = int((V1 / "memory" / cgroup / "memory.limit_in_bytes").read_text())
    return quota, memory


def condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


async def test_resize_raises_container_limits_and_defers_without_room(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    suffix = secrets.token_hex(3)
    node, namespace = f"it-resize-{suffix}", f"it-resize-{suffix}"
    kubectl = control_plane.kubectl
    kubectl("create", "namespace", namespace)
    try:
        async with cluster_node(control_plane, containerd, tmp_path, node, pod_events=True) as pods:
            body = resize_pod("web", node)
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(body))

            def running() -> dict[str, Any] | None:
                pod = _get(control_plane, "pod", "web", "-n", namespace)
                statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
                ok = statuses and "running" in statuses[0].get("state", {})
                return pod if ok else None

            pod = await until("the pod Running", running, within=120, every=0.5)
            app = pod["status"]["containerStatuses"][0]
            container_id = app["containerID"].removeprefix("containerd://")
            cgroup = await container_cgroup(containerd.endpoint, container_id)
            assert v1_limits(cgroup) == (20_000, 64 * 2**20)
            assert app["allocatedResources"] == {"cpu": "100m", "memory": "32Mi"}
            assert app["resources"]["limits"] == {"cpu": "200m", "memory": "64Mi"}

            patch = {
                "spec": {
                    "containers": [
                        {"name": "app", "resources": {"limits": {"cpu": "400m", "memory": "128Mi"}}}
                    ]
                }
            }
            kubectl(
                "patch", "pod", "web", "-n", namespace, "--subresource", "resize",
                "--patch", json.dumps(patch),
            )  # fmt: skip

            await until(
                "the new limits in the container's cgroup",
                lambda: v1_limits(cgroup) == (40_000, 128 * 2**20),
                within=60,
                explain=lambda: v1_limits(cgroup),
            )

            def reported() -> dict[str, Any] | None:
                pod = _get(control_plane, "pod", "web", "-n", namespace)
                app = (pod or {}).get("status", {}).get("containerStatuses", [{}])[0]
                limits = (app.get("resources") or {}).get("limits")
                done = condition(pod, "PodResizeInProgress") is None
                return pod if limits == {"cpu": "400m", "memory": "128Mi"} and done else None

            pod = await until(
                "the status reports the new limits",
                reported,
                within=60,
                explain=lambda: _get(control_plane, "pod", "web", "-n", namespace),
            )
            app = pod["status"]["containerStatuses"][0]
            assert app["containerID"] == f"containerd://{container_id}"  # not restarted
            assert app["restartCount"] == 0
            assert condition(pod, "PodResizePending") is None

            def resize_events() -> set[str] | None:
                events = _get(control_plane, "events", "-n", namespace) or {}
                reasons = {str(e.get("reason")) for e in events.get("items", [])}
                wanted = {"ResizeStarted", "ResizeCompleted"}
                return reasons if wanted <= reasons else None

            await until("the ResizeStarted and ResizeCompleted Events", resize_events, within=30)

            await deferred_until_room(control_plane, pods, namespace, node, cgroup)
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "node", node, "--ignore-not-found", check=False)
        kubectl("delete", "lease", node, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(node) == []


async def deferred_until_room(
    control_plane: Any, pods: PodManagers, namespace: str, node: str, cgroup: str
) -> None:
    """A resize that fits the node but not beside another pod's requests: PodResizePending
    Deferred with the kubelet's message, nothing applied, and what eviction ranks the pod by
    (``PodManagers.allocated_pods``) still its allocated request; once that pod is gone it is
    applied.
    (A request beyond the node's allocatable never reaches the node: the 1.36 apiserver refuses
    the resize itself.)"""
    kubectl = control_plane.kubectl
    hog = resize_pod("hog", node)
    hog["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1500m"}}
    kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(hog))
    await until(
        "the other pod Running",
        lambda: (
            ((_get(control_plane, "pod", "hog", "-n", namespace) or {}).get("status") or {}).get(
                "phase"
            )
            == "Running"
        ),
        within=120,
        every=0.5,
    )
    allocatable = _get(control_plane, "node", node)["status"]["allocatable"]["cpu"]
    capacity = milli_value(allocatable)
    wanted = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    patch = {"spec": {"containers": [{"name": "app", "resources": wanted}]}}
    kubectl(
        "patch", "pod", "web", "-n", namespace, "--subresource", "resize",
        "--patch", json.dumps(patch),
    )  # fmt: skip
    pending = await until(
        "PodResizePending Deferred",
        lambda: condition(_get(control_plane, "pod", "web", "-n", namespace), "PodResizePending"),
        within=60,
    )
    assert (pending["status"], pending["reason"]) == ("True", "Deferred")
    assert pending["message"] == (
        f"Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: {capacity}"
    )
    assert v1_limits(cgroup) == (40_000, 128 * 2**20)  # nothing applied
    app = _get(control_plane, "pod", "web", "-n", namespace)["status"]["containerStatuses"][0]
    assert app["allocatedResources"]["cpu"] == "100m"
    assert app["resources"]["limits"]["cpu"] == "400m"
    ranked = next(p for p in pods.allocated_pods() if p.name == "web")
    assert ranked.spec.containers[0].resources.requests["cpu"] == "100m"
    desired = next(p for p in pods.active_pods() if p.name == "web")
    assert desired.spec.containers[0].resources.requests["cpu"] == "1"

    kubectl("delete", "pod", "hog", "-n", namespace, "--wait=false")
    await until(
        "the deferred resize applied once there is room",
        lambda: v1_limits(cgroup) == (100_000, 128 * 2**20),
        within=120,
        every=1,
        explain=lambda: _get(control_plane, "pod", "web", "-n", namespace),
    )


def meshed_pod(name: str, node: str) -> dict[str, Any]:
    """``resize_pod`` with a sidecar ``proxy`` whose memory resize restarts it."""
    body = resize_pod(name, node)
    body["spec"]["initContainers"] = [
        {
            "name": "proxy",
            "image": BUSYBOX_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sleep", "3600"],
            "restartPolicy": "Always",
            "resources": {
                "requests": {"cpu": "50m", "memory": "16Mi"},
                "limits": {"cpu": "100m", "memory": "32Mi"},
            },
            "resizePolicy": [
                {"resourceName": "cpu", "restartPolicy": "NotRequired"},
                {"resourceName": "memory", "restartPolicy": "RestartContainer"},
            ],
        }
    ]
    return body


def _statuses(pod: dict[str, Any] | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the sidecar's status, the app's status)."""
    status = (pod or {}).get("status") or {}
    sidecar = (status.get("initContainerStatuses") or [{}])[0]
    app = (status.get("containerStatuses") or [{}])[0]
    return sidecar, app


async def test_resize_restarts_a_sidecar_with_restart_container_and_keeps_the_app(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    suffix = secrets.token_hex(3)
    node, namespace = f"it-resize-sc-{suffix}", f"it-resize-sc-{suffix}"
    kubectl = control_plane.kubectl
    kubectl("create", "namespace", namespace)
    try:
        async with cluster_node(control_plane, containerd, tmp_path, node, pod_events=True):
            kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(meshed_pod("web", node)))
            await restart_sidecar(control_plane, containerd, namespace)
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "node", node, "--ignore-not-found", check=False)
        kubectl("delete", "lease", node, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(node) == []


async def restart_sidecar(control_plane: Any, containerd: RuntimeEnv, namespace: str) -> None:
    """The sidecar's memory limit resized under ``RestartContainer``: a new sidecar container
    with the new limit in its cgroup, restartCount 1, the status' ``resources``, the app
    container untouched, ``PodResizeInProgress`` cleared, the Killing Event's message."""
    kubectl = control_plane.kubectl

    def get() -> Any:
        return _get(control_plane, "pod", "web", "-n", namespace)

    def running() -> dict[str, Any] | None:
        pod = get()
        sidecar, app = _statuses(pod)
        both = "running" in sidecar.get("state", {}) and "running" in app.get("state", {})
        return pod if both else None

    pod = await until("the sidecar and the app Running", running, within=120, every=0.5)
    sidecar, app = _statuses(pod)
    app_id = app["containerID"]
    old_id = sidecar["containerID"].removeprefix("containerd://")
    old_cgroup = await container_cgroup(containerd.endpoint, old_id)
    assert v1_limits(old_cgroup) == (10_000, 32 * 2**20)

    limits = {"cpu": "100m", "memory": "48Mi"}
    patch = {"spec": {"initContainers": [{"name": "proxy", "resources": {"limits": limits}}]}}
    kubectl(
        "patch", "pod", "web", "-n", namespace, "--subresource", "resize",
        "--patch", json.dumps(patch),
    )  # fmt: skip

    def reported() -> dict[str, Any] | None:
        pod = get()
        sidecar, _ = _statuses(pod)
        ok = (
            (sidecar.get("resources") or {}).get("limits") == limits
            and condition(pod, "PodResizeInProgress") is None
            and sidecar.get("restartCount") == 1
            and "running" in sidecar.get("state", {})
        )
        return pod if ok else None

    pod = await until(
        "the sidecar restarted with the new limits, the resize done",
        reported,
        within=90,
        explain=get,
    )
    sidecar, app = _statuses(pod)
    new_id = sidecar["containerID"].removeprefix("containerd://")
    assert new_id != old_id
    new_cgroup = await container_cgroup(containerd.endpoint, new_id)
    assert v1_limits(new_cgroup) == (10_000, 48 * 2**20)
    assert sidecar["allocatedResources"] == {"cpu": "50m", "memory": "16Mi"}
    assert app["containerID"] == app_id  # the app container was not restarted
    assert app["restartCount"] == 0
    assert "running" in app["state"]
    assert condition(pod, "PodResizePending") is None

    def killing_after_resize() -> list[str] | None:
        events = (_get(control_plane, "events", "-n", namespace) or {}).get("items", [])
        reasons = {str(e.get("reason")) for e in events}
        killing = sorted(str(e.get("message")) for e in events if e.get("reason") == "Killing")
        done = {"ResizeStarted", "ResizeCompleted"} <= reasons
        return killing if done and killing else None

    killing = await until("the resize Events", killing_after_resize, within=30)
    assert killing == ["Container proxy resize requires restart"]

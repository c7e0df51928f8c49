"""Local ephemeral storage isolation on the real control plane and containerd, with the whole
agent (``nodeagent run``, default configuration: ``localStorageCapacityIsolation`` on) as the
node and no disk pressure anywhere. Four busybox pods are created together:

- ``rootfs-hog``: one container with ``limits: ephemeral-storage: 1Mi`` writes 4 MiB into its
  own file system (the writable layer containerd measures). As with the kubelet, the pod's
  total is checked before the container, so (like the e2e spec "Services should be rejected
  for evicted pods") it is evicted with "Pod ephemeral local storage usage exceeds the total
  limit of containers 1Mi. ";
- ``container-hog``: its ``app`` container (1Mi) writes 4 MiB while ``idle`` (20Mi) keeps the
  pod's total above what it uses: "Container app exceeded its local ephemeral storage limit
  "1Mi". ";
- ``emptydir-hog``: no container limit, 4 MiB into an emptyDir with ``sizeLimit: 1Mi``:
  "Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ";
- ``within``: 1 MiB written under a 20Mi limit.

The three hogs end ``Failed`` with reason ``Evicted`` and those messages, a Warning
``Evicted`` Event each, their containers stopped in containerd and the pods left in the API
(as the kubelet leaves them); ``within`` keeps running through later passes.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, runtime_view, sleeper_pod, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID

pytestmark = pytest.mark.integration

WRITE_4M = "dd if=/dev/zero of={path} bs=1048576 count=4 && sync; sleep 3600"
MESSAGES = {
    "rootfs-hog": "Pod ephemeral local storage usage exceeds the total limit of containers 1Mi. ",
    "container-hog": 'Container app exceeded its local ephemeral storage limit "1Mi". ',
    "emptydir-hog": 'Usage of EmptyDir volume "scratch" exceeds the limit "1Mi". ',
}


def shell(name: str, script: str, limit: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", script],
    }
    if limit is not None:
        body["resources"] = {"limits": {"ephemeral-storage": limit}}
    return body


def manifests(node: AgentNode) -> dict[str, dict[str, Any]]:
    def pod(name: str, containers: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
        body = sleeper_pod(name, node.namespace, node.name)
        body["spec"].update(containers=containers, **spec)
        return body

    return {
        "rootfs-hog": pod("rootfs-hog", [shell("app", WRITE_4M.format(path="/fill"), "1Mi")]),
        "container-hog": pod(
            "container-hog",
            [
                shell("app", WRITE_4M.format(path="/fill"), "1Mi"),
                shell("idle", "sleep 3600", "20Mi"),
            ],
        ),
        "emptydir-hog": pod(
            "emptydir-hog",
            [
                {
                    **shell("app", WRITE_4M.format(path="/scratch/fill")),
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
            volumes=[{"name": "scratch", "emptyDir": {"sizeLimit": "1Mi"}}],
        ),
        "within": pod(
            "within",
            [shell("app", "dd if=/dev/zero of=/fill bs=1048576 count=1 && sleep 3600", "20Mi")],
        ),
    }


def get_pod(control_plane: ControlPlane, node: AgentNode, name: str) -> dict[str, Any]:
    return api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/pods/{name}") or {}


def events(control_plane: ControlPlane, node: AgentNode) -> list[dict[str, Any]]:
    listed = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/events") or {}
    return list(listed.get("items", []))


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


async def running_containers(node: AgentNode, uid: str) -> list[cri.Container]:
    view = await runtime_view(node.endpoint, node.namespace)
    return [
        c
        for c in view.containers
        if c.labels.get(POD_UID) == uid and c.state == cri.CONTAINER_RUNNING
    ]


async def test_pods_over_their_local_storage_limits_are_evicted_and_one_within_runs(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        for body in manifests(node).values():
            code, answer = control_plane.api_request(
                "POST", f"/api/v1/namespaces/{node.namespace}/pods", body=body
            )
            assert code == 201, (code, answer)
        await until(
            "within Running",
            lambda: phase(get_pod(control_plane, node, "within")) == "Running",
            within=90,
            every=0.5,
            explain=lambda: node.log_tail(1500),
        )
        started = time.monotonic()
        for name, message in MESSAGES.items():
            pod = await until(
                f"{name} Failed",
                lambda name=name: (
                    (p := get_pod(control_plane, node, name)) and phase(p) == "Failed" and p
                ),
                within=120,
                every=0.5,
                explain=lambda name=name: (
                    get_pod(control_plane, node, name).get("status"),
                    node.log_tail(2000),
                ),
            )
            status = pod["status"]
            assert (status["reason"], status["message"]) == ("Evicted", message), status
            kinds = [c["type"] for c in status.get("conditions") or []]
            assert "DisruptionTarget" not in kinds, status  # the kubelet sets none for these
            await until(
                f"{name}'s containers stopped",
                lambda pod=pod: _none(running_containers(node, pod["metadata"]["uid"])),
                within=30,
            )
        print(f"three pods evicted {time.monotonic() - started:.1f} s after within ran")
        recorded = {
            e["involvedObject"]["name"]: (e["type"], e["reason"], e["message"])
            for e in events(control_plane, node)
            if e["reason"] == "Evicted"
        }
        assert recorded == {name: ("Warning", "Evicted", m) for name, m in MESSAGES.items()}
        # two more eviction passes (10 s apart): the pod within its limit runs on
        for _ in range(25):
            assert phase(get_pod(control_plane, node, "within")) == "Running"
            await asyncio.sleep(1)
        within = get_pod(control_plane, node, "within")
        assert phase(within) == "Running", within.get("status")
        assert await running_containers(node, within["metadata"]["uid"])
        for name in MESSAGES:
            assert phase(get_pod(control_plane, node, name)) == "Failed"


async def _none(containers: Any) -> bool:
    return not await containers

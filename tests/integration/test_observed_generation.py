"""``observedGeneration`` through the real kube-apiserver: the apiserver bumps a pod's
``metadata.generation`` on every spec change; the node reports, in ``status.observedGeneration``
and in each condition it writes, the generation it acted on, as the 1.36 kubelet does. The
test waits for it as a client does (``kubectl wait``, controllers): observed >= generation.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from agentproc import agent_node, api_get, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

pytestmark = pytest.mark.integration

KUBELET_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


def resizable_pod(node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gen"},
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


def observed(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod once its node has observed its current generation, as a client checks it."""
    if not pod:
        return None
    status = pod.get("status") or {}
    if int(status.get("observedGeneration") or 0) < pod["metadata"]["generation"]:
        return None
    return pod


def condition_generations(pod: dict[str, Any]) -> dict[str, int | None]:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return {c["type"]: c.get("observedGeneration") for c in conditions}


async def test_observed_generation_follows_a_spec_change_and_a_resize(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl = control_plane.kubectl
        path = f"/api/v1/namespaces/{ns}/pods/gen"
        kubectl("create", "-n", ns, "-f", "-", input=json.dumps(resizable_pod(node.name)))

        def running() -> dict[str, Any] | None:
            pod = observed(api_get(control_plane, path))
            return pod if pod and pod["status"].get("phase") == "Running" else None

        pod = await until("the pod Running, generation 1 observed", running, within=90,
                          every=0.5, explain=node.log_tail)  # fmt: skip
        assert pod["metadata"]["generation"] == pod["status"]["observedGeneration"] == 1
        assert {condition_generations(pod)[t] for t in KUBELET_CONDITIONS} == {1}

        # A spec change that needs nothing of the runtime: the generation moves, the node
        # reports it has seen it.
        kubectl("patch", "pod", "gen", "-n", ns, "--type=merge",
                "-p", json.dumps({"spec": {"activeDeadlineSeconds": 3600}}))  # fmt: skip
        changed = api_get(control_plane, path)["metadata"]["generation"]
        assert changed == 2
        pod = await until("generation 2 observed", lambda: observed(api_get(control_plane, path)),
                          within=60, explain=lambda: api_get(control_plane, path))  # fmt: skip
        assert pod["status"]["observedGeneration"] == 2
        assert {condition_generations(pod)[t] for t in KUBELET_CONDITIONS} == {2}

        # An in-place resize: observed once the node has acted on it.
        limits = {"cpu": "300m", "memory": "96Mi"}
        patch = {"spec": {"containers": [{"name": "app", "resources": {"limits": limits}}]}}
        kubectl("patch", "pod", "gen", "-n", ns, "--subresource", "resize",
                "--patch", json.dumps(patch))  # fmt: skip
        resized = api_get(control_plane, path)["metadata"]["generation"]
        assert resized == 3

        def resize_observed() -> dict[str, Any] | None:
            pod = observed(api_get(control_plane, path))
            app = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
            applied = (app[0].get("resources") or {}).get("limits") == limits
            done = pod is not None and "PodResizeInProgress" not in condition_generations(pod)
            return pod if applied and done else None

        pod = await until("the resize applied and generation 3 observed", resize_observed,
                          within=60, explain=lambda: api_get(control_plane, path))  # fmt: skip
        assert pod["status"]["observedGeneration"] == 3
        assert {condition_generations(pod)[t] for t in KUBELET_CONDITIONS} == {3}

        # The resize Events name the generation they were about, as the kubelet's do.
        def resize_events() -> dict[str, str] | None:
            events = api_get(control_plane, f"/api/v1/namespaces/{ns}/events") or {}
            found = {
                e["reason"]: e["message"]
                for e in events.get("items", [])
                if e["involvedObject"].get("name") == "gen"
            }
            return found if {"ResizeStarted", "ResizeCompleted"} <= set(found) else None

        events = await until("the resize Events", resize_events, within=30)
        for reason in ("ResizeStarted", "ResizeCompleted"):
            assert '"generation":3' in events[reason], events[reason]

"""``spec.activeDeadlineSeconds`` and ``spec.readinessGates`` on the real control plane and
containerd, with the whole agent (``nodeagent run``) as the node:

- a busybox pod with ``activeDeadlineSeconds: 15`` runs, then ends ``Failed`` with the
  kubelet's reason and message once 15 s from its ``startTime`` have passed, its container
  stopped in containerd, and the ``DeadlineExceeded`` Event recorded;
- a running pod whose deadline is lowered by a PATCH of its spec (the apiserver allows
  decreasing it) runs on until the new deadline and is killed right after it (well before the
  60 s resync);
- a pod with a readiness gate stays ``Ready=False`` (``ReadinessGatesNotReady``) while its
  containers are ready, turns Ready within seconds of the test writing the gate's condition
  True with a strategic merge PATCH of ``pods/<name>/status`` (as a controller does, and as
  the e2e spec does), keeps that condition through the agent's own status patches, and turns
  unready again when the condition is set False.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, runtime_view, sleeper_pod, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID

pytestmark = pytest.mark.integration

REASON = "DeadlineExceeded"
MESSAGE = "Pod was active on the node longer than the specified deadline"
GATE = "example.com/load-balancer"
RESYNC = 60.0  # the agent's syncFrequency: a deadline must act well before it


def get_pod(control_plane: ControlPlane, node: AgentNode, name: str) -> dict[str, Any]:
    return api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/pods/{name}") or {}


def create(control_plane: ControlPlane, node: AgentNode, name: str, **spec: Any) -> None:
    body = sleeper_pod(name, node.namespace, node.name)
    body["spec"].update(spec)
    code, answer = control_plane.api_request(
        "POST", f"/api/v1/namespaces/{node.namespace}/pods", body=body
    )
    assert code == 201, (code, answer)


def phase(pod: dict[str, Any]) -> str:
    return str((pod.get("status") or {}).get("phase", ""))


def condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    found = [c for c in (pod.get("status") or {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def start_time(pod: dict[str, Any]) -> float:
    text = pod["status"]["startTime"]
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def events(control_plane: ControlPlane, node: AgentNode, pod: str) -> list[dict[str, Any]]:
    listed = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/events") or {}
    return [e for e in listed.get("items", []) if e["involvedObject"]["name"] == pod]


async def running_containers(node: AgentNode, pod: dict[str, Any]) -> list[cri.Container]:
    view = await runtime_view(node.endpoint, node.namespace)
    uid = pod["metadata"]["uid"]
    return [
        c
        for c in view.containers
        if c.labels.get(POD_UID) == uid and c.state == cri.CONTAINER_RUNNING
    ]


async def started(control_plane: ControlPlane, node: AgentNode, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = await until(
        f"{name} Running",
        lambda: (p := get_pod(control_plane, node, name)) and phase(p) == "Running" and p,
        within=90,
        every=0.5,
        explain=lambda: (get_pod(control_plane, node, name).get("status"), node.log_tail(1500)),
    )
    return pod


async def failed_at(control_plane: ControlPlane, node: AgentNode, name: str) -> float:
    """Wall time at which the pod was first seen Failed (polled every 0.25 s)."""
    await until(
        f"{name} Failed",
        lambda: phase(get_pod(control_plane, node, name)) == "Failed",
        within=120,
        every=0.25,
        explain=lambda: (get_pod(control_plane, node, name).get("status"), node.log_tail(1500)),
    )
    return time.time()


async def test_a_pod_past_its_active_deadline_fails_and_is_killed(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        create(control_plane, node, "deadline", activeDeadlineSeconds=15)
        pod = await started(control_plane, node, "deadline")
        due = start_time(pod) + 15
        assert time.time() < due - 2, "the pod took too long to start for this test"

        seen = await failed_at(control_plane, node, "deadline")
        print(f"deadline 15 s: Failed seen {seen - due:+.2f} s after startTime + 15 s")
        # startTime has whole seconds: the deadline falls at most 1 s before `due`
        assert due - 1.5 <= seen <= due + 3, (seen - due, node.log_tail(1500))
        pod = get_pod(control_plane, node, "deadline")
        status = pod["status"]
        assert (status["reason"], status["message"]) == (REASON, MESSAGE)
        assert condition(pod, "Ready")["status"] == "False"
        await until(
            "no running container left",
            lambda: _none(running_containers(node, pod)),
            within=20,
        )
        recorded = [e for e in events(control_plane, node, "deadline") if e["reason"] == REASON]
        assert recorded, events(control_plane, node, "deadline")
        assert (recorded[0]["type"], recorded[0]["message"]) == ("Normal", MESSAGE)
        await until(
            "the terminated container in the status",
            lambda: (
                "terminated"
                in (get_pod(control_plane, node, "deadline")["status"]["containerStatuses"][0])[
                    "state"
                ]
            ),
            within=20,
        )
        assert phase(get_pod(control_plane, node, "deadline")) == "Failed"


async def _none(containers: Any) -> bool:
    return not await containers


async def test_a_deadline_lowered_on_a_running_pod_kills_it_at_the_new_time(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        create(control_plane, node, "lowered", activeDeadlineSeconds=3600)
        pod = await started(control_plane, node, "lowered")
        # the new deadline lies 12 s ahead: neither now nor at a resync, but then
        age = time.time() - start_time(pod)
        lowered = math.ceil(age) + 12
        control_plane.kubectl(
            "patch", "pod", "lowered", "-n", node.namespace, "--type=merge",
            "-p", json.dumps({"spec": {"activeDeadlineSeconds": lowered}}),
        )  # fmt: skip
        due = start_time(pod) + lowered
        patched = get_pod(control_plane, node, "lowered")
        assert patched["spec"]["activeDeadlineSeconds"] == lowered
        assert phase(patched) == "Running"

        seen = await failed_at(control_plane, node, "lowered")
        print(f"deadline lowered to {lowered} s: Failed seen {seen - due:+.2f} s after it fell")
        assert due - 1.5 <= seen <= due + 3, (seen - due, node.log_tail(1500))
        assert seen - (due - lowered) < RESYNC
        status = get_pod(control_plane, node, "lowered")["status"]
        assert (status["reason"], status["message"]) == (REASON, MESSAGE)
        await until(
            "no running container left",
            lambda: _none(running_containers(node, get_pod(control_plane, node, "lowered"))),
            within=20,
        )


def set_gate(control_plane: ControlPlane, node: AgentNode, pod: str, value: str) -> None:
    """What a controller does: a strategic merge PATCH of the status naming one condition."""
    patch = {"status": {"conditions": [{"type": GATE, "status": value}]}}
    control_plane.kubectl(
        "patch", "pod", pod, "-n", node.namespace, "--subresource=status",
        "--type=strategic", "-p", json.dumps(patch),
    )  # fmt: skip


async def test_ready_waits_for_the_readiness_gate_a_controller_sets(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        create(control_plane, node, "gated", readinessGates=[{"conditionType": GATE}])

        def pod() -> dict[str, Any]:
            return get_pod(control_plane, node, "gated")

        await until(
            "containers ready",
            lambda: condition(pod(), "ContainersReady").get("status") == "True",
            within=90,
            every=0.5,
            explain=lambda: (pod().get("status"), node.log_tail(1500)),
        )
        ready = condition(pod(), "Ready")
        assert (ready["status"], ready["reason"], ready["message"]) == (
            "False",
            "ReadinessGatesNotReady",
            f'corresponding condition of pod readiness gate "{GATE}" does not exist.',
        )

        set_gate(control_plane, node, "gated", "True")
        at = time.monotonic()
        await until(
            "Ready after the gate turned True",
            lambda: condition(pod(), "Ready").get("status") == "True",
            within=10,
            every=0.2,
            explain=lambda: (pod().get("status"), node.log_tail(1500)),
        )
        took = time.monotonic() - at
        print(f"readiness gate set True: Ready seen after {took:.2f} s")
        assert took < 5, took  # from the pod watch, not a resync
        assert condition(pod(), GATE)["status"] == "True"  # kept by the agent's patch

        set_gate(control_plane, node, "gated", "False")
        await until(
            "unready after the gate turned False",
            lambda: condition(pod(), "Ready").get("status") == "False",
            within=10,
            every=0.2,
            explain=lambda: (pod().get("status"), node.log_tail(1500)),
        )
        ready = condition(pod(), "Ready")
        assert (ready["reason"], ready["message"]) == (
            "ReadinessGatesNotReady",
            f'the status of pod readiness gate "{GATE}" is not "True", but False',
        )
        assert condition(pod(), GATE)["status"] == "False"
        assert condition(pod(), "ContainersReady")["status"] == "True"
        assert phase(pod()) == "Running"

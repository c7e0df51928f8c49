"""`nodeagent run` as a real process, killed and with its runtime restarted under it.

Real control plane, real containerd; the pods are created through the API already bound to
the node (``spec.nodeName``), as the scheduler binds them, and counted in containerd over CRI.

- kill -9 of the agent while 10 pods are starting, then a new agent on the same root dir:
  every pod ends Running exactly once (one running container, one ready sandbox, the one its
  status names), nothing belongs to no pod, and the agent logged no traceback;
- containerd stopped under a running agent: the Node turns Ready=False with the kubelet's
  "container runtime is down", then Ready again once containerd is back, and the pods were not
  touched (same sandboxes and containers, restartCount 0, still Running).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
from agentproc import (
    AgentNode,
    RuntimeView,
    agent_node,
    create_pods,
    ever_started,
    phases,
    pods_in,
    private_containerd,
    ready_condition,
    runtime_view,
    wait_ready,
)
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BuiltImage
from podnode import until

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.runtimestate import RUNTIME_DOWN

pytestmark = pytest.mark.integration

PODS = 10


async def all_running(control_plane: ControlPlane, node: AgentNode, names: list[str]) -> None:
    def check() -> bool:
        assert node.alive(), f"the agent exited:\n{node.log_tail()}"
        got = phases(pods_in(control_plane, node.namespace))
        return all(got.get(n) == "Running" for n in names)

    await until(
        f"{len(names)} pods Running",
        check,
        within=90,
        every=0.5,
        explain=lambda: phases(pods_in(control_plane, node.namespace)),
    )


def by_uid(view: RuntimeView) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Running container ids and ready sandbox ids per pod uid."""
    running: dict[str, list[str]] = {}
    ready: dict[str, list[str]] = {}
    for c in view.containers:
        if c.state == cri.CONTAINER_RUNNING:
            running.setdefault(c.labels.get(POD_UID, ""), []).append(c.id)
    for s in view.sandboxes:
        if s.state == cri.SANDBOX_READY:
            ready.setdefault(s.labels.get(POD_UID, ""), []).append(s.id)
    return running, ready


async def test_agent_killed_while_pods_start_runs_each_pod_exactly_once_after_restart(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        names = [f"p-{i:02d}" for i in range(PODS)]
        created = time.monotonic()
        create_pods(control_plane, node, names)

        # Kill as soon as the first pod reports Running, not after a delay a fast host outruns.
        def first_running() -> dict[str, str] | None:
            got = phases(pods_in(control_plane, node.namespace))
            return got if "Running" in got.values() else None

        await until("the first pod Running", first_running, within=60, every=0.01)
        node.kill()
        killed_after = time.monotonic() - created
        at_kill = phases(pods_in(control_plane, node.namespace))
        running_at_kill = sorted(n for n, p in at_kill.items() if p == "Running")
        assert len(running_at_kill) < PODS, "all pods ran before the kill: nothing tested"
        before = await runtime_view(containerd.endpoint, node.namespace)

        node.start()
        restarted = time.monotonic()
        await all_running(control_plane, node, names)
        recovered_after = time.monotonic() - restarted
        await asyncio.sleep(3)  # a few PLEG relists and syncs: a duplicate would show up now

        pods = {p["metadata"]["uid"]: p for p in pods_in(control_plane, node.namespace)}
        view = await runtime_view(containerd.endpoint, node.namespace)
        running, ready = by_uid(view)
        started = await ever_started(containerd.endpoint, view.containers)
        log = node.log_text()
        print(
            f"killed {killed_after:.2f}s after creating {PODS} pods with {running_at_kill} "
            f"Running in the API and {len(by_uid(before)[0])} containers running in "
            f"containerd; all Running {recovered_after:.2f}s after the restart; runtime now: "
            f"{len(view.sandboxes)} sandboxes, {len(view.containers)} containers"
        )

    assert len(pods) == PODS
    for uid, pod in pods.items():
        name = pod["metadata"]["name"]
        assert len(running.get(uid, [])) == 1, (name, view.containers)
        assert started[uid] == running[uid], (name, view.containers)  # ran once: this one
        assert len(ready.get(uid, [])) == 1, (name, view.sandboxes)
        [status] = pod["status"]["containerStatuses"]
        assert status["containerID"] == f"containerd://{running[uid][0]}", name
        assert status["state"].get("running"), (name, status)
    labelled = {c.labels.get(POD_UID) for c in view.containers}
    labelled |= {s.labels.get(POD_UID) for s in view.sandboxes}
    assert labelled <= pods.keys(), f"orphans: {labelled - pods.keys()}"
    assert "Traceback" not in log, log[-4000:]


async def test_containerd_restart_turns_the_node_not_ready_then_ready_and_leaves_pods_alone(
    control_plane: ControlPlane, images: dict[str, BuiltImage], tmp_path: Path
) -> None:
    with private_containerd(images, log_path=tmp_path / "containerd.log") as runtime:
        async with agent_node(control_plane, tmp_path, runtime.endpoint) as node:
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            names = ["a", "b", "c"]
            create_pods(control_plane, node, names)
            await all_running(control_plane, node, names)
            pods_before = {p["metadata"]["name"]: p for p in pods_in(control_plane, node.namespace)}
            before = await runtime_view(runtime.endpoint, node.namespace)

            runtime.stop()
            stopped = time.monotonic()
            not_ready = await wait_ready(control_plane, node, status="False", within=60)
            not_ready_after = time.monotonic() - stopped

            runtime.start()
            started = time.monotonic()
            ready = await wait_ready(control_plane, node, status="True", within=60)
            ready_after = time.monotonic() - started
            await asyncio.sleep(12)  # past the pod workers' 10s error back-off and resyncs

            after = await runtime_view(runtime.endpoint, node.namespace)
            pods_after = {p["metadata"]["name"]: p for p in pods_in(control_plane, node.namespace)}
            still_ready = ready_condition(control_plane, node.name)
            print(
                f"Ready=False {not_ready_after:.1f}s after containerd stopped; Ready=True "
                f"{ready_after:.1f}s after it started again"
            )

    assert not_ready["reason"] == "KubeletNotReady"
    assert not_ready["message"] == RUNTIME_DOWN
    assert ready["reason"] == "KubeletReady"
    assert still_ready["status"] == "True"
    assert {s.id for s in after.sandboxes} == {s.id for s in before.sandboxes}
    assert {c.id for c in after.containers} == {c.id for c in before.containers}
    assert all(c.state == cri.CONTAINER_RUNNING for c in after.containers), after.containers
    assert all(s.state == cri.SANDBOX_READY for s in after.sandboxes), after.sandboxes
    for name in names:
        status = pods_after[name]["status"]
        assert status["phase"] == "Running", name
        [app] = status["containerStatuses"]
        assert app["restartCount"] == 0, (name, app)
        assert (
            app["containerID"] == pods_before[name]["status"]["containerStatuses"][0]["containerID"]
        )
        assert status["podIP"] == pods_before[name]["status"]["podIP"]

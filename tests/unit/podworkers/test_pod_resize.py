"""In-place resize through the pods stack: a changed spec reaches the running container over
CRI ``UpdateContainerResources`` with the values it would be created with, the status reports
``allocatedResources``/``resources`` and the resize conditions, the Events are the kubelet's;
a resize the node cannot take stays pending and changes nothing that runs."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import pytest
from pod_stack import NODE, Stack, make_runtime, running_stack, until

from nodeagent.apiserver import NODES, PODS
from nodeagent.events import ObjectReference
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime


@dataclass
class Events:
    seen: list[tuple[str, str, str, str]] = field(default_factory=list)

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.seen.append((ref.name, type, reason, message))

    def reasons(self) -> list[str]:
        return [reason for _, _, reason, _ in self.seen]


def seed_node(server: FakeApiServer) -> None:
    server.seed(
        NODES,
        {
            "metadata": {"name": NODE},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        },
    )


def seed_web(server: FakeApiServer, **extra: Any) -> None:
    app = container(
        "app",
        command=["sleep", "3600"],
        requests={"cpu": "100m", "memory": "64Mi"},
        limits={"cpu": "200m", "memory": "128Mi"},
        **extra,
    )
    body = pod_object("web", node=NODE, containers=[app])
    body["metadata"]["generation"] = 1
    del body["metadata"]["uid"]
    server.seed(PODS, body)


async def resize(stack: Stack, resources: dict[str, Any]) -> None:
    """What ``kubectl patch --subresource resize`` leaves in the API: the spec's resources
    changed and the generation bumped."""
    pod = copy.deepcopy(stack.pod("web"))
    assert pod is not None
    pod["spec"]["containers"][0]["resources"] = resources
    pod["metadata"]["generation"] = pod["metadata"].get("generation", 1) + 1
    await stack.server.replace(PODS, "web", pod, namespace="default")


def app_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    return ((pod or {}).get("status") or {}).get("containerStatuses", [{}])[0]


def resize_condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None


async def test_a_resize_updates_the_running_container_and_is_reported() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        await until(lambda: stack.running("app"))
        pod = await until(
            lambda: app_status(stack.pod("web")).get("resources") and stack.pod("web")
        )
        first = app_status(pod)
        assert first["allocatedResources"] == {"cpu": "100m", "memory": "64Mi"}
        assert first["resources"] == {
            "requests": {"cpu": "100m", "memory": "64Mi"},
            "limits": {"cpu": "200m", "memory": "128Mi"},
        }
        container_id = first["containerID"]

        await resize(
            stack,
            {
                "requests": {"cpu": "300m", "memory": "64Mi"},
                "limits": {"cpu": "400m", "memory": "256Mi"},
            },
        )
        pod = await until(
            lambda: (
                app_status(stack.pod("web")).get("resources", {}).get("limits")
                == {"cpu": "400m", "memory": "256Mi"}
                and resize_condition(stack.pod("web"), "PodResizeInProgress") is None
                and stack.pod("web")
            )
        )
    assert len(runtime.updates) == 1
    updated_id, linux = runtime.updates[0]
    assert f"containerd://{updated_id}" == container_id  # the same container, not restarted
    assert (linux.cpu_shares, linux.cpu_quota, linux.cpu_period) == (307, 40_000, 100_000)
    assert linux.memory_limit_in_bytes == 256 * 2**20
    app = app_status(pod)
    assert app["restartCount"] == 0
    assert app["allocatedResources"] == {"cpu": "300m", "memory": "64Mi"}
    assert resize_condition(pod, "PodResizePending") is None
    assert events.reasons().count("ResizeStarted") == 1
    assert events.reasons().count("ResizeCompleted") == 1
    started = next(m for _, _, r, m in events.seen if r == "ResizeStarted")
    assert started.startswith('Pod resize started: {"containers":[{"name":"app","resources":')
    assert started.endswith('"generation":2}')


async def test_a_resize_beyond_allocatable_stays_pending_and_changes_nothing() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        await until(lambda: stack.running("app"))
        await resize(
            stack,
            {"requests": {"cpu": "3", "memory": "64Mi"}, "limits": {"cpu": "3", "memory": "128Mi"}},
        )
        pod = await until(
            lambda: resize_condition(stack.pod("web"), "PodResizePending") and stack.pod("web")
        )
    pending = resize_condition(pod, "PodResizePending")
    assert pending is not None
    assert pending["status"] == "True"
    assert pending["reason"] == "Infeasible"
    assert pending["message"] == (
        "Node didn't have enough capacity: cpu, requested: 3000, capacity: 2000"
    )
    assert pending["observedGeneration"] == 2
    assert runtime.updates == []
    assert app_status(pod)["allocatedResources"] == {"cpu": "100m", "memory": "64Mi"}
    assert events.reasons().count("ResizeInfeasible") == 1
    message = next(m for _, _, r, m in events.seen if r == "ResizeInfeasible")
    assert message.startswith("Pod resize Infeasible: ")
    assert '"error":"Node didn\'t have enough capacity: cpu' in message


async def test_a_runtime_refusal_is_a_resize_error_and_retried() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        await until(lambda: stack.running("app"))
        runtime.update_error = "cannot set memory limit: device or resource busy"
        await resize(
            stack,
            {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "200m", "memory": "96Mi"},
            },
        )
        failed = await until(
            lambda: (
                (c := resize_condition(stack.pod("web"), "PodResizeInProgress"))
                and c.get("reason") == "Error"
                and c
            )
        )
        assert failed["message"] == (
            "rpc error: code = Unknown desc = cannot set memory limit: device or resource busy"
        )
        assert "ResizeError" in events.reasons()
        runtime.update_error = None
        pod = await until(
            lambda: (
                resize_condition(stack.pod("web"), "PodResizeInProgress") is None
                and stack.pod("web")
            ),
            within=600,
        )
    assert app_status(pod)["resources"]["limits"] == {"cpu": "200m", "memory": "96Mi"}
    assert runtime.updates[-1][1].memory_limit_in_bytes == 96 * 2**20


async def test_restart_container_policy_restarts_it_with_the_new_limits() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server, resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}])
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        first = (await until(lambda: stack.running("app")))[0]

        async def restarted() -> list[Any]:
            return [c for c in await stack.running("app") if c.id != first.id]

        await resize(
            stack,
            {
                "requests": {"cpu": "100m", "memory": "64Mi"},
                "limits": {"cpu": "200m", "memory": "256Mi"},
            },
        )
        new = (await until(restarted))[0]
        pod = await until(
            lambda: (
                resize_condition(stack.pod("web"), "PodResizeInProgress") is None
                and app_status(stack.pod("web")).get("restartCount") == 1
                and stack.pod("web")
            )
        )
    assert runtime.updates == []
    assert new.resources.linux.memory_limit_in_bytes == 256 * 2**20
    assert app_status(pod)["resources"]["limits"]["memory"] == "256Mi"
    killing = [m for _, _, r, m in events.seen if r == "Killing"]
    assert killing == ["Container app resize requires restart"]


async def test_a_deferred_resize_is_accepted_once_another_pod_leaves() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server)
    other = container("app", command=["sleep", "3600"], requests={"cpu": "1500m"})
    body = pod_object("other", node=NODE, containers=[other])
    del body["metadata"]["uid"]
    server.seed(PODS, body)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        await until(lambda: stack.running("app"))
        await until(lambda: len(runtime.sandbox_ids) == 2)
        await resize(
            stack,
            {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
        )
        pending = await until(lambda: resize_condition(stack.pod("web"), "PodResizePending"))
        assert pending["reason"] == "Deferred"
        assert pending["message"] == (
            "Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
        )
        assert runtime.updates == []
        stack.server.remove(PODS, "other", "default")
        pod = await until(
            lambda: (
                resize_condition(stack.pod("web"), "PodResizePending") is None
                and resize_condition(stack.pod("web"), "PodResizeInProgress") is None
                and stack.pod("web")
            ),
            within=120,
        )
    assert app_status(pod)["resources"]["limits"] == {"cpu": "1", "memory": "128Mi"}
    assert [r for r in events.reasons() if r.startswith("Resize")] == [
        "ResizeDeferred",
        "ResizeStarted",
        "ResizeCompleted",
    ]


def seed_meshed(server: FakeApiServer) -> None:
    """web with a sidecar ``proxy`` whose memory resize restarts it, and ``app``."""
    proxy = container(
        "proxy",
        command=["sleep", "3600"],
        restartPolicy="Always",
        requests={"cpu": "50m", "memory": "32Mi"},
        limits={"cpu": "100m", "memory": "64Mi"},
        resizePolicy=[{"resourceName": "memory", "restartPolicy": "RestartContainer"}],
    )
    app = container(
        "app",
        command=["sleep", "3600"],
        requests={"cpu": "100m", "memory": "64Mi"},
        limits={"cpu": "200m", "memory": "128Mi"},
    )
    body = pod_object("web", node=NODE, containers=[app], init_containers=[proxy])
    body["metadata"]["generation"] = 1
    del body["metadata"]["uid"]
    server.seed(PODS, body)


def sidecar_status(pod: dict[str, Any] | None) -> dict[str, Any]:
    return ((pod or {}).get("status") or {}).get("initContainerStatuses", [{}])[0]


async def test_restart_container_policy_on_a_sidecar_restarts_it_and_keeps_the_app() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_meshed(server)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        app = (await until(lambda: stack.running("app")))[0]
        proxy = (await stack.running("proxy"))[0]

        async def restarted() -> list[Any]:
            return [c for c in await stack.running("proxy") if c.id != proxy.id]

        pod = copy.deepcopy(stack.pod("web"))
        assert pod is not None
        pod["spec"]["initContainers"][0]["resources"] = {
            "requests": {"cpu": "50m", "memory": "32Mi"},
            "limits": {"cpu": "100m", "memory": "96Mi"},
        }
        pod["metadata"]["generation"] = 2
        await stack.server.replace(PODS, "web", pod, namespace="default")
        new = (await until(restarted))[0]
        pod = await until(
            lambda: (
                resize_condition(stack.pod("web"), "PodResizeInProgress") is None
                and sidecar_status(stack.pod("web")).get("restartCount") == 1
                and sidecar_status(stack.pod("web")).get("resources", {}).get("limits")
                == {"cpu": "100m", "memory": "96Mi"}
                and stack.pod("web")
            )
        )
        assert [c.id for c in await stack.running("app")] == [app.id]
    assert runtime.updates == []
    assert new.resources.linux.memory_limit_in_bytes == 96 * 2**20
    assert sidecar_status(pod)["allocatedResources"] == {"cpu": "50m", "memory": "32Mi"}
    assert app_status(pod)["restartCount"] == 0
    assert resize_condition(pod, "PodResizePending") is None
    killing = [m for _, _, r, m in events.seen if r == "Killing"]
    assert killing == ["Container proxy resize requires restart"]
    assert [r for r in events.reasons() if r.startswith("Resize")] == [
        "ResizeStarted",
        "ResizeCompleted",
    ]


async def test_a_deferred_resize_is_accepted_once_another_pod_leaves_the_api() -> None:
    """Resize admission counts what admission counts: a pod force-deleted while its worker
    still waits for its sandbox holds nothing any more (the kubelet's GetActivePods)."""
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Events()
    seed_node(server)
    seed_web(server)
    async with running_stack(server, runtime, events=events, allocation=True) as stack:
        await until(lambda: stack.running("app"))
        runtime.latency["RunPodSandbox"] = 600.0  # the next sandbox waits on a loaded CNI
        other = container("app", command=["sleep", "3600"], requests={"cpu": "1500m"})
        body = pod_object("other", node=NODE, containers=[other])
        del body["metadata"]["uid"]
        server.seed(PODS, body)
        await until(lambda: runtime.calls.count("RunPodSandbox") == 2)
        await resize(
            stack,
            {"requests": {"cpu": "1", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "128Mi"}},
        )
        pending = await until(lambda: resize_condition(stack.pod("web"), "PodResizePending"))
        assert pending["reason"] == "Deferred"
        stack.server.remove(PODS, "other", "default")  # gone; its worker still waits
        await until(
            lambda: resize_condition(stack.pod("web"), "PodResizePending") is None,
            within=120,
        )
    assert "ResizeStarted" in events.reasons()

"""Ephemeral containers through the whole pods stack over the fakes: one added through the API
(the ``ephemeralcontainers`` subresource updates the pod; the watch brings it) runs once in its
target's PID namespace, is reported in ``ephemeralContainerStatuses``, never restarts, and stops
with its pod."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pod_stack import NODE, make_runtime, running_stack, until

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.apiserver import PODS
from nodeagent.events import ObjectReference
from nodeagent.kuberuntime import types as cri
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container, pod_object

pytestmark = pytest.mark.looptime


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.events.append((ref.field_path, reason, message))


def seed(server: FakeApiServer, **kw: Any) -> str:
    body = pod_object("web", node=NODE, **kw)
    del body["metadata"]["uid"]
    return str(server.seed(PODS, body)["metadata"]["uid"])


def stored(server: FakeApiServer) -> dict[str, Any]:
    return server.stored(PODS, "web", "default") or {}


def ephemeral_status(server: FakeApiServer, name: str = "dbg") -> dict[str, Any]:
    statuses = stored(server).get("status", {}).get("ephemeralContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


def add_ephemeral(server: FakeApiServer, **extra: Any) -> None:
    extra.setdefault("command", ["sh", "-c", "ps"])
    body = container("dbg", **extra)

    def mutate(obj: dict[str, Any]) -> None:
        obj["spec"].setdefault("ephemeralContainers", []).append(body)

    server.modify(PODS, "web", mutate, "default")


async def configs(runtime: Any, name: str) -> list[cri.ContainerStatus]:
    out = []
    for listed in await runtime.list_containers():
        if listed.metadata.name == name:
            out.append((await runtime.container_status(listed.id)).status)
    return out


async def test_a_debug_container_runs_once_in_its_targets_pid_namespace() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Recorded()
    async with running_stack(server, runtime, events=events):
        seed(server)
        await until(lambda: stored(server).get("status", {}).get("phase") == "Running")
        [app] = await configs(runtime, "app")
        add_ephemeral(server, targetContainerName="app", stdin=True, tty=True)

        await until(lambda: "running" in ephemeral_status(server).get("state", {}))
        [ctr] = await configs(runtime, "dbg")
        status = ephemeral_status(server)
        assert status["containerID"] == f"containerd://{ctr.id}"
        assert (status["ready"], status["restartCount"], "started" in status) == (False, 0, False)
        created = runtime._containers[ctr.id].config  # what CreateContainer was given
        options = created.linux.security_context.namespace_options
        assert (options.pid, options.target_id) == (api.TARGET, app.id)
        assert (created.stdin, created.tty) == (True, True)
        assert ("spec.ephemeralContainers{dbg}", "Started", "Container started") in events.events

        runtime.exit_container(ctr.id, exit_code=1, reason="Error")
        await until(lambda: "terminated" in ephemeral_status(server).get("state", {}))
        await asyncio.sleep(120)  # relists, resyncs: an ephemeral container never restarts
        assert len(await configs(runtime, "dbg")) == 1
        assert ephemeral_status(server)["state"]["terminated"]["exitCode"] == 1
        assert stored(server)["status"]["phase"] == "Running"


async def test_a_missing_target_keeps_the_container_waiting_with_the_kubelets_error() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    events = Recorded()
    async with running_stack(server, runtime, events=events):
        seed(server)
        await until(lambda: stored(server).get("status", {}).get("phase") == "Running")
        add_ephemeral(server, targetContainerName="nope")
        waiting = await until(lambda: ephemeral_status(server).get("state", {}).get("waiting"))
        assert waiting == {
            "reason": "CreateContainerConfigError",
            "message": "unable to find target container nope",
        }
        assert (
            "spec.ephemeralContainers{dbg}",
            "Failed",
            "Error: unable to find target container nope",
        ) in events.events
        assert await configs(runtime, "dbg") == []


async def test_a_forbidden_field_is_refused_visibly_never_ignored() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    async with running_stack(server, runtime):
        seed(server)
        await until(lambda: stored(server).get("status", {}).get("phase") == "Running")
        add_ephemeral(server, readinessProbe={"exec": {"command": ["true"]}})
        waiting = await until(lambda: ephemeral_status(server).get("state", {}).get("waiting"))
        assert waiting["reason"] == "CreateContainerConfigError"
        assert waiting["message"] == (
            "spec.ephemeralContainers[0].readinessProbe: Forbidden: cannot be set for an "
            "Ephemeral Container"
        )
        assert await configs(runtime, "dbg") == []


async def test_a_debug_container_stops_with_its_pod() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    async with running_stack(server, runtime):
        seed(server, grace=5)
        await until(lambda: stored(server).get("status", {}).get("phase") == "Running")
        add_ephemeral(server, command=["sleep", "3600"])
        await until(lambda: "running" in ephemeral_status(server).get("state", {}))
        [dbg] = await configs(runtime, "dbg")

        def delete(obj: dict[str, Any]) -> None:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:10:00Z"
            obj["metadata"]["deletionGracePeriodSeconds"] = 5

        server.modify(PODS, "web", delete, "default")
        await until(lambda: not stored(server))  # killed, final status, DELETE
        assert runtime.grace_periods.get(dbg.id) == 5  # StopContainer, the pod's grace
        assert not [c for c in await runtime.list_containers() if c.state == cri.CONTAINER_RUNNING]

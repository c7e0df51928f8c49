"""Probes through the whole pods stack over the fakes, in virtual time: what the API status
shows (``ready``, ``started``, the Ready conditions) and what happens to a container whose
liveness probe fails (killed with the probe's grace, restarted, then backed off)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from pod_stack import NODE, make_runtime, running_stack, until

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


def app_status(server: FakeApiServer) -> dict[str, Any]:
    pod = server.stored(PODS, "web", "default") or {}
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == "app"), {})


def conditions(server: FakeApiServer) -> dict[str, str]:
    pod = server.stored(PODS, "web", "default") or {}
    return {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions") or []}


def exit_code_of(codes: dict[str, int]) -> Any:
    def handler(container_id: str, cmd: Sequence[str]) -> cri.ExecSyncResponse:
        return cri.ExecSyncResponse(stdout=b"said so\n", exit_code=codes.get(cmd[0], 0))

    return handler


async def test_readiness_drives_the_ready_flag_and_the_pods_ready_conditions() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    codes = {"check": 1}
    runtime.exec_handler = exit_code_of(codes)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 2, "failureThreshold": 1}
    async with running_stack(server, runtime):
        seed(server, containers=[container("app", command=["sleep", "1"], readinessProbe=probe)])
        await until(lambda: "running" in app_status(server).get("state", {}))
        await until(lambda: conditions(server).get("Ready") == "False", within=5)
        app = app_status(server)
        assert (app["started"], app["ready"]) == (True, False)
        assert conditions(server)["ContainersReady"] == "False"
        codes["check"] = 0
        await until(lambda: app_status(server).get("ready") is True, within=5)
        assert conditions(server)["Ready"] == "True"
        # the reason and message of the False condition go with it, not merged into the True
        for kind in ("Ready", "ContainersReady"):
            assert "reason" not in condition(server, kind), condition(server, kind)
            assert "message" not in condition(server, kind), condition(server, kind)
        codes["check"] = 1
        await until(lambda: conditions(server).get("Ready") == "False", within=5)


async def test_failed_liveness_kills_with_the_probe_grace_restarts_then_backs_off() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    runtime.exec_handler = exit_code_of({"alive": 1})
    events = Recorded()
    probe = {
        "exec": {"command": ["alive"]},
        "periodSeconds": 1,
        "failureThreshold": 2,
        "terminationGracePeriodSeconds": 4,
    }
    async with running_stack(server, runtime, events=events) as stack:
        seed(
            server,
            containers=[container("app", command=["sleep", "1"], livenessProbe=probe)],
            grace=30,
        )
        await until(lambda: app_status(server).get("restartCount") == 1, within=30)
        first = (await stack.containers("app"))[0]
        assert runtime.grace_periods[first.id] == 4
        assert (
            "spec.containers{app}",
            "Killing",
            "Container app failed liveness probe, will be restarted",
        ) in events.events
        assert (
            "spec.containers{app}",
            "Unhealthy",
            "Liveness probe failed: said so\n",
        ) in events.events
        # as the kubelet's doBackOff: the second restart is immediate too (the back-off starts
        # then), the third waits it out
        await until(
            lambda: (
                app_status(server).get("state", {}).get("waiting", {}).get("reason")
                == "CrashLoopBackOff"
            ),
            within=30,
        )
        assert app_status(server)["restartCount"] == 2
        await until(lambda: app_status(server).get("restartCount") == 3, within=15)


def init_status(server: FakeApiServer, name: str) -> dict[str, Any]:
    pod = server.stored(PODS, "web", "default") or {}
    statuses = pod.get("status", {}).get("initContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


def condition(server: FakeApiServer, kind: str) -> dict[str, Any]:
    pod = server.stored(PODS, "web", "default") or {}
    found = [c for c in pod.get("status", {}).get("conditions") or [] if c["type"] == kind]
    return found[0] if found else {}


def counting(codes: dict[str, int], calls: list[str]) -> Any:
    def handler(container_id: str, cmd: Sequence[str]) -> cri.ExecSyncResponse:
        calls.append(cmd[0])
        return cri.ExecSyncResponse(stdout=b"said so\n", exit_code=codes.get(cmd[0], 0))

    return handler


async def test_a_sidecars_startup_probe_holds_the_app_back_until_it_succeeds() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    codes, calls = {"started": 1}, []
    runtime.exec_handler = counting(codes, calls)
    probe = {"exec": {"command": ["started"]}, "periodSeconds": 1, "failureThreshold": 100}
    sidecar = container("proxy", command=["sleep", "1"], restartPolicy="Always", startupProbe=probe)
    async with running_stack(server, runtime):
        seed(
            server,
            init_containers=[sidecar],
            containers=[container("app", command=["sleep", "1"])],
        )
        await until(lambda: "running" in init_status(server, "proxy").get("state", {}))
        await until(lambda: calls.count("started") >= 5, within=10)
        proxy = init_status(server, "proxy")
        assert (proxy["started"], proxy["ready"]) == (False, False)
        assert "waiting" in app_status(server)["state"]
        assert condition(server, "Initialized")["status"] == "False"
        codes["started"] = 0
        await until(lambda: "running" in app_status(server).get("state", {}), within=5)
        proxy = init_status(server, "proxy")
        assert (proxy["started"], proxy["ready"]) == (True, True)
        await until(lambda: condition(server, "Ready").get("status") == "True", within=5)


async def test_a_sidecars_readiness_drives_its_ready_flag_and_the_pods_ready() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    codes = {"check": 1}
    runtime.exec_handler = exit_code_of(codes)
    probe = {"exec": {"command": ["check"]}, "periodSeconds": 2, "failureThreshold": 1}
    sidecar = container(
        "proxy", command=["sleep", "1"], restartPolicy="Always", readinessProbe=probe
    )
    async with running_stack(server, runtime):
        seed(
            server,
            init_containers=[sidecar],
            containers=[container("app", command=["sleep", "1"])],
        )
        await until(lambda: "running" in app_status(server).get("state", {}))
        await until(lambda: condition(server, "Ready").get("status") == "False", within=5)
        proxy = init_status(server, "proxy")
        assert (proxy["started"], proxy["ready"]) == (True, False)
        assert app_status(server)["ready"] is True
        ready = condition(server, "Ready")
        assert ready["reason"] == "ContainersNotReady"
        assert ready["message"] == "containers with unready status: [proxy]"
        assert condition(server, "ContainersReady")["status"] == "False"
        codes["check"] = 0
        await until(lambda: condition(server, "Ready").get("status") == "True", within=5)
        assert init_status(server, "proxy")["ready"] is True


async def test_a_sidecars_failed_liveness_restarts_it_and_leaves_the_app_running() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    runtime.exec_handler = exit_code_of({"alive": 1})
    events = Recorded()
    probe = {"exec": {"command": ["alive"]}, "periodSeconds": 1, "failureThreshold": 2}
    sidecar = container(
        "proxy", command=["sleep", "1"], restartPolicy="Always", livenessProbe=probe
    )
    async with running_stack(server, runtime, events=events) as stack:
        seed(
            server,
            init_containers=[sidecar],
            containers=[container("app", command=["sleep", "1"])],
        )
        await until(lambda: init_status(server, "proxy").get("restartCount") == 1, within=30)
        assert (
            "spec.initContainers{proxy}",
            "Killing",
            "Init container proxy failed liveness probe",
        ) in events.events
        assert (
            "spec.initContainers{proxy}",
            "Unhealthy",
            "Liveness probe failed: said so\n",
        ) in events.events
        assert len(await stack.running("app")) == 1
        assert app_status(server)["restartCount"] == 0


async def test_a_terminating_pod_goes_unready_while_its_container_shuts_down() -> None:
    """As the kubelet's: a deleted pod's readiness probe still runs while its containers get
    their grace period, and its failure reaches the API at once (the pod's worker is busy
    killing); its liveness probe is stopped, so its failure during shutdown does not count."""
    server = FakeApiServer()
    runtime = make_runtime(server)
    runtime.stop_seconds = 20  # a SIGTERM handler that drops both files, then sleeps 20 s

    def probe(container_id: str, cmd: Sequence[str]) -> cri.ExecSyncResponse:
        stopping = container_id in runtime.grace_periods
        return cri.ExecSyncResponse(stdout=b"no such file\n", exit_code=1 if stopping else 0)

    runtime.exec_handler = probe
    events = Recorded()
    ready = {"exec": {"command": ["ready"]}, "periodSeconds": 2, "failureThreshold": 1}
    alive = {"exec": {"command": ["alive"]}, "periodSeconds": 1, "failureThreshold": 1}
    async with running_stack(server, runtime, events=events) as stack:
        seed(
            server,
            containers=[
                container("app", command=["sleep", "1"], readinessProbe=ready, livenessProbe=alive)
            ],
            grace=30,
        )
        await until(lambda: conditions(server).get("Ready") == "True", within=10)
        [app] = await stack.containers("app")

        def delete(obj: dict[str, Any]) -> None:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:05Z"
            obj["metadata"]["deletionGracePeriodSeconds"] = 30

        server.modify(PODS, "web", delete, "default")
        await until(lambda: app.id in runtime.grace_periods, within=5)
        stopping = asyncio.get_running_loop().time()
        await until(lambda: conditions(server).get("Ready") == "False", within=5)

        assert asyncio.get_running_loop().time() - stopping < 5  # not at the end of the 20 s
        assert "running" in app_status(server)["state"]
        assert app_status(server)["ready"] is False
        assert conditions(server)["ContainersReady"] == "False"
        assert condition(server, "Ready")["reason"] == "ContainersNotReady"
        assert condition(server, "Ready")["message"] == "containers with unready status: [app]"
        assert (
            "spec.containers{app}",
            "Unhealthy",
            "Readiness probe failed: no such file\n",
        ) in events.events
        await until(lambda: server.stored(PODS, "web", "default") is None, within=40)
        assert app_status(server) == {}
        liveness = [e for e in events.events if "Liveness" in e[2] or "liveness" in e[2]]
        assert liveness == []
        assert runtime.grace_periods == {app.id: 30}  # killed once, by the deletion

"""The prober manager's workers in virtual time (looptime): thresholds, initial delay,
startup gating, reset on a new container, what the status and the sync read, Events, metrics.

The pod's "generated status" is a dict the test owns; as the pod sync would, a result change
(``on_update``) regenerates ``started``/``ready`` through ``ProberManager.apply``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from prometheus_client import REGISTRY

from nodeagent.events import ObjectReference
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.actions import KillContainer, compute_pod_actions
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.podspec import Pod
from nodeagent.prober import ProbeIO, ProberManager
from nodeagent.testing.pods import container, pod

pytestmark = pytest.mark.looptime
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class LoopClock:
    """Wall time that follows the (virtual) loop time."""

    def now(self) -> dt.datetime:
        return EPOCH + dt.timedelta(seconds=asyncio.get_running_loop().time())

    def monotonic(self) -> float:
        return asyncio.get_running_loop().time()


class ScriptedExec:
    """``exit_codes[command[0]]`` is the exit code of each exec; every call is recorded."""

    def __init__(self) -> None:
        self.exit_codes: dict[str, int] = {}
        self.calls: list[tuple[float, str, str]] = []

    async def exec_sync(
        self, container_id: str, cmd: Sequence[str], timeout_seconds: int
    ) -> cri.ExecSyncResponse:
        self.calls.append((asyncio.get_running_loop().time(), container_id, cmd[0]))
        code = self.exit_codes.get(cmd[0], 0)
        return cri.ExecSyncResponse(stdout=f"{cmd[0]} said {code}".encode(), exit_code=code)

    def times(self, command: str) -> list[float]:
        return [t for t, _, c in self.calls if c == command]


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str, str]] = []

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.recorded.append((ref.field_path, type, reason, message))


class Harness:
    def __init__(self, spec: Pod) -> None:
        self.pod = spec
        self.runtime = ScriptedExec()
        self.events = Events()
        self.status: dict[str, Any] = {"phase": "Pending", "podIP": "10.0.0.5"}
        self.updates = 0
        self.statuses_key = "containerStatuses"
        """Which statuses the prober is fed: ``initContainerStatuses`` for sidecars."""
        self.prober = ProberManager(
            io=ProbeIO(runtime=self.runtime, user_agent="kube-probe/1.36"),
            pod_status=lambda uid: self.status if uid == self.pod.uid else None,
            clock=LoopClock(),
            on_update=self.on_update,
            events=self.events,
            rng=random.Random(7),
        )

    def on_update(self, uid: str) -> None:
        self.updates += 1
        self.regenerate()

    def regenerate(self) -> None:
        self.prober.apply(self.pod, self.status.get(self.statuses_key) or [])

    def run_container(self, container_id: str, name: str = "app") -> None:
        """The runtime started ``container_id`` now (the generated status says so)."""
        stamp = LoopClock().now().strftime("%Y-%m-%dT%H:%M:%SZ")
        statuses = [s for s in self.status.get("containerStatuses") or [] if s["name"] != name]
        statuses.append(
            {
                "name": name,
                "containerID": f"containerd://{container_id}",
                "state": {"running": {"startedAt": stamp}},
                "ready": True,
                "started": True,
            }
        )
        self.status["phase"] = "Running"
        self.status["containerStatuses"] = statuses
        self.regenerate()

    def app(self, name: str = "app") -> dict[str, Any]:
        return next(s for s in self.status["containerStatuses"] if s["name"] == name)


@contextlib.asynccontextmanager
async def started(h: Harness, *, agent_age: float = 100.0) -> AsyncIterator[None]:
    """The prober running for ``agent_age`` seconds, then the pod added (as its sync does)."""
    task = asyncio.create_task(h.prober.run())
    try:
        await asyncio.sleep(agent_age)
        h.prober.add_pod(h.pod)
        await asyncio.sleep(0)
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def probed(**probes: dict[str, Any]) -> Pod:
    return pod("web", containers=[container("app", **probes)])


def exec_probe(command: str, **fields: Any) -> dict[str, Any]:
    return {"exec": {"command": [command]}, **fields}


async def test_readiness_is_false_until_the_first_success_then_follows_the_thresholds() -> None:
    h = Harness(
        probed(
            readinessProbe=exec_probe(
                "check", periodSeconds=10, successThreshold=2, failureThreshold=3
            )
        )
    )
    async with started(h):
        h.runtime.exit_codes["check"] = 1
        h.run_container("c1")
        assert h.app()["ready"] is False  # no result yet: the readiness probe is triggered
        await asyncio.sleep(0.5)
        assert h.app()["ready"] is False
        h.runtime.exit_codes["check"] = 0
        await asyncio.sleep(10)
        assert h.app()["ready"] is False  # one success of two
        await asyncio.sleep(10)
        assert h.app()["ready"] is True
        h.runtime.exit_codes["check"] = 1
        await asyncio.sleep(20.5)
        assert h.app()["ready"] is True  # two failures of three
        await asyncio.sleep(10)
        assert h.app()["ready"] is False
        assert h.events.recorded[-1] == (
            "spec.containers{app}",
            "Warning",
            "Unhealthy",
            "Readiness probe failed: check said 1",
        )


async def test_probes_wait_for_the_initial_delay() -> None:
    h = Harness(probed(livenessProbe=exec_probe("alive", initialDelaySeconds=15, periodSeconds=5)))
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(40)
        times = h.runtime.times("alive")
        assert times and min(times) >= 15


async def test_startup_probe_gates_liveness_and_readiness() -> None:
    h = Harness(
        probed(
            startupProbe=exec_probe("started", periodSeconds=1, failureThreshold=100),
            livenessProbe=exec_probe("alive", periodSeconds=1),
            readinessProbe=exec_probe("ready", periodSeconds=1),
        )
    )
    h.runtime.exit_codes["started"] = 1
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(10)
        assert (h.app()["started"], h.app()["ready"]) == (False, False)
        assert h.runtime.times("alive") == [] and h.runtime.times("ready") == []
        h.runtime.exit_codes["started"] = 0
        await asyncio.sleep(3)
        assert h.app()["started"] is True
        await asyncio.sleep(3)
        assert h.app()["ready"] is True
        assert h.runtime.times("alive") and min(h.runtime.times("alive")) > 10
        stopped_startup = len(h.runtime.times("started"))
        await asyncio.sleep(5)
        assert len(h.runtime.times("started")) == stopped_startup  # not probed once started


async def test_liveness_failure_condemns_the_container_and_a_new_one_starts_afresh() -> None:
    h = Harness(probed(livenessProbe=exec_probe("alive", periodSeconds=2, failureThreshold=3)))
    async with started(h):
        h.run_container("c1")
        h.runtime.exit_codes["alive"] = 1
        await asyncio.sleep(3)
        assert h.prober.failed_probes(h.pod.uid) == {}  # two failures of three
        await asyncio.sleep(2)
        assert h.prober.failed_probes(h.pod.uid) == {"c1": "liveness"}
        calls = len(h.runtime.calls)
        await asyncio.sleep(10)
        assert len(h.runtime.calls) == calls  # on hold until the container is replaced
        h.run_container("c2")
        await asyncio.sleep(2.5)
        assert h.prober.failed_probes(h.pod.uid) == {}  # the new container starts healthy
        assert h.prober.liveness.get("c1") is None
        assert len(h.runtime.calls) > calls
        assert [c for _, c, _ in h.runtime.calls[calls:]] == ["c2"] * (len(h.runtime.calls) - calls)
        unhealthy = [e for e in h.events.recorded if e[2] == "Unhealthy"]
        assert unhealthy[0][3] == "Liveness probe failed: alive said 1"


async def test_startup_failure_past_the_threshold_condemns_the_container() -> None:
    h = Harness(probed(startupProbe=exec_probe("started", periodSeconds=1, failureThreshold=2)))
    h.runtime.exit_codes["started"] = 1
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(5)
        assert h.prober.failed_probes(h.pod.uid) == {"c1": "startup"}
        assert h.app()["started"] is False
        assert h.events.recorded[0][3] == "Startup probe failed: started said 1"


async def test_workers_stop_with_the_pod_and_their_results_go() -> None:
    h = Harness(
        probed(
            livenessProbe=exec_probe("alive", periodSeconds=1),
            readinessProbe=exec_probe("ready", periodSeconds=1),
        )
    )
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(3)
        assert sorted(t for _, _, t in h.prober.workers()) == ["Liveness", "Readiness"]
        h.prober.stop_liveness_and_startup(h.pod)
        await asyncio.sleep(2)
        assert [t for _, _, t in h.prober.workers()] == ["Readiness"]
        h.prober.remove_pod(h.pod.uid)
        await asyncio.sleep(2)
        assert h.prober.workers() == []
        assert h.prober.readiness.get("c1") is None
        calls = len(h.runtime.calls)
        await asyncio.sleep(5)
        assert len(h.runtime.calls) == calls


async def test_readiness_goes_on_probing_a_terminating_pod_and_says_what_it_found() -> None:
    h = Harness(
        probed(
            livenessProbe=exec_probe("alive", periodSeconds=1, failureThreshold=1),
            readinessProbe=exec_probe("ready", periodSeconds=1, failureThreshold=1),
        )
    )
    async with started(h):
        assert h.prober.readiness_results(h.pod.uid) == {}
        h.run_container("c1")
        await asyncio.sleep(1.5)
        assert h.prober.readiness_results(h.pod.uid) == {"c1": True}
        h.prober.stop_liveness_and_startup(h.pod)  # the pod is being killed
        h.runtime.exit_codes["ready"] = h.runtime.exit_codes["alive"] = 1
        await asyncio.sleep(2)
        assert h.prober.readiness_results(h.pod.uid) == {"c1": False}
        assert h.prober.failed_probes(h.pod.uid) == {}  # no liveness verdict any more
        assert {m for _, _, _, m in h.events.recorded} == {"Readiness probe failed: ready said 1"}
        assert h.prober.readiness_results("another-pod") == {}


async def test_a_terminal_pod_ends_its_workers() -> None:
    h = Harness(probed(readinessProbe=exec_probe("ready", periodSeconds=1)))
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(2)
        h.status["phase"] = "Succeeded"
        await asyncio.sleep(2)
        assert h.prober.workers() == []


async def test_first_probe_of_a_worker_started_with_the_agent_is_spread_over_a_period() -> None:
    h = Harness(probed(livenessProbe=exec_probe("alive", periodSeconds=10)))
    h.run_container("c1")
    began = asyncio.get_running_loop().time()
    async with started(h, agent_age=0):
        await asyncio.sleep(25)
        first = min(h.runtime.times("alive")) - began
        assert 0 < first < 10


async def test_each_probe_run_is_counted_in_prober_probe_total() -> None:
    h = Harness(probed(readinessProbe=exec_probe("ready", periodSeconds=1)))
    labels = {
        "probe_type": "Readiness",
        "result": "successful",
        "container": "app",
        "pod": "web",
        "namespace": "default",
        "pod_uid": h.pod.uid,
    }
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(3.5)
        count = REGISTRY.get_sample_value("prober_probe_total", labels)
        assert count is not None and count >= 3
        h.prober.remove_pod(h.pod.uid)
        await asyncio.sleep(1)
        assert REGISTRY.get_sample_value("prober_probe_total", labels) is None


def _runtime(record: ContainerRecord) -> PodRuntimeState:
    sandbox = SandboxRecord(id="sb0", ready=True, attempt=0, ip="10.0.0.5")
    return PodRuntimeState(uid="u", sandboxes=(sandbox,), containers=(record,))


@pytest.mark.parametrize(
    ("policy", "failed", "message", "start"),
    [
        ("Always", "liveness", "Container app failed liveness probe, will be restarted", ("app",)),
        ("OnFailure", "startup", "Container app failed startup probe, will be restarted", ("app",)),
        ("Never", "liveness", "Container app failed liveness probe", ()),
    ],
)
def test_a_condemned_container_is_killed_with_the_kubelets_message_and_the_probe_grace(
    policy: str, failed: str, message: str, start: tuple[str, ...]
) -> None:
    probe = {"exec": {"command": ["x"]}, "terminationGracePeriodSeconds": 3}
    spec = pod(
        containers=[container("app", livenessProbe=probe, startupProbe=probe)],
        restart_policy=policy,
    )
    record = ContainerRecord(id="c1", name="app", state=ContainerState.RUNNING)
    actions = compute_pod_actions(spec, _runtime(record), {"c1": failed})
    assert actions.containers_to_kill == (KillContainer("c1", "app", message, 3),)
    assert actions.containers_to_start == start
    assert actions.kill_pod is (not start)
    assert compute_pod_actions(spec, _runtime(record)).containers_to_kill == ()


async def test_the_pods_sync_is_woken_by_a_changed_result_only() -> None:
    h = Harness(probed(readinessProbe=exec_probe("ready", periodSeconds=1)))
    async with started(h):
        h.run_container("c1")
        await asyncio.sleep(5)
        # the initial Failure, then Success: two changes, however many runs
        assert h.updates == 2


async def test_a_sidecar_is_probed_from_its_init_container_status() -> None:
    probe = exec_probe("started", periodSeconds=1, failureThreshold=100)
    spec = pod(
        "web",
        init_containers=[
            container(
                "proxy",
                restartPolicy="Always",
                startupProbe=probe,
                readinessProbe=exec_probe("ready", periodSeconds=1),
            ),
            container("setup", command=["true"]),
        ],
        containers=[container("app")],
        restart_policy="Never",
    )
    h = Harness(spec)
    h.status["initContainerStatuses"] = [
        {
            "name": "proxy",
            "containerID": "containerd://s1",
            "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
            "ready": True,
            "started": True,
        }
    ]

    h.statuses_key = "initContainerStatuses"
    regenerate = h.regenerate
    h.runtime.exit_codes["started"] = 1
    async with started(h):
        regenerate()
        assert sorted(w[1:] for w in h.prober.workers()) == [
            ("proxy", "Readiness"),
            ("proxy", "Startup"),
        ]
        await asyncio.sleep(3)
        assert h.prober.startup_results(spec.uid) == {}  # no result yet: the next init waits
        proxy = h.status["initContainerStatuses"][0]
        assert (proxy["started"], proxy["ready"]) == (False, False)
        assert {cid for _, cid, _ in h.runtime.calls} == {"s1"}
        h.runtime.exit_codes["started"] = 0
        await asyncio.sleep(3)
        assert h.prober.startup_results(spec.uid) == {"s1": True}
        assert proxy["started"] is True
        await asyncio.sleep(2)
        assert proxy["ready"] is True
        # a sidecar that exited is restarted even under restartPolicy Never: still probed
        proxy["state"] = {"terminated": {"exitCode": 1}}
        await asyncio.sleep(2)
        assert len(h.prober.workers()) == 2

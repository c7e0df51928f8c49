"""``activeDeadlineSeconds`` and ``readinessGates`` over the pods stack (fake API server and
runtime, virtual time): the pod past its deadline is killed and Failed ``DeadlineExceeded``
with the kubelet's Event, a deadline lowered on a running pod takes effect at once (its
worker's own timer, not the resync), and a readiness gate's condition written by someone else
turns Ready promptly and is never overwritten by the agent."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pod_stack import NODE, Stack, running_stack, until

from nodeagent.apiserver import PODS, PatchType
from nodeagent.events import ObjectReference
from nodeagent.kuberuntime import types as cri
from nodeagent.pods import deadline
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import pod, pod_object

pytestmark = pytest.mark.looptime

MESSAGE = "Pod was active on the node longer than the specified deadline"
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


class Events:
    def __init__(self) -> None:
        self.pods: list[tuple[str, str, str, str]] = []

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.pods.append((ref.name, type, reason, message))


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
async def stack(
    server: FakeApiServer, runtime: FakeRuntime, events: Events
) -> AsyncIterator[Stack]:
    async with running_stack(server, runtime, events=events) as s:
        yield s


def seed(server: FakeApiServer, name: str = "web", **kw: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]
    return server.seed(PODS, body)


def status(stack: Stack, name: str = "web") -> dict[str, Any]:
    return dict((stack.pod(name) or {}).get("status") or {})


def condition(stack: Stack, kind: str, name: str = "web") -> dict[str, Any]:
    found = [c for c in status(stack, name).get("conditions") or [] if c.get("type") == kind]
    return found[0] if found else {}


# --- the pure decision -------------------------------------------------------------------


def test_seconds_left_counts_from_the_start_time() -> None:
    p = pod(activeDeadlineSeconds=30)
    assert deadline.seconds_left(p, "2026-01-01T00:00:00Z", T0 + dt.timedelta(seconds=12)) == 18
    assert not deadline.exceeded(p, "2026-01-01T00:00:00Z", T0 + dt.timedelta(seconds=29.9))
    assert deadline.exceeded(p, "2026-01-01T00:00:00Z", T0 + dt.timedelta(seconds=30))


def test_no_deadline_or_no_start_time_never_expires() -> None:
    later = T0 + dt.timedelta(days=1)
    assert deadline.seconds_left(pod(), "2026-01-01T00:00:00Z", later) is None
    assert deadline.seconds_left(pod(activeDeadlineSeconds=1), None, later) is None
    assert deadline.seconds_left(pod(activeDeadlineSeconds=1), "garbage", later) is None
    assert not deadline.exceeded(pod(activeDeadlineSeconds=1), None, later)


def test_start_time_prefers_the_agents_own_status() -> None:
    p = pod(activeDeadlineSeconds=1)
    p.status["startTime"] = "2026-01-01T00:00:05Z"
    assert deadline.start_time({"startTime": "2026-01-01T00:00:01Z"}, p) == "2026-01-01T00:00:01Z"
    assert deadline.start_time({}, p) == "2026-01-01T00:00:05Z"
    assert deadline.start_time(None, pod()) is None


# --- activeDeadlineSeconds ---------------------------------------------------------------


async def test_pod_past_its_deadline_is_killed_and_failed_with_the_event(
    stack: Stack, events: Events
) -> None:
    loop = asyncio.get_running_loop()
    stack.runtime.stop_exit_code = 0  # the killed container exits 0: the pod stays Failed
    seed(stack.server, activeDeadlineSeconds=30, grace=5)
    await until(lambda: status(stack).get("phase") == "Running")
    started = dt.datetime.fromisoformat(status(stack)["startTime"].replace("Z", "+00:00"))
    deadline_at = (started - T0).total_seconds() + 30
    await asyncio.sleep(deadline_at - loop.time() - 0.5)
    assert status(stack)["phase"] == "Running"
    assert await stack.running("app")

    await until(lambda: status(stack).get("phase") == "Failed", within=2, every=0.05)
    assert loop.time() - deadline_at < 1.0
    got = status(stack)
    assert (got["reason"], got["message"]) == ("DeadlineExceeded", MESSAGE)
    assert condition(stack, "Ready")["status"] == "False"
    await until(lambda: _none_running(stack), within=10)
    assert ("web", "Normal", "DeadlineExceeded", MESSAGE) in events.pods
    assert sum(e[2] == "DeadlineExceeded" for e in events.pods) == 1
    await asyncio.sleep(70)  # resyncs and the killed container's exit change nothing
    got = status(stack)
    assert (got["phase"], got["reason"]) == ("Failed", "DeadlineExceeded")


async def _none_running(stack: Stack) -> bool:
    return not [c for c in await stack.containers("app") if c.state == cri.CONTAINER_RUNNING]


async def test_a_deadline_lowered_on_a_running_pod_takes_effect_at_its_time(
    stack: Stack,
) -> None:
    loop = asyncio.get_running_loop()
    seed(stack.server)
    await until(lambda: status(stack).get("phase") == "Running")
    started = dt.datetime.fromisoformat(status(stack)["startTime"].replace("Z", "+00:00"))
    start = (started - T0).total_seconds()
    patch = {"spec": {"activeDeadlineSeconds": 3600}}
    await stack.server.patch(PODS, "web", patch, patch_type=PatchType.MERGE, namespace="default")
    await asyncio.sleep(start + 20 - loop.time())
    assert status(stack)["phase"] == "Running"

    # lowered to 45 s at 20 s: neither now nor at the next resync (60 s), but at 45 s
    patch = {"spec": {"activeDeadlineSeconds": 45}}
    await stack.server.patch(PODS, "web", patch, patch_type=PatchType.MERGE, namespace="default")
    await asyncio.sleep(start + 44.5 - loop.time())
    assert status(stack)["phase"] == "Running"
    await until(lambda: status(stack).get("phase") == "Failed", within=2, every=0.05)
    assert loop.time() - (start + 45) < 1.0
    assert status(stack)["reason"] == "DeadlineExceeded"


async def test_a_deadline_lowered_below_the_pods_age_kills_it_at_once(stack: Stack) -> None:
    loop = asyncio.get_running_loop()
    seed(stack.server)
    await until(lambda: status(stack).get("phase") == "Running")
    await asyncio.sleep(30)
    patched_at = loop.time()
    patch = {"spec": {"activeDeadlineSeconds": 5}}
    await stack.server.patch(PODS, "web", patch, patch_type=PatchType.MERGE, namespace="default")
    await until(lambda: status(stack).get("phase") == "Failed", within=2, every=0.05)
    assert loop.time() - patched_at < 1.0
    assert status(stack)["reason"] == "DeadlineExceeded"


async def test_a_pod_that_finished_in_time_is_not_failed_afterwards(
    stack: Stack, events: Events
) -> None:
    seed(stack.server, activeDeadlineSeconds=20, restart_policy="Never")
    await until(lambda: status(stack).get("phase") == "Running")
    [ctr] = await stack.containers("app")
    stack.runtime.exit_container(ctr.id, exit_code=0)
    await until(lambda: status(stack).get("phase") == "Succeeded")
    await asyncio.sleep(60)
    assert status(stack)["phase"] == "Succeeded"
    assert not [e for e in events.pods if e[2] == "DeadlineExceeded"]


# --- readinessGates ----------------------------------------------------------------------

GATE = "example.com/lb"


async def set_gate(stack: Stack, value: str) -> None:
    body = {"status": {"conditions": [{"type": GATE, "status": value}]}}
    await stack.server.patch(
        PODS,
        "web",
        body,
        patch_type=PatchType.STRATEGIC,
        namespace="default",
        subresource="status",
    )


async def test_ready_follows_the_readiness_gate_someone_else_writes(stack: Stack) -> None:
    loop = asyncio.get_running_loop()
    seed(stack.server, readinessGates=[{"conditionType": GATE}])
    await until(lambda: condition(stack, "ContainersReady").get("status") == "True")
    await asyncio.sleep(1)
    ready = condition(stack, "Ready")
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "ReadinessGatesNotReady",
        f'corresponding condition of pod readiness gate "{GATE}" does not exist.',
    )

    await set_gate(stack, "True")
    at = loop.time()
    await until(lambda: condition(stack, "Ready").get("status") == "True", within=2, every=0.05)
    assert loop.time() - at < 1.0
    assert condition(stack, GATE)["status"] == "True"  # the agent's patch kept it

    await set_gate(stack, "False")
    at = loop.time()
    await until(lambda: condition(stack, "Ready").get("status") == "False", within=2, every=0.05)
    assert loop.time() - at < 1.0
    assert condition(stack, "Ready")["message"] == (
        f'the status of pod readiness gate "{GATE}" is not "True", but False'
    )
    await asyncio.sleep(130)  # resyncs: the gate condition survives every status patch
    assert condition(stack, GATE)["status"] == "False"
    assert condition(stack, "Ready")["status"] == "False"


async def test_the_agents_status_patches_never_drop_a_condition_it_does_not_own(
    stack: Stack,
) -> None:
    seed(stack.server, readinessGates=[{"conditionType": GATE}])
    await until(lambda: status(stack).get("phase") == "Running")
    await set_gate(stack, "True")
    await until(lambda: condition(stack, "Ready").get("status") == "True")
    # a container restart moves the status many times
    [ctr] = await stack.containers("app")
    stack.runtime.exit_container(ctr.id, exit_code=1)
    await until(lambda: status(stack)["containerStatuses"][0]["restartCount"] == 1)
    await until(lambda: condition(stack, "Ready").get("status") == "True", within=30)
    assert condition(stack, GATE)["status"] == "True"
    ours = [c for c in stack.server.calls_to("patch", "pods") if "metadata" in (c.body or {})]
    assert len(ours) >= 3
    for call in ours:
        assert call.patch_type is PatchType.STRATEGIC
        sent = {c.get("type") for c in call.body["status"].get("conditions") or []}
        assert GATE not in sent  # only the agent's own conditions, merged by type

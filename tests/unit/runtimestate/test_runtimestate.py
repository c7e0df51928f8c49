"""The runtime's health as Ready sees it: kubelet wording, 5 s checks, 30 s to 'is down'."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.kuberuntime import CriUnavailable, CriVersionError
from nodeagent.kuberuntime.types import RuntimeCondition
from nodeagent.runtimestate import (
    NOT_CHECKED,
    RUNTIME_DOWN,
    Facts,
    RuntimeState,
    condition_text,
    evaluate,
)
from nodeagent.testing.fake_runtime import FakeRuntime

ENDPOINT = "unix:///run/fake-cri.sock"
NETWORK_NOT_READY = (
    "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady"
    " message:Network plugin returns error: cni plugin not initialized"
)


def ready(kind: str, status: bool = True) -> RuntimeCondition:
    return RuntimeCondition(type=kind, status=status)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        pytest.param(
            Facts(now=1, last_ok=None, conditions=None), (NOT_CHECKED,), id="never checked"
        ),
        pytest.param(
            Facts(now=10, last_ok=9, conditions=(ready("RuntimeReady"), ready("NetworkReady"))),
            (),
            id="runtime and network ready",
        ),
        pytest.param(Facts(now=40, last_ok=10, conditions=None), (RUNTIME_DOWN,), id="30s silent"),
        pytest.param(Facts(now=39.9, last_ok=10, conditions=None), (), id="29.9s silent"),
        pytest.param(
            Facts(now=10, last_ok=9, conditions=(ready("RuntimeReady"),)),
            ("container runtime network not ready: <nil>",),
            id="no network condition at all",
        ),
        pytest.param(
            Facts(now=1, last_ok=None, conditions=None, negotiation_error="validate CRI v1 ..."),
            (NOT_CHECKED, "validate CRI v1 ..."),
            id="runtime.v1 not served",
        ),
    ],
)
def test_evaluate(facts: Facts, expected: tuple[str, ...]) -> None:
    assert evaluate(facts) == expected


def test_condition_text_is_gos_format() -> None:
    cond = RuntimeCondition(type="RuntimeReady", status=False, reason="Boom", message="it broke")
    assert condition_text(cond) == "RuntimeReady=false reason:Boom message:it broke"


async def _started(state: RuntimeState) -> asyncio.Task[None]:
    task = asyncio.create_task(state.run())
    await asyncio.sleep(0)
    return task


@pytest.mark.looptime
async def test_a_ready_runtime_makes_the_node_ready_and_reports_its_version() -> None:
    fake = FakeRuntime(runtime_name="containerd", runtime_version="1.6.20~ds1")
    changes: list[tuple[str, ...]] = []

    async def connect(endpoint: str) -> FakeRuntime:
        return fake

    state = RuntimeState(endpoint=ENDPOINT, connect=connect)
    state._on_change = lambda: changes.append(state.errors())
    assert state.errors() == (NOT_CHECKED,)
    task = await _started(state)
    assert state.errors() == ()
    assert state.version() == "containerd://1.6.20~ds1"
    assert changes == [()]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert fake.closed == 1


@pytest.mark.looptime
async def test_network_not_ready_is_reported_in_the_kubelets_words() -> None:
    fake = FakeRuntime()
    fake.network_ready = False

    async def connect(endpoint: str) -> FakeRuntime:
        return fake

    state = RuntimeState(endpoint=ENDPOINT, connect=connect)
    task = await _started(state)
    assert state.errors() == (NETWORK_NOT_READY,)
    fake.network_ready = True
    await asyncio.sleep(5)
    assert state.errors() == ()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.looptime
async def test_a_runtime_that_stops_answering_is_down_after_30_seconds() -> None:
    fake = FakeRuntime()
    connects = 0

    async def connect(endpoint: str) -> FakeRuntime:
        nonlocal connects
        connects += 1
        if connects > 1:
            raise CriUnavailable("connection refused", rpc="Version", endpoint=endpoint,
                                 code="Unavailable", details="connection refused")  # fmt: skip
        return fake

    loop = asyncio.get_running_loop()
    changed = asyncio.Event()
    state = RuntimeState(endpoint=ENDPOINT, connect=connect, on_change=changed.set)
    task = await _started(state)
    assert state.errors() == ()
    changed.clear()
    fake.inject_error("Status", CriUnavailable("gone", rpc="Status", endpoint=ENDPOINT,
                                               code="Unavailable", details="gone"))  # fmt: skip
    start = loop.time()
    await changed.wait()
    assert state.errors() == (RUNTIME_DOWN,)
    assert loop.time() - start == pytest.approx(30, abs=1)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


@pytest.mark.looptime
async def test_a_runtime_without_cri_v1_never_makes_the_node_ready() -> None:
    message = (
        'validate CRI v1 runtime API for endpoint "unix:///x": rpc error: code = Unimplemented'
    )

    async def connect(endpoint: str) -> FakeRuntime:
        raise CriVersionError(message, rpc="Version", endpoint=endpoint, code="Unimplemented",
                              details="unknown service")  # fmt: skip

    state = RuntimeState(endpoint=ENDPOINT, connect=connect)
    task = await _started(state)
    await asyncio.sleep(60)
    assert state.errors() == (NOT_CHECKED, message)
    assert state.version() == "unknown"
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)

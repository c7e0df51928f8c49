"""The PLEG: relist, events only on change, and its health check."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.kuberuntime import types as cri
from nodeagent.pods.pleg import EventType, GenericPleg, PodLifecycleEvent
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX

pytestmark = pytest.mark.looptime


async def start_pod(runtime: FakeRuntime, uid: str = "u1") -> tuple[str, str]:
    config = cri.sandbox_config(name="p", namespace="ns", uid=uid)
    sandbox = await runtime.run_pod_sandbox(config)
    ctr_config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app"),
        image=cri.ImageSpec(image=BUSYBOX),
        labels={"io.kubernetes.pod.uid": uid, "io.kubernetes.container.name": "app"},
    )
    cid = await runtime.create_container(sandbox, ctr_config, config)
    await runtime.start_container(cid)
    return sandbox, cid


async def test_relist_reports_starts_deaths_and_removals_once() -> None:
    runtime = FakeRuntime()
    runtime.add_image(BUSYBOX)
    events: list[PodLifecycleEvent] = []
    pleg = GenericPleg(runtime=runtime, on_event=events.append)

    sandbox, cid = await start_pod(runtime)
    await pleg.relist()
    assert sorted((e.type, e.data) for e in events) == sorted(
        [(EventType.CONTAINER_STARTED, sandbox), (EventType.CONTAINER_STARTED, cid)]
    )
    events.clear()
    await pleg.relist()
    assert events == []  # nothing changed, nothing reported

    runtime.exit_container(cid, exit_code=1)
    await pleg.relist()
    assert events == [PodLifecycleEvent("u1", EventType.CONTAINER_DIED, cid)]
    events.clear()
    await runtime.remove_container(cid)
    await pleg.relist()
    assert events == [PodLifecycleEvent("u1", EventType.CONTAINER_REMOVED, cid)]
    events.clear()
    await runtime.remove_pod_sandbox(sandbox)  # a running sandbox vanishes: died, then removed
    await pleg.relist()
    assert events == [
        PodLifecycleEvent("u1", EventType.CONTAINER_DIED, sandbox),
        PodLifecycleEvent("u1", EventType.CONTAINER_REMOVED, sandbox),
    ]
    assert pleg.pods() == {}


async def test_health_turns_bad_three_minutes_after_the_last_good_relist() -> None:
    runtime = FakeRuntime()
    pleg = GenericPleg(runtime=runtime, on_event=lambda e: None)
    assert pleg.health() == "PLEG is not healthy: pleg has yet to be successful"
    await pleg.relist()
    assert pleg.health() is None
    await asyncio.sleep(180.5)
    assert pleg.health() == (
        "PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s"
    )


async def test_failed_relist_keeps_the_last_view() -> None:
    from nodeagent.kuberuntime.errors import CriUnavailable

    runtime = FakeRuntime()
    runtime.add_image(BUSYBOX)
    events: list[PodLifecycleEvent] = []
    pleg = GenericPleg(runtime=runtime, on_event=events.append)
    await start_pod(runtime)
    await pleg.relist()
    runtime.inject_error("ListPodSandbox", CriUnavailable("down", code="Unavailable"))
    events.clear()
    await pleg.relist()
    assert events == []
    assert list(pleg.pods()) == ["u1"]


async def test_the_last_relist_is_what_the_runtime_manager_reads_of_a_pod() -> None:
    """``listed(uid)``: when the last relist started and each sandbox and container id with
    its state, as ``runtime_state.listing_of`` writes a state read through CRI."""
    from nodeagent.clock import FrozenClock
    from nodeagent.kuberuntime.manager import RuntimeManager
    from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
    from nodeagent.kuberuntime.runtime_state import listing_of

    runtime = FakeRuntime()
    runtime.add_image(BUSYBOX)
    pleg = GenericPleg(runtime=runtime, on_event=lambda e: None)
    assert pleg.listed("u1") is None  # no relist yet
    sandbox, cid = await start_pod(runtime)
    manager = RuntimeManager(
        runtime=runtime,
        images=runtime,
        settings=PodRuntimeSettings(node_name="n"),
        clock=FrozenClock(),
        relisted=pleg.listed,
    )
    loop = asyncio.get_running_loop()
    before = loop.time()
    await asyncio.sleep(1)
    await pleg.relist()
    started, listing = pleg.listed("u1") or (0.0, frozenset())
    assert started >= before + 1
    assert listing == {(sandbox, "running"), (cid, "running")}
    assert listing == listing_of(await manager.pod_state("u1"))
    assert pleg.listed("other") == (started, frozenset())

    runtime.exit_container(cid, exit_code=1)
    await asyncio.sleep(1)
    await pleg.relist()
    _, listing = pleg.listed("u1") or (0.0, frozenset())
    assert listing == {(sandbox, "running"), (cid, "exited")}
    assert listing == listing_of(await manager.pod_state("u1"))

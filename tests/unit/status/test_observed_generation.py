"""``observedGeneration`` as the 1.36 kubelet writes it: the status and every condition the
node makes report the generation of the pod they were computed from; the resize conditions
keep the generation of the resize; other components' conditions are left alone."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.eviction.policy import disruption_condition
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.nodeshutdown.policy import disrupted_status
from nodeagent.podspec import Pod, decode_pod
from nodeagent.status import generate_pod_status, rejected_status, with_container_readiness
from nodeagent.testing.pods import pod_object

NOW = "2026-01-01T00:05:00Z"
KUBELET = ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")
T0 = 1_767_225_600 * 1_000_000_000


def pod(generation: int, **status: Any) -> Pod:
    body = pod_object("web")
    if generation:
        body["metadata"]["generation"] = generation
    body["status"].update(status)
    return decode_pod(body)


def running() -> PodRuntimeState:
    app = ContainerRecord(
        id="c1",
        name="app",
        state=ContainerState.RUNNING,
        restart_count=0,
        created_at=T0,
        started_at=T0,
        finished_at=0,
        exit_code=0,
        reason="",
        image="busybox",
        image_ref="busybox@sha256:1",
    )
    sandbox = SandboxRecord(id="sb", ready=True, ip="10.88.0.7")
    return PodRuntimeState(uid="u", sandboxes=(sandbox,), containers=(app,))


def generate(p: Pod, previous: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    return generate_pod_status(
        p,
        running(),
        previous=previous or {},
        reasons={},
        runtime_name="containerd",
        host_ips=("192.0.2.10",),
        now=NOW,
        **kw,
    )


def generations(status: dict[str, Any]) -> dict[str, int | None]:
    return {c["type"]: c.get("observedGeneration") for c in status["conditions"]}


@pytest.mark.parametrize(
    ("generation", "previous", "want"),
    [
        pytest.param(3, {}, 3, id="the pod's generation"),
        pytest.param(4, {"observedGeneration": 3}, 4, id="a spec change moves it on"),
        pytest.param(3, {"observedGeneration": 5}, 5, id="never back to an older copy's"),
        pytest.param(0, {}, None, id="a static pod's 0 is left out"),
    ],
)
def test_status_observed_generation(
    generation: int, previous: dict[str, Any], want: int | None
) -> None:
    status = generate(pod(generation), previous)
    assert status.get("observedGeneration") == want
    assert {generations(status)[t] for t in KUBELET} == {generation or None}


def test_resize_conditions_keep_their_generation_and_others_are_untouched() -> None:
    other = {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    gate = {"type": "example.com/gate", "status": "True", "observedGeneration": 1}
    p = pod(7, conditions=[other, gate])
    resize = [{"type": "PodResizeInProgress", "status": "True", "observedGeneration": 6}]
    status = generate(p, resize_conditions=resize)
    assert generations(status) == {
        "DisruptionTarget": None,
        "example.com/gate": 1,
        "PodResizeInProgress": 6,
        **dict.fromkeys(KUBELET, 7),
    }
    assert status["observedGeneration"] == 7


def test_readiness_results_remake_ready_with_the_newest_generation() -> None:
    before = generate(pod(2))
    after = with_container_readiness(pod(3), before, {"c1": False}, now=NOW)
    assert after is not None
    assert generations(after)["Ready"] == generations(after)["ContainersReady"] == 3
    assert generations(after)["Initialized"] == 2  # not remade
    assert after["observedGeneration"] == 2  # a readiness change is not a sync of the spec


def test_rejection_eviction_and_shutdown_report_the_generation() -> None:
    rejected = rejected_status(pod(4), reason="OutOfcpu", message="no", now=NOW)
    assert rejected["observedGeneration"] == 4
    assert disruption_condition("evicted", NOW, 4)["observedGeneration"] == 4
    assert "observedGeneration" not in disruption_condition("evicted", NOW)
    shut = disrupted_status(generate(pod(4)), now=NOW, succeeded=False, generation=4)
    assert generations(shut)["DisruptionTarget"] == 4

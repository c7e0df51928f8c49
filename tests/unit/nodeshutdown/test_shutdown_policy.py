"""The kubelet's graceful shutdown rules: groups, budgets, the drop-in, the state file."""

from __future__ import annotations

import datetime as dt

import msgspec
import pytest

from nodeagent.config.decode import decode
from nodeagent.config.schema_kubelet import KubeletConfiguration
from nodeagent.nodeshutdown.policy import (
    ShutdownGroup,
    decode_state,
    disrupted_status,
    dropin_text,
    effective_grace,
    encode_state,
    group_index,
    group_pods,
    plan,
    render_plan,
    shutdown_groups,
    update_failed_message,
)
from nodeagent.podspec import Pod, decode_checked_pod
from nodeagent.testing.pods import pod_object


def kubelet(**fields: object) -> KubeletConfiguration:
    return decode({"kubelet": fields}).kubelet


def pod(name: str, priority: int | None = None, grace: int | None = 30) -> Pod:
    spec: dict[str, object] = {}
    if priority is not None:
        spec["priority"] = priority
    obj = pod_object(name, **spec)
    if grace is None:
        del obj["spec"]["terminationGracePeriodSeconds"]
    else:
        obj["spec"]["terminationGracePeriodSeconds"] = grace
    return decode_checked_pod(obj)


GROUPS = (ShutdownGroup(0, 10), ShutdownGroup(1000, 20), ShutdownGroup(2_000_000_000, 5))


def test_no_configuration_means_no_groups() -> None:
    assert shutdown_groups(KubeletConfiguration()) == ()


def test_legacy_pair_splits_into_default_and_system_critical_groups() -> None:
    k = kubelet(shutdownGracePeriod="30s", shutdownGracePeriodCriticalPods="10s")
    assert shutdown_groups(k) == (ShutdownGroup(0, 20), ShutdownGroup(2_000_000_000, 10))


def test_by_priority_groups_are_sorted_ascending() -> None:
    k = kubelet(
        shutdownGracePeriodByPodPriority=[
            {"priority": 100000, "shutdownGracePeriodSeconds": 4},
            {"priority": 0, "shutdownGracePeriodSeconds": 6},
        ]
    )
    assert shutdown_groups(k) == (ShutdownGroup(0, 6), ShutdownGroup(100000, 4))


@pytest.mark.parametrize(
    ("priority", "index"),
    [
        (-5, 0),  # below the lowest group: the lowest
        (0, 0),
        (999, 0),
        (1000, 1),
        (1500, 1),
        (2_000_000_000, 2),
        (2_000_001_000, 2),  # above the highest: the highest
    ],
)
def test_group_is_the_largest_group_priority_not_above_the_pods(priority: int, index: int) -> None:
    assert group_index(GROUPS, priority) == index


def test_pods_without_priority_count_as_zero() -> None:
    grouped = group_pods(GROUPS, [pod("a"), pod("b", 1000), pod("c", 2_000_000_000)])
    assert [[p.name for p in g] for g in grouped] == [["a"], ["b"], ["c"]]


def test_grace_is_the_smaller_of_the_pods_own_and_the_groups_budget() -> None:
    assert effective_grace(pod("a", grace=3), ShutdownGroup(0, 10)) == 3
    assert effective_grace(pod("a", grace=30), ShutdownGroup(0, 10)) == 10
    assert effective_grace(pod("a", grace=10), ShutdownGroup(0, 10)) == 10


def test_dropin_is_the_kubelets_text() -> None:
    assert dropin_text(35.0) == "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=35\n"


def test_update_failure_message_is_the_kubelets() -> None:
    assert update_failed_message(5, 35, 5) == (
        "node shutdown manager was timed out after 5 attempts waiting for logind "
        "InhibitDelayMaxSec to update to 35s (ShutdownGracePeriod), current value is 5s"
    )
    # Both values are time.Duration printed with %v (nodeshutdown_manager_linux.go).
    assert update_failed_message(5, 90, 1.5).endswith(
        "to update to 1m30s (ShutdownGracePeriod), current value is 1.5s"
    )


def test_disrupted_status_is_failed_terminated_with_disruption_target() -> None:
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    out = disrupted_status(status, now="2026-01-01T00:00:09Z", succeeded=False)
    assert out["phase"] == "Failed"
    assert out["reason"] == "Terminated"
    assert out["message"] == "Pod was terminated in response to imminent node shutdown."
    assert out["conditions"][-1] == {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "TerminationByKubelet",
        "message": "Pod was terminated in response to imminent node shutdown.",
        "lastTransitionTime": "2026-01-01T00:00:09Z",
    }
    again = disrupted_status(out, now="2026-01-01T00:01:00Z", succeeded=False)
    assert [c["type"] for c in again["conditions"]] == ["Ready", "DisruptionTarget"]
    assert again["conditions"][-1]["lastTransitionTime"] == "2026-01-01T00:00:09Z"
    assert disrupted_status(status, now="x", succeeded=True)["phase"] == "Succeeded"


def test_state_file_round_trips_rfc3339_and_zero_end() -> None:
    start = dt.datetime(2026, 1, 1, 0, 0, 5, tzinfo=dt.UTC)
    data = encode_state(start, None)
    assert msgspec.json.decode(data) == {
        "startTime": "2026-01-01T00:00:05Z",
        "endTime": "0001-01-01T00:00:00Z",
    }
    assert decode_state(data) == (start, None)
    with pytest.raises(ValueError):
        decode_state(b"[]")


def test_plan_warns_when_a_pods_own_grace_is_cut() -> None:
    planned = plan(GROUPS, [pod("low", 0, grace=60), pod("mid", 1000, grace=3), pod("x", 1000)])
    text = render_plan(planned, inhibit_delay_max=5.0)
    assert "group 1: priority >= 0, budget 10s, 1 pod(s)" in text
    assert "default/low: priority 0, grace 10s (own 60s)" in text
    assert "WARNING: its own grace 60s is cut to the group's 10s" in text
    assert "default/mid: priority 1000, grace 3s (own 3s)\n" in text
    assert "group 3: priority >= 2000000000, budget 5s, 0 pod(s) (skipped: no pods)" in text
    assert "total: 35s" in text
    assert "logind InhibitDelayMaxSec: 5s (too short" in text
    assert render_plan([], inhibit_delay_max=None).startswith("No graceful configuration")

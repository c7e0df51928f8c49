"""PSI contention conditions (KEP-5394): the observation logic over synthetic PSI sequences,
the monitor over a fake summary, and the Node conditions and events they become."""

from __future__ import annotations

import asyncio
import datetime as dt
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from nodeagent.eviction import contention
from nodeagent.eviction.contention import (
    KUBEPODS_DISK,
    KUBEPODS_MEMORY,
    SYSTEM_DISK,
    SYSTEM_MEMORY,
    Reading,
    State,
    step,
)
from nodeagent.eviction.contention_monitor import ContentionMonitor
from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.nodestatus import setters
from nodeagent.nodestatus.compute import NodeFacts, compute_node
from nodeagent.nodestatus.setters import Contention, Pressure, RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings


def psi(avg10: float, avg60: float) -> dict[str, Any]:
    line = {"avg10": avg10, "avg60": avg60, "avg300": 0.0, "total": 1}
    return {"psi": {"some": dict(line), "full": dict(line)}}


def summary(
    *,
    mem: tuple[float, float] = (0, 0),
    io: tuple[float, float] = (0, 0),
    pods_mem: tuple[float, float] = (0, 0),
    pods_io: tuple[float, float] = (0, 0),
) -> dict[str, Any]:
    return {
        "node": {
            "memory": {"workingSetBytes": 1, **psi(*mem)},
            "io": {"time": "t", **psi(*io)},
            "systemContainers": [
                {"name": "pods", "memory": {"usageBytes": 1, **psi(*pods_mem)}, "io": psi(*pods_io)}
            ],
        },
        "pods": [],
    }


def run(kind: str, sequence: list[tuple[float, float]], threshold: float = 10.0) -> list[Any]:
    """Step one condition through (avg10, avg60) readings: [(status, [event reasons])]."""
    state: State | None = None
    out = []
    for a10, a60 in sequence:
        state, notices = step(kind, state, Reading(a10, a60), threshold)
        out.append((state.status, [n.reason for n in notices]))
    return out


def test_readings_come_from_the_full_line_of_node_and_kubepods_psi() -> None:
    got = contention.readings(summary(mem=(1, 2), io=(3, 4), pods_mem=(5, 6), pods_io=(7, 8)))
    assert got == {
        SYSTEM_MEMORY: Reading(1, 2),
        SYSTEM_DISK: Reading(3, 4),
        KUBEPODS_MEMORY: Reading(5, 6),
        KUBEPODS_DISK: Reading(7, 8),
    }


def test_missing_psi_reads_as_none() -> None:
    got = contention.readings({"node": {"memory": {"workingSetBytes": 1}}})
    assert got == dict.fromkeys(contention.CONDITION_TYPES)


def test_crossing_needs_avg60_and_avg10_and_clears_only_when_avg60_falls() -> None:
    seq = [
        (0.0, 0.0),  # quiet
        (40.0, 6.0),  # burst: avg10 high, avg60 not yet -> still False, no event
        (60.0, 12.0),  # both at or above -> True, and avg60 crossing is an event
        (80.0, 30.0),  # stays True, no repeated events
        (5.0, 25.0),  # avg10 dropped, avg60 still high -> True, trending lower
        (3.0, 15.0),  # still lowering: no second event
        (2.0, 9.9),  # avg60 below -> False
        (1.0, 5.0),
    ]
    assert run(KUBEPODS_MEMORY, seq) == [
        ("False", []),
        ("False", []),
        ("True", [contention.HIGH_REASON]),
        ("True", []),
        ("True", [contention.LOWER_REASON]),
        ("True", []),
        ("False", []),
        ("False", []),
    ]


def test_high_avg60_with_low_avg10_does_not_set_the_condition() -> None:
    # the minute's average is high from an earlier burst, but the last 10 s are calm
    assert run(SYSTEM_MEMORY, [(0.0, 0.0), (2.0, 20.0), (3.0, 15.0)]) == [
        ("False", []),
        ("False", [contention.HIGH_REASON]),
        ("False", []),
    ]


def test_rising_again_after_trending_lower_records_lower_again_later() -> None:
    seq = [(50.0, 50.0), (1.0, 40.0), (50.0, 45.0), (1.0, 30.0)]
    assert run(SYSTEM_DISK, seq) == [
        ("True", [contention.HIGH_REASON]),
        ("True", [contention.LOWER_REASON]),
        ("True", []),
        ("True", [contention.LOWER_REASON]),
    ]


def test_threshold_is_inclusive_and_in_psi_percent() -> None:
    assert run(KUBEPODS_DISK, [(0.9, 0.9)], threshold=0.9) == [("True", [contention.HIGH_REASON])]
    assert run(KUBEPODS_DISK, [(0.89, 0.95)], threshold=0.9)[0][0] == "False"


def test_unreadable_psi_is_unknown() -> None:
    state, notices = step(SYSTEM_MEMORY, State("True", high=True), None, 10.0)
    assert state.status == "Unknown" and notices == []
    cond = contention.condition(SYSTEM_MEMORY, state)
    assert cond.reason == "NodeStatusUnknown"
    assert "system memory PSI" in cond.message


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (
            "True",
            "KubeletHasKubepodsMemoryContentionPressure",
            "kubelet has KubepodsMemoryContentionPressure",
        ),
        (
            "False",
            "KubeletHasNoKubepodsMemoryContentionPressure",
            "kubelet has no KubepodsMemoryContentionPressure",
        ),
    ],
)
def test_condition_reason_and_message(status: str, reason: str, message: str) -> None:
    cond = contention.condition(KUBEPODS_MEMORY, State(status))
    assert (cond.status, cond.reason, cond.message) == (status, reason, message)


def test_event_messages_name_the_condition_values_and_threshold() -> None:
    _, notices = step(KUBEPODS_MEMORY, None, Reading(55.5, 12.25), 10.0)
    assert [(n.type, n.reason) for n in notices] == [("Warning", "ContentionPressureHigh")]
    assert notices[0].message == (
        "KubepodsMemoryContentionPressure: kubepods memory PSI full avg60 12.25% is at or above "
        "the threshold 10% (avg10 55.50%)"
    )


# --- the monitor --------------------------------------------------------------------------


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


def monitor(
    summaries: list[dict[str, Any]], thresholds: dict[str, float]
) -> tuple[ContentionMonitor, Events, list[int]]:
    events, pokes = Events(), [0]
    feed = iter(summaries)

    async def next_summary() -> dict[str, Any]:
        return next(feed)

    def poke() -> None:
        pokes[0] += 1

    m = ContentionMonitor(
        thresholds=thresholds, summary=next_summary, interval=10, events=events, on_change=poke
    )
    return m, events, pokes


def test_monitor_reports_enabled_conditions_and_pokes_on_change() -> None:
    thresholds = {SYSTEM_MEMORY: 10.0, SYSTEM_DISK: 0.0, KUBEPODS_MEMORY: 10.0, KUBEPODS_DISK: 5}
    m, events, pokes = monitor(
        [summary(), summary(), summary(pods_mem=(50, 20)), summary(pods_mem=(1, 2))], thresholds
    )
    assert m.conditions() == ()  # nothing reported before the first observation

    async def go() -> list[tuple[str, ...]]:
        seen = []
        for _ in range(4):
            await m.synchronize()
            seen.append(tuple(c.status for c in m.conditions()))
        return seen

    seen = asyncio.run(go())
    # SYSTEM_DISK has threshold 0: off, never reported
    assert [c.type for c in m.conditions()] == [SYSTEM_MEMORY, KUBEPODS_MEMORY, KUBEPODS_DISK]
    assert seen == [
        ("False", "False", "False"),
        ("False", "False", "False"),
        ("False", "True", "False"),
        ("False", "False", "False"),
    ]
    assert pokes == [3]  # first observation, True, False
    assert [e[1] for e in events.recorded] == ["ContentionPressureHigh"]


def test_monitor_with_every_threshold_zero_reports_nothing() -> None:
    m, _, _ = monitor([summary(pods_mem=(90, 90))], dict.fromkeys(contention.CONDITION_TYPES, 0.0))
    asyncio.run(m.synchronize())
    assert m.conditions() == ()


# --- on the Node ---------------------------------------------------------------------------


def test_contention_condition_transitions_record_node_status_events() -> None:
    now = "2026-01-01T00:00:00Z"
    false = Contention(
        KUBEPODS_MEMORY,
        "False",
        "KubeletHasNoKubepodsMemoryContentionPressure",
        "kubelet has no KubepodsMemoryContentionPressure",
    )
    cond, event = setters.contention_condition(None, false, now=now, node_name="n1")
    assert cond == {
        "type": KUBEPODS_MEMORY,
        "status": "False",
        "reason": "KubeletHasNoKubepodsMemoryContentionPressure",
        "message": "kubelet has no KubepodsMemoryContentionPressure",
        "lastHeartbeatTime": now,
        "lastTransitionTime": now,
    }
    assert event is not None
    assert event.reason == "NodeHasNoKubepodsMemoryContentionPressure"
    assert event.message == "Node n1 status is now: NodeHasNoKubepodsMemoryContentionPressure"

    later = "2026-01-01T00:01:00Z"
    same, none = setters.contention_condition(cond, false, now=later, node_name="n1")
    assert none is None and same["lastTransitionTime"] == now and same["lastHeartbeatTime"] == later

    true = Contention(
        KUBEPODS_MEMORY,
        "True",
        "KubeletHasKubepodsMemoryContentionPressure",
        "kubelet has KubepodsMemoryContentionPressure",
    )
    cond, event = setters.contention_condition(same, true, now=later, node_name="n1")
    assert cond["status"] == "True" and cond["lastTransitionTime"] == later
    assert event is not None and event.reason == "NodeHasKubepodsMemoryContentionPressure"


def test_compute_node_appends_contention_conditions_after_ready_and_omits_them_when_off() -> None:
    settings = NodeSettings(
        node_name="n1",
        hostname="n1",
        root_dir=Path("/var/lib/nodeagent"),
        kubeconfig=Path("/etc/nodeagent/kubeconfig"),
        node_ips=(ipaddress.ip_address("10.0.0.5"),),
    )

    def facts(*contended: Contention) -> NodeFacts:
        return NodeFacts(
            now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
            host=HostInfo(hostname="n1", num_cpus=2, memory_bytes=2**30, boot_id="b"),
            network=HostNetwork(
                addresses={"eth0": (ipaddress.ip_address("10.0.0.5"),)},
                default_route_interfaces=("eth0",),
            ),
            rootfs_bytes=2**34,
            runtime=RuntimeStatus(errors=(), version="containerd://2.0"),
            pressure=Pressure(contention=contended),
        )

    old: dict[str, Any] = {"metadata": {"name": "n1"}, "status": {}}
    off = compute_node(old, facts(), settings)
    assert [c["type"] for c in off.node["status"]["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    on = compute_node(
        off.node,
        facts(
            *(
                Contention(k, c.status, c.reason, c.message)
                for k in contention.CONDITION_TYPES
                if (c := contention.condition(k, State("True" if k == SYSTEM_MEMORY else "False")))
            )
        ),
        settings,
    )
    conds = {c["type"]: c for c in on.node["status"]["conditions"]}
    assert list(conds)[4:] == list(contention.CONDITION_TYPES)
    assert conds[SYSTEM_MEMORY]["status"] == "True"
    assert conds[SYSTEM_MEMORY]["reason"] == "KubeletHasSystemMemoryContentionPressure"
    assert {e.reason for e in on.events} == {
        "NodeHasSystemMemoryContentionPressure",
        "NodeHasNoSystemDiskContentionPressure",
        "NodeHasNoKubepodsMemoryContentionPressure",
        "NodeHasNoKubepodsDiskContentionPressure",
    }

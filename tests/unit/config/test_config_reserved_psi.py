"""Config accepted for enforceNodeAllocatable system-reserved / kube-reserved and for the PSI
contention conditions (KEP-5394): what the managers are then built from."""

from __future__ import annotations

import asyncio
from pathlib import Path

from config_loading import Load

from nodeagent.agent import contention_monitor
from nodeagent.clock import FrozenClock
from nodeagent.cm.manager import reserved_cgroups
from nodeagent.cm.policy import ReservedCgroup
from nodeagent.config import features
from nodeagent.events import DiscardEvents
from nodeagent.eviction import contention
from nodeagent.eviction.contention_monitor import ContentionMonitor
from nodeagent.stats.housekeeping import CgroupStats


def test_reserved_levels_with_their_cgroups_are_accepted(load: Load) -> None:
    cfg = load(
        "kubelet:\n"
        "  enforceNodeAllocatable: [pods, system-reserved, kube-reserved]\n"
        "  systemReservedCgroup: /system.slice\n"
        "  kubeReservedCgroup: /kube-reserved.slice\n"
        "  systemReserved: {cpu: 500m, memory: 256Mi}\n"
        "  kubeReserved: {memory: 128Mi}\n"
    )
    assert reserved_cgroups(cfg) == (
        ReservedCgroup(
            level="system-reserved",
            cgroup="/system.slice",
            reservation={"cpu": "500m", "memory": "256Mi"},
        ),
        ReservedCgroup(
            level="kube-reserved", cgroup="/kube-reserved.slice", reservation={"memory": "128Mi"}
        ),
    )


def test_pods_only_enforces_no_reserved_cgroup(load: Load) -> None:
    assert reserved_cgroups(load("kubelet:\n  systemReservedCgroup: /system.slice\n")) == ()


def test_psi_node_condition_gate_is_off_by_default_and_switches_the_thresholds_on(
    load: Load,
) -> None:
    off = load("kubelet: {}\n")
    assert features.effective(off.kubelet.feature_gates)["PSINodeCondition"] is False
    assert off.kubelet.kubepods_memory_contention_threshold == 0.9
    on = load(
        "kubelet:\n"
        "  featureGates: {PSINodeCondition: true}\n"
        "  kubepodsMemoryContentionThreshold: 5\n"
        "  systemDiskContentionThreshold: 0\n"
    )
    assert on.kubelet.kubepods_memory_contention_threshold == 5.0
    assert on.kubelet.system_disk_contention_threshold == 0.0


def test_the_monitor_exists_only_with_the_gate_and_reads_the_sampler(
    load: Load, tmp_path: Path
) -> None:
    root, proc = tmp_path / "cg", tmp_path / "pressure"
    (root / "kubepods").mkdir(parents=True)
    proc.mkdir()
    line = "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"
    (proc / "memory").write_text(line + "full avg10=1.50 avg60=2.50 avg300=0.00 total=9\n")
    (proc / "io").write_text(line + "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    (root / "kubepods" / "memory.pressure").write_text(
        line + "full avg10=30.00 avg60=20.00 avg300=1.00 total=99\n"
    )
    sampler = CgroupStats(
        clock=FrozenClock(), enabled=True, root=str(root), proc_pressure=str(proc)
    )

    def build(text: str) -> ContentionMonitor | None:
        return contention_monitor(
            load(text), sampler=sampler, events=DiscardEvents(), on_change=lambda: None
        )

    assert build("kubelet: {}\n") is None
    monitor = build("kubelet:\n  featureGates: {PSINodeCondition: true}\n")
    assert monitor is not None

    async def go() -> None:
        await monitor.synchronize()

    asyncio.run(go())
    assert monitor.last_readings[contention.SYSTEM_MEMORY] == contention.Reading(1.5, 2.5)
    assert monitor.last_readings[contention.KUBEPODS_MEMORY] == contention.Reading(30.0, 20.0)
    assert monitor.last_readings[contention.KUBEPODS_DISK] is None  # no io.pressure there
    by_type = {c.type: c.status for c in monitor.conditions()}
    assert by_type[contention.SYSTEM_MEMORY] == "True"  # default threshold 0.9
    assert by_type[contention.KUBEPODS_MEMORY] == "True"
    assert by_type[contention.KUBEPODS_DISK] == "Unknown"


def test_qos_reserved_memory_with_its_gate(load: Load) -> None:
    from nodeagent.cm.manager import memory_reserve_percent

    cfg = load("kubelet:\n  featureGates: {QOSReserved: true}\n  qosReserved: {memory: 50%}\n")
    assert memory_reserve_percent(cfg) == 50
    assert memory_reserve_percent(load("kubelet: {}\n")) is None

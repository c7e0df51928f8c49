"""Config accepted for enforceNodeAllocatable system-reserved / kube-reserved and for the PSI
contention conditions (KEP-5394): what the managers are then built from."""

from __future__ import annotations

from config_loading import Load

from nodeagent.agent import contention_monitor
from nodeagent.cm.manager import reserved_cgroups
from nodeagent.cm.policy import ReservedCgroup
from nodeagent.config import features


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


def test_the_monitor_exists_only_with_the_gate(load: Load) -> None:
    class Stats:
        async def summary(self) -> dict[str, object]:
            return {}

    def build(text: str) -> object:
        return contention_monitor(
            load(text),
            stats=Stats(),  # type: ignore[arg-type]
            events=None,  # type: ignore[arg-type]
            on_change=lambda: None,
        )

    assert build("kubelet: {}\n") is None
    assert build("kubelet:\n  featureGates: {PSINodeCondition: true}\n") is not None

"""enforceNodeAllocatable ``system-reserved`` / ``kube-reserved``: the reservation written to the
configured cgroup with either driver, and the kubelet's refusal when that cgroup is missing or
lacks a controller. Against a cgroup tree in a temporary directory and the fake systemd."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.cm.cgroupfs import CgroupFs, files_vanish_rmdir
from nodeagent.cm.manager import CmSettings, ContainerManager, ReservedEnforcementError
from nodeagent.cm.policy import (
    NodeResources,
    ReservedCgroup,
    reserved_cgroup_name,
    reserved_limits,
    shares_to_weight,
)
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.testing.fake_systemd import FakeSystemdBus

GIB = 1 << 30
SYSTEM = ReservedCgroup(
    level="system-reserved",
    cgroup="/system.slice",
    reservation={"cpu": "500m", "memory": "256Mi", "pid": "1000", "ephemeral-storage": "1Gi"},
)


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


def manager(
    tmp_path: Path, driver: CgroupDriver, *reserved: ReservedCgroup
) -> tuple[ContainerManager, FakeSystemdBus, Events]:
    bus, events = FakeSystemdBus(tmp_path), Events()
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")

    async def get_driver() -> CgroupDriver:
        return driver

    cm = ContainerManager(
        settings=CmSettings(
            enabled=True,
            node=NodeResources(milli_cpu=2000, memory=4 * GIB, reserved_memory=GIB),
            reserved=reserved,
        ),
        driver=get_driver,
        fs=CgroupFs(mount=tmp_path, rmdir=files_vanish_rmdir),
        bus=lambda: bus,
        events=events,
    )
    return cm, bus, events


def existing(tmp_path: Path, path: str, controllers: str = "cpu io memory pids") -> Path:
    d = tmp_path / path
    d.mkdir(parents=True)
    (d / "cgroup.controllers").write_text(controllers + "\n")
    for name in ("cpu.weight", "memory.max", "pids.max"):
        (d / name).write_text("untouched\n")
    return d


def test_reserved_limits_are_the_kubelets_cgroup_config() -> None:
    limits = reserved_limits(SYSTEM.reservation)
    assert limits.files() == {
        "cpu.weight": str(shares_to_weight(512)),
        "memory.max": str(256 << 20),
        "pids.max": "1000",
    }
    assert reserved_limits({"memory": "1Gi"}).files() == {"memory.max": str(GIB)}
    assert reserved_limits({"memory": "1Gi"}).controllers() == ["memory"]


@pytest.mark.parametrize(
    ("cgroup", "driver", "name"),
    [
        ("/system.slice", "systemd", ["system"]),
        ("/kube-reserved.slice", "systemd", ["kube", "reserved"]),
        ("/system.slice", "cgroupfs", ["system.slice"]),
        ("/kube/reserved", "cgroupfs", ["kube", "reserved"]),
    ],
)
def test_reserved_cgroup_names(cgroup: str, driver: str, name: list[str]) -> None:
    assert reserved_cgroup_name(cgroup, driver) == name


async def test_systemd_driver_sets_the_slice_properties_and_writes_the_files(
    tmp_path: Path,
) -> None:
    d = existing(tmp_path, "system.slice")
    cm, bus, events = manager(tmp_path, "systemd", SYSTEM)
    await cm.setup()
    assert (d / "cpu.weight").read_text() == str(shares_to_weight(512))
    assert (d / "memory.max").read_text() == str(256 << 20)
    assert (d / "pids.max").read_text() == "1000"
    props = bus.units["system.slice"]
    assert props == {"CPUWeight": shares_to_weight(512), "MemoryMax": 256 << 20, "TasksMax": 1000}
    assert (
        "Normal",
        "NodeAllocatableEnforced",
        "Updated limits on system reserved cgroup /system.slice",
    ) in events.recorded
    assert (
        "Normal",
        "NodeAllocatableEnforced",
        "Updated Node Allocatable limit across pods",
    ) in events.recorded


async def test_cgroupfs_driver_writes_only_what_is_reserved(tmp_path: Path) -> None:
    d = existing(tmp_path, "kube/reserved")
    kube = ReservedCgroup(
        level="kube-reserved", cgroup="/kube/reserved", reservation={"memory": "1Gi"}
    )
    cm, bus, events = manager(tmp_path, "cgroupfs", kube)
    await cm.setup()
    assert (d / "memory.max").read_text() == str(GIB)
    assert (d / "cpu.weight").read_text() == "untouched\n"
    assert bus.calls == []
    assert events.recorded[-1] == (
        "Normal",
        "NodeAllocatableEnforced",
        "Updated limits on kube reserved cgroup /kube/reserved",
    )


async def test_a_missing_reserved_cgroup_stops_the_agent_with_the_kubelets_error(
    tmp_path: Path,
) -> None:
    cm, _bus, events = manager(tmp_path, "systemd", SYSTEM)
    expected = (
        'Failed to enforce System Reserved Cgroup Limits on "/system.slice": could not read '
        f'controllers for cgroup ["system"]: open {tmp_path}/system.slice/cgroup.controllers: '
        "no such file or directory"
    )
    with pytest.raises(ReservedEnforcementError) as raised:
        await cm.run()
    assert str(raised.value) == expected
    assert events.recorded[-1] == ("Warning", "FailedNodeAllocatableEnforcement", expected)


async def test_a_reserved_cgroup_without_a_needed_controller_is_refused(tmp_path: Path) -> None:
    existing(tmp_path, "system.slice", controllers="memory")
    cm, _bus, _events = manager(tmp_path, "systemd", SYSTEM)
    with pytest.raises(ReservedEnforcementError) as raised:
        await cm.setup()
    assert str(raised.value) == (
        'Failed to enforce System Reserved Cgroup Limits on "/system.slice": '
        'cgroup ["system"] has some missing controllers: cpu, pids'
    )


async def test_system_then_kube_reserved_both_enforced(tmp_path: Path) -> None:
    sys_dir = existing(tmp_path, "system.slice")
    kube_dir = existing(tmp_path, "kube.slice/kube-reserved.slice")
    kube = ReservedCgroup(
        level="kube-reserved", cgroup="/kube-reserved.slice", reservation={"cpu": "1"}
    )
    cm, bus, events = manager(tmp_path, "systemd", SYSTEM, kube)
    await cm.setup()
    assert (sys_dir / "memory.max").read_text() == str(256 << 20)
    assert (kube_dir / "cpu.weight").read_text() == str(shares_to_weight(1024))
    assert bus.units["kube-reserved.slice"] == {"CPUWeight": shares_to_weight(1024)}
    reasons = [m for _, r, m in events.recorded if r == "NodeAllocatableEnforced"]
    assert reasons[-2:] == [
        "Updated limits on system reserved cgroup /system.slice",
        "Updated limits on kube reserved cgroup /kube-reserved.slice",
    ]


# --- qosReserved (alpha gate QOSReserved) -------------------------------------------------


def test_qos_memory_limits_hold_back_a_share_of_the_higher_tiers_requests() -> None:
    from nodeagent.cm.policy import qos_memory_limits
    from nodeagent.testing.pods import container, pod

    g = {"cpu": "100m", "memory": "1Gi"}
    pods = [
        pod("g", containers=[container("a", requests=g, limits=g)]),
        pod("b", containers=[container("a", requests={"memory": "512Mi"})]),
        pod("e", containers=[container("a")]),
    ]
    burstable, besteffort = qos_memory_limits(pods, 3 * GIB, 50) or (0, 0)
    assert burstable == 3 * GIB - GIB // 2
    assert besteffort == burstable - (512 << 20) // 2
    assert qos_memory_limits(pods, 0, 50) is None


async def test_manager_sets_qos_tier_memory_limits_as_pods_come_and_go(tmp_path: Path) -> None:
    from nodeagent.testing.pods import container, pod

    async def get_driver() -> CgroupDriver:
        return "cgroupfs"

    cm = ContainerManager(
        settings=CmSettings(
            enabled=True,
            node=NodeResources(milli_cpu=2000, memory=4 * GIB, reserved_memory=GIB),
            memory_reserve_percent=100,
        ),
        driver=get_driver,
        fs=CgroupFs(mount=tmp_path, rmdir=files_vanish_rmdir),
    )
    await cm.setup()
    burstable, besteffort = tmp_path / "kubepods/burstable", tmp_path / "kubepods/besteffort"
    assert (burstable / "memory.max").read_text() == str(3 * GIB)
    assert (besteffort / "memory.max").read_text() == str(3 * GIB)
    g = {"cpu": "100m", "memory": "1Gi"}
    guaranteed = pod("g", containers=[container("a", requests=g, limits=g)])
    await cm.ensure_pod(guaranteed)
    assert (burstable / "memory.max").read_text() == str(2 * GIB)
    assert (besteffort / "memory.max").read_text() == str(2 * GIB)
    await cm.ensure_pod(pod("b", containers=[container("a", requests={"memory": "1Gi"})]))
    assert (besteffort / "memory.max").read_text() == str(GIB)
    await cm.remove_pod(guaranteed.uid)
    assert (burstable / "memory.max").read_text() == str(3 * GIB)
    assert (besteffort / "memory.max").read_text() == str(2 * GIB)

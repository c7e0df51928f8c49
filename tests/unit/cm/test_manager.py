"""The container manager against a cgroup tree in a temporary directory, with both drivers
(systemd through the fake D-Bus manager)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nodeagent.cm.cgroupfs import CgroupFs, files_vanish_rmdir
from nodeagent.cm.manager import CmSettings, ContainerManager
from nodeagent.cm.policy import NodeResources, shares_to_weight
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.podspec import Pod
from nodeagent.systemd.dbus import DbusError
from nodeagent.testing.fake_systemd import FakeSystemdBus
from nodeagent.testing.pods import container, pod

GIB = 1 << 30
UID_G = "11111111-aaaa-bbbb-cccc-000000000001"
UID_B = "11111111-aaaa-bbbb-cccc-000000000002"
UID_E = "11111111-aaaa-bbbb-cccc-000000000003"


def pods() -> tuple[Pod, Pod, Pod]:
    g = {"cpu": "500m", "memory": "128Mi"}
    return (
        pod("g", uid=UID_G, containers=[container("app", requests=g, limits=g)]),
        pod(
            "b",
            uid=UID_B,
            containers=[
                container(
                    "app", requests={"cpu": "250m", "memory": "64Mi"}, limits={"memory": "256Mi"}
                )
            ],
        ),
        pod("e", uid=UID_E, containers=[container("app")]),
    )


def manager(
    tmp_path: Path, driver: CgroupDriver, bus: FakeSystemdBus | None = None, **kw: Any
) -> tuple[ContainerManager, FakeSystemdBus]:
    """A manager over ``tmp_path``; ``bus``: the systemd a restarted agent finds again."""
    bus = bus or FakeSystemdBus(tmp_path)

    async def get_driver() -> CgroupDriver:
        return driver

    settings = CmSettings(
        enabled=True,
        node=NodeResources(milli_cpu=2000, memory=4 * GIB, reserved_memory=GIB),
        pod_pids_limit=kw.pop("pod_pids_limit", 100),
        **kw,
    )
    cm = ContainerManager(
        settings=settings,
        driver=get_driver,
        fs=CgroupFs(mount=tmp_path, rmdir=files_vanish_rmdir),
        bus=lambda: bus,
    )
    return cm, bus


def _empty(directory: Path) -> bool:
    return not any(directory.iterdir())


def read(path: Path) -> str:
    return path.read_text().strip()


PATHS = {
    "cgroupfs": {
        "kubepods": "kubepods",
        "burstable": "kubepods/burstable",
        "besteffort": "kubepods/besteffort",
        "g": f"kubepods/pod{UID_G}",
        "b": f"kubepods/burstable/pod{UID_B}",
        "e": f"kubepods/besteffort/pod{UID_E}",
    },
    "systemd": {
        "kubepods": "kubepods.slice",
        "burstable": "kubepods.slice/kubepods-burstable.slice",
        "besteffort": "kubepods.slice/kubepods-besteffort.slice",
        "g": f"kubepods.slice/kubepods-pod{UID_G.replace('-', '_')}.slice",
        "b": "kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{UID_B.replace('-', '_')}.slice",
        "e": "kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{UID_E.replace('-', '_')}.slice",
    },
}


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
async def test_hierarchy_and_pod_cgroups_with_their_limits(
    tmp_path: Path, driver: CgroupDriver
) -> None:
    cm, _bus = manager(tmp_path, driver)
    paths = {k: tmp_path / v for k, v in PATHS[driver].items()}
    await cm.setup()
    assert read(paths["kubepods"] / "memory.max") == str(3 * GIB)
    assert read(paths["kubepods"] / "cpu.weight") == str(shares_to_weight(2048))
    assert read(paths["burstable"] / "cpu.weight") == "1"
    assert read(paths["besteffort"] / "cpu.weight") == "1"

    g, b, e = pods()
    for p in (g, b, e):
        await cm.ensure_pod(p)
    assert read(paths["g"] / "memory.max") == str(128 << 20)
    assert read(paths["g"] / "cpu.max") == "50000 100000"
    assert read(paths["g"] / "pids.max") == "100"
    assert read(paths["b"] / "memory.max") == str(256 << 20)
    assert read(paths["b"] / "cpu.max") == "max 100000"
    assert read(paths["b"] / "cpu.weight") == str(shares_to_weight(256))
    assert read(paths["e"] / "cpu.weight") == "1"
    assert read(paths["e"] / "memory.max") == "max"
    # Burstable tier follows its pods' cpu requests.
    assert read(paths["burstable"] / "cpu.weight") == str(shares_to_weight(256))

    await cm.remove_pod(b.uid)
    assert not paths["b"].exists()
    assert read(paths["burstable"] / "cpu.weight") == "1"
    assert paths["g"].exists() and paths["e"].exists()


@pytest.mark.parametrize("driver", ["cgroupfs", "systemd"])
async def test_housekeeping_removes_pod_cgroups_no_pod_owns(
    tmp_path: Path, driver: CgroupDriver
) -> None:
    cm, bus = manager(tmp_path, driver)
    g, b, e = pods()
    for p in (g, b, e):
        await cm.ensure_pod(p)
    # A restarted agent knows none of them; only the pod the caller keeps survives.
    fresh, _ = manager(tmp_path, driver, bus)
    await fresh.setup()
    await fresh.clean_orphans(lambda uid: uid == UID_G)
    paths = {k: tmp_path / v for k, v in PATHS[driver].items()}
    assert paths["g"].exists()
    assert not paths["b"].exists() and not paths["e"].exists()
    assert paths["burstable"].exists() and paths["besteffort"].exists()


async def test_systemd_slices_get_the_resource_properties(tmp_path: Path) -> None:
    cm, bus = manager(tmp_path, "systemd")
    g, _, _ = pods()
    await cm.ensure_pod(g)
    unit = f"kubepods-pod{UID_G.replace('-', '_')}.slice"
    props = bus.units[unit]
    assert props["CPUWeight"] == shares_to_weight(512)
    assert props["CPUQuotaPerSecUSec"] == 500_000
    assert props["CPUQuotaPeriodUSec"] == 100_000
    assert props["MemoryMax"] == 128 << 20
    assert props["TasksMax"] == 100
    assert props["Wants"] == ["kubepods.slice"]
    assert props["MemoryAccounting"] is True and props["DefaultDependencies"] is False
    # kubepods.slice was already started: the second start is a property update.
    await cm.remove_pod(g.uid)
    cm2, _ = manager(tmp_path, "systemd", bus)
    await cm2.setup()
    assert "SetUnitProperties" in [c[0] for c in bus.calls]


async def test_a_dbus_failure_fails_the_pod_sync_and_is_retried(tmp_path: Path) -> None:
    cm, bus = manager(tmp_path, "systemd")
    bus.fail["StartTransientUnit"] = DbusError("org.freedesktop.DBus.Error.AccessDenied", "no")
    with pytest.raises(DbusError, match="AccessDenied"):
        await cm.ensure_pod(pods()[0])
    del bus.fail["StartTransientUnit"]
    await cm.ensure_pod(pods()[0])
    assert (tmp_path / PATHS["systemd"]["g"] / "memory.max").exists()


async def test_disabled_on_cgroup_v1_touches_nothing(tmp_path: Path) -> None:
    bus = FakeSystemdBus(tmp_path)

    async def get_driver() -> CgroupDriver:
        raise AssertionError("not asked")

    cm = ContainerManager(
        settings=CmSettings(enabled=False),
        driver=get_driver,
        fs=CgroupFs(mount=tmp_path, rmdir=files_vanish_rmdir),
        bus=lambda: bus,
    )
    await cm.ensure_pod(pods()[0])
    await cm.remove_pod(UID_G)
    assert _empty(tmp_path)

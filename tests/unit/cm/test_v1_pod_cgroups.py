"""cgroup v1: the container manager is inactive, but the empty pod cgroups runc made in each
hierarchy go when the pod is gone (found by the soak: every deleted pod's ``pod<uid>`` stayed
in all ten hierarchies of a cgroup v1 host)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nodeagent.cm.cgroupfs import CgroupFs
from nodeagent.cm.manager import CmSettings, ContainerManager
from nodeagent.cm.v1pods import pod_cgroups, pod_dirs, pod_uid
from nodeagent.kuberuntime.podsettings import CgroupDriver

GONE = "0f3a6c1e-0000-4000-8000-000000000001"
LIVE = "0f3a6c1e-0000-4000-8000-000000000002"
ORPHAN = "0f3a6c1e-0000-4000-8000-000000000003"


def v1_host(tmp_path: Path) -> Path:
    """Hierarchies as a v1 host mounts them (cpu a link to cpu,cpuacct) under cgroupRoot
    /na: the deleted pod's empty dirs, a live pod's with a container in it."""
    (tmp_path / "cpu,cpuacct").mkdir()
    (tmp_path / "cpu").symlink_to("cpu,cpuacct")
    for hierarchy in ("cpu,cpuacct", "memory", "pids"):
        kubepods = tmp_path / hierarchy / "na" / "kubepods"
        (kubepods / "besteffort" / f"pod{GONE}").mkdir(parents=True)
        (kubepods / "burstable" / f"pod{LIVE}" / ("c" * 64)).mkdir(parents=True)
        (kubepods / f"pod{ORPHAN}").mkdir(parents=True)
    return tmp_path


def manager(mount: Path, *, v1: bool = True) -> ContainerManager:
    async def driver() -> CgroupDriver:
        return "cgroupfs"

    settings = CmSettings(enabled=False, cgroup_root=["na"], v1_pod_cgroups=v1)
    return ContainerManager(settings=settings, driver=driver, fs=CgroupFs(mount=mount))


def test_each_hierarchy_is_searched_once_and_only_pod_dirs_count(tmp_path: Path) -> None:
    found = pod_cgroups(["na"], v1_host(tmp_path))
    assert sorted(found) == [GONE, LIVE, ORPHAN]
    assert len(found[GONE]) == 3  # cpu,cpuacct (not again through cpu), memory, pids
    assert pod_uid("kubepods-besteffort.slice") is None and pod_uid("pod") is None


def test_a_removed_pod_leaves_no_cgroup_in_any_hierarchy(tmp_path: Path) -> None:
    mount = v1_host(tmp_path)
    asyncio.run(manager(mount).remove_pod(GONE))
    assert GONE not in pod_cgroups(["na"], mount)
    assert sorted(pod_cgroups(["na"], mount)) == [LIVE, ORPHAN]


def test_housekeeping_removes_orphans_but_not_a_cgroup_still_in_use(tmp_path: Path) -> None:
    mount = v1_host(tmp_path)
    asyncio.run(manager(mount).clean_orphans(keep=lambda uid: False))
    left = pod_cgroups(["na"], mount)
    assert sorted(left) == [LIVE]  # its container's cgroup is still there: rmdir refused
    assert len(left[LIVE]) == 3


def test_on_cgroup_v2_with_the_manager_off_nothing_is_touched(tmp_path: Path) -> None:
    mount = v1_host(tmp_path)
    asyncio.run(manager(mount, v1=False).clean_orphans(keep=lambda uid: False))
    assert sorted(pod_cgroups(["na"], mount)) == [GONE, LIVE, ORPHAN]


def test_one_pods_dirs_are_named_not_searched(tmp_path: Path) -> None:
    """Removing one pod looks where its dirs would be (every hierarchy once, every QoS tier)
    instead of listing every pod's: a churn profile had the listing at 7 % of the agent."""
    mount = v1_host(tmp_path)
    dirs = pod_dirs(GONE, ["na"], mount)
    assert len(dirs) == 3 * 3  # cpu,cpuacct, memory, pids; guaranteed, besteffort, burstable
    assert {d for d in dirs if d.exists()} == set(pod_cgroups(["na"], mount)[GONE])
    asyncio.run(manager(mount).remove_pod(LIVE))  # in use: refused, nothing else touched
    assert sorted(pod_cgroups(["na"], mount)) == [GONE, LIVE, ORPHAN]

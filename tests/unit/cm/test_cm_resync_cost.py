"""What a resync of unchanged pods costs the container manager, counted: with 110
pods each pod's periodic sync calls ``ensure_pod``; it must neither recompute the QoS tiers
over every pod nor write a cgroup file, and the Burstable ``cpu.weight`` must still follow
every change of the pod set and of a pod's requests."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest
from bounded import call_budget

from nodeagent.cm import manager as cm_manager
from nodeagent.cm.cgroupfs import CgroupFs, files_vanish_rmdir
from nodeagent.cm.manager import CmSettings, ContainerManager
from nodeagent.cm.policy import NodeResources, shares_to_weight
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

GIB = 1 << 30
PODS = 110


class CountingFs(CgroupFs):
    """The real tree in a temporary directory, counting the files written."""

    def __init__(self, mount: Path) -> None:
        super().__init__(mount=mount, rmdir=files_vanish_rmdir)
        self.writes: list[tuple[str, str]] = []

    def write(self, cgroup: str, files: Mapping[str, str]) -> None:
        self.writes.extend((cgroup.strip("/"), name) for name in files)
        super().write(cgroup, files)


def make(tmp_path: Path, **kw: object) -> tuple[ContainerManager, CountingFs]:
    async def driver() -> CgroupDriver:
        return "cgroupfs"

    fs = CountingFs(tmp_path)
    settings = CmSettings(
        enabled=True,
        node=NodeResources(milli_cpu=64_000, memory=64 * GIB),
        pod_pids_limit=100,
        swap_state=tmp_path / "swap-state.json",
        **kw,  # type: ignore[arg-type]
    )
    return ContainerManager(settings=settings, driver=driver, fs=fs), fs


def burstable(i: int, cpu: str = "100m") -> Pod:
    return pod(
        f"b{i}",
        uid=f"00000000-0000-0000-0000-{i:012d}",
        containers=[container("app", requests={"cpu": cpu}, limits={"memory": "64Mi"})],
    )


def weight(tmp_path: Path) -> str:
    return (tmp_path / "kubepods/burstable/cpu.weight").read_text().strip()


@pytest.mark.parametrize("reserve", [None, 50])
async def test_a_resync_of_110_unchanged_pods_recomputes_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserve: int | None
) -> None:
    cm, fs = make(tmp_path, memory_reserve_percent=reserve)
    pods = [burstable(i) for i in range(PODS)]
    for p in pods:
        await cm.ensure_pod(p, widen_only=True)
        await cm.ensure_pod(p)
    assert weight(tmp_path) == str(shares_to_weight(PODS * 100 * 1024 // 1000))

    recomputed: list[int] = []
    real = cm_manager.qos_configs_from

    def counting(*args: object, **kw: object) -> object:
        recomputed.append(1)
        return real(*args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(cm_manager, "qos_configs_from", counting)
    fs.writes.clear()
    written = cm.limits_written  # what the stats sampler watches to read limits again
    # One resync round of every pod (widen_only first, as the pod sync calls it). Each call
    # stays a handful of Python calls whatever the number of pods: before the manager kept each
    # pod's share, every one summed the requests of all 110 pods (~2,000 calls per sync,
    # 200,000 per round).
    with call_budget(PODS * 40) as work:
        for p in pods:
            await cm.ensure_pod(p, widen_only=True)
            await cm.ensure_pod(p)
    assert recomputed == []
    assert fs.writes == []
    assert cm.limits_written == written
    await cm.ensure_pod(burstable(PODS))  # a new pod's cgroup: the sampler must look again
    assert cm.limits_written > written
    assert work.calls <= PODS * 40


async def test_the_burstable_weight_follows_pods_added_resized_and_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm, fs = make(tmp_path)
    a, b = burstable(1), burstable(2)
    await cm.ensure_pod(a)
    await cm.ensure_pod(b)
    assert weight(tmp_path) == str(shares_to_weight(200 * 1024 // 1000))

    # A new pod object with the same requests (a status update): no recompute visible as a
    # write, and the value is unchanged.
    fs.writes.clear()
    await cm.ensure_pod(burstable(1))
    assert ("kubepods/burstable", "cpu.weight") not in fs.writes

    # Resized (a new object with a larger request): the weight moves at once, written once.
    await cm.ensure_pod(burstable(2, cpu="900m"))
    assert weight(tmp_path) == str(shares_to_weight(1000 * 1024 // 1000))
    assert fs.writes.count(("kubepods/burstable", "cpu.weight")) == 1

    await cm.remove_pod(a.uid)
    assert weight(tmp_path) == str(shares_to_weight(900 * 1024 // 1000))
    await cm.remove_pod(b.uid)
    assert weight(tmp_path) == "1"


async def test_a_failed_tier_write_is_retried_on_the_next_resync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cm, _fs = make(tmp_path)
    await cm.setup()
    real = CountingFs.write
    failing = {"on": True}

    def write(self: CountingFs, cgroup: str, files: Mapping[str, str]) -> None:
        if failing["on"] and cgroup.strip("/") == "kubepods/burstable":
            raise OSError(16, "busy")
        real(self, cgroup, files)

    monkeypatch.setattr(CountingFs, "write", write)
    a = burstable(1, cpu="500m")
    with pytest.raises(OSError):
        await cm.ensure_pod(a)
    failing["on"] = False
    await cm.ensure_pod(a)  # the same pod object: a resync
    assert weight(tmp_path) == str(shares_to_weight(512))

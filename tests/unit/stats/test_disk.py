"""The pods' disk figures in the Summary: the ``volume`` list and ``ephemeral-storage`` (the
writable layers and logs the runtime and the log directories give, the local ephemeral
volumes, ``etc-hosts``, pod-level log files), walked at most once per interval."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from pathlib import Path
from typing import Any

import pytest

from nodeagent.clock import FrozenClock
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME
from nodeagent.stats.disk import PodDisk, Usage, VolumeStats, VolumeUsage, disk_usage
from nodeagent.stats.node import FsSample, NodeSample
from nodeagent.stats.summary import StatsProvider
from nodeagent.testing.fake_runtime import FakeRuntime

Mi = 2**20
IMAGE = "localhost:5000/busybox:1.36"
T0 = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)
pytestmark = pytest.mark.looptime

FS = FsSample(capacity=100 * Mi, available=40 * Mi, used=60 * Mi, inodes=1000, inodes_free=400)


def write(path: Path, size: int) -> int:
    """A file of ``size`` real bytes; returns the blocks it takes, in bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.write(os.urandom(size))
        f.flush()
        os.fsync(f.fileno())
    return os.lstat(path).st_blocks * 512


def blocks(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


async def sample() -> NodeSample:
    return NodeSample(
        cpu_ns=10**12,
        memory_total=8 * 2**30,
        memory_free=2 * 2**30,
        inactive_file=2**30,
        anon=2**29,
        page_faults=1,
        major_page_faults=0,
        fs=FS,
        boot_time=T0.timestamp() - 3600,
    )


async def pod_with_writer(runtime: FakeRuntime, uid: str) -> str:
    runtime.publish(IMAGE)
    await runtime.pull_image(IMAGE)
    sandbox = cri.sandbox_config(name="web", namespace="default", uid=uid)
    sid = await runtime.run_pod_sandbox(sandbox)
    cid = await runtime.create_container(
        sid,
        cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="app"),
            image=cri.ImageSpec(image=IMAGE),
            labels={CONTAINER_NAME: "app"},
        ),
        sandbox,
    )
    await runtime.start_container(cid)
    return cid


def test_disk_usage_counts_blocks_once_per_inode(tmp_path: Path) -> None:
    top = tmp_path / "vol"
    a = write(top / "a", 100_000)
    b = write(top / "sub" / "b", 50_000)
    os.link(top / "a", top / "sub" / "a-again")
    (top / "link").symlink_to("/etc")
    got = disk_usage(str(top))
    assert got is not None
    dirs = blocks(top) + blocks(top / "sub")
    assert got.used == dirs + a + b + blocks(top / "link")
    assert got.inodes == 5  # vol, sub, a, b, link (a-again is a)
    assert disk_usage(str(tmp_path / "gone")) is None


def test_only_disk_emptydirs_configmaps_etc_hosts_and_pod_logs_are_ephemeral() -> None:
    disk = PodDisk(
        volumes=(
            VolumeUsage("scratch", Usage(4 * Mi, 2), FS, ephemeral=True),
            VolumeUsage("cm", Usage(8192, 3), FS, ephemeral=True),
            VolumeUsage("token", Usage(12288, 4), None, ephemeral=False),
        ),
        etc_hosts=Usage(4096, 1),
        pod_logs=Usage(4096, 1),
    )
    assert disk.ephemeral == Usage(4 * Mi + 16384, 7)


async def test_the_summary_adds_up_the_pods_ephemeral_storage(tmp_path: Path) -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    cid = await pod_with_writer(runtime, "u1")
    runtime.writable[cid] = (3 * Mi, 12)
    root, logs = tmp_path / "root", tmp_path / "logs"
    pod = root / "pods" / "u1"
    scratch = write(pod / "volumes/kubernetes.io~empty-dir/scratch/data", 2 * Mi)
    scratch += blocks(pod / "volumes/kubernetes.io~empty-dir/scratch")
    cm = write(pod / "volumes/kubernetes.io~configmap/config/app.conf", 5000)
    cm += blocks(pod / "volumes/kubernetes.io~configmap/config")
    token = write(pod / "volumes/kubernetes.io~projected/token/token", 900)
    token += blocks(pod / "volumes/kubernetes.io~projected/token")
    hosts = write(pod / "etc-hosts", 200)
    log_dir = logs / "default_web_u1"
    app_log = write(log_dir / "app" / "0.log", 10_000)  # the files, not the directory
    pod_log = write(log_dir / "pod.log", 3000)
    volumes = VolumeStats(root_dir=str(root), clock=clock, interval=10.0)
    provider = StatsProvider(
        runtime=runtime,
        clock=clock,
        node_name="n1",
        sample_node=sample,
        pod_logs_dir=str(logs),
        volumes=volumes,
        root_dir=str(root),
    )
    [stats] = (await provider.summary())["pods"]
    [app] = stats["containers"]
    assert app["rootfs"]["usedBytes"] == 3 * Mi
    assert app["logs"]["usedBytes"] == app_log
    by_name = {v["name"]: v for v in stats["volume"]}
    assert sorted(by_name) == ["config", "scratch", "token"]
    assert by_name["scratch"] == {
        "time": "2026-11-25T04:00:00Z",
        "availableBytes": FS.available,
        "capacityBytes": FS.capacity,
        "inodesFree": FS.inodes_free,
        "inodes": FS.inodes,
        "usedBytes": scratch,
        "inodesUsed": 2,
        "name": "scratch",
    }
    assert by_name["token"]["usedBytes"] == token
    eph = stats["ephemeral-storage"]
    # the projected token is not local ephemeral storage
    assert eph["usedBytes"] == 3 * Mi + app_log + scratch + cm + hosts + pod_log
    assert eph["inodesUsed"] == 12 + 1 + 2 + 2 + 1 + 1  # rootfs, log, scratch, cm, hosts, pod log
    assert eph["capacityBytes"] == FS.capacity

    # within the interval the walk is not repeated; after it, it is (the configMap's figure,
    # as the kubelet's CachedMetrics, stays)
    more = write(pod / "volumes/kubernetes.io~empty-dir/scratch/more", Mi)
    write(pod / "volumes/kubernetes.io~configmap/config/other.conf", 5000)
    await asyncio.sleep(5)

    async def figures() -> dict[str, Any]:
        [again] = (await provider.summary())["pods"]
        return {v["name"]: v["usedBytes"] for v in again["volume"]}

    assert (await figures())["scratch"] == scratch
    await asyncio.sleep(6)
    now = await figures()
    assert now["scratch"] == scratch + more
    assert now["config"] == cm


async def test_a_new_pod_is_measured_at_once_and_a_gone_one_dropped(tmp_path: Path) -> None:
    clock = FrozenClock(T0)
    volumes = VolumeStats(root_dir=str(tmp_path), clock=clock, interval=10.0)
    a = write(tmp_path / "pods/a/volumes/kubernetes.io~empty-dir/x/f", 10_000)
    first = await volumes.current({"a": None}, FS)
    assert first["a"].volumes[0].usage.used >= a
    b = write(tmp_path / "pods/b/volumes/kubernetes.io~empty-dir/y/f", 20_000)
    await asyncio.sleep(1)
    second = await volumes.current({"a": None, "b": None}, FS)
    assert second["b"].volumes[0].usage.used >= b
    await asyncio.sleep(10)
    third = await volumes.current({"b": None}, FS)
    assert list(third) == ["b"]

"""cgroup v2 stats with PSI: parsing, the tree walk for both drivers, the Summary's PSI fields
and /metrics/cadvisor, from a cgroup tree written in a temporary directory."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import prometheus_client
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.clock import FrozenClock
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_NAME, POD_NAMESPACE
from nodeagent.stats.cgroup import (
    MEMORY_STAT_KEYS,
    CgroupSample,
    container_id_from_dir,
    parse_flat_keyed,
    parse_io_stat,
    parse_psi,
    pod_uid_from_dir,
    read_cgroup,
    sample_tree,
)
from nodeagent.stats.housekeeping import CgroupStats
from nodeagent.stats.http import STATS, routes
from nodeagent.stats.node import FsSample, NodeSample, processes_from_loadavg
from nodeagent.stats.summary import StatsProvider
from nodeagent.testing.fake_runtime import FakeRuntime

T0 = dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC)
UID = "0b5e9c2a-1d3f-4e5a-9b7c-123456789abc"
IMAGE = "localhost:5000/busybox:1.36"
CPU_PSI = (
    "some avg10=12.50 avg60=8.00 avg300=2.00 total=4000000\n"
    "full avg10=1.00 avg60=0.50 avg300=0.10 total=250000\n"
)
MEM_PSI = (
    "some avg10=30.00 avg60=20.00 avg300=5.00 total=9000000\n"
    "full avg10=25.00 avg60=15.00 avg300=4.00 total=7000000\n"
)
IO_PSI = (
    "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\n"
    "full avg10=0.00 avg60=0.00 avg300=0.00 total=5\n"
)


def write_cgroup(path: Path, *, usage_usec: int, current: int, inactive: int, pids: int) -> None:
    path.mkdir(parents=True, exist_ok=True)
    (path / "cpu.stat").write_text(
        f"usage_usec {usage_usec}\nuser_usec {usage_usec // 2}\nsystem_usec {usage_usec // 2}\n"
        "nr_periods 100\nnr_throttled 40\nthrottled_usec 1500000\n"
    )
    (path / "memory.current").write_text(f"{current}\n")
    (path / "memory.max").write_text("max\n" if pids > 5 else f"{256 * 2**20}\n")
    (path / "memory.stat").write_text(
        f"anon {current // 2}\nfile {current // 4}\ninactive_file {inactive}\n"
        "file_mapped 4096\npgfault 77\npgmajfault 3\n"
    )
    (path / "io.stat").write_text(
        "8:0 rbytes=1000 wbytes=2000 rios=3 wios=4 dbytes=0 dios=0\n"
        "8:16 rbytes=10 wbytes=20 rios=1 wios=1 dbytes=0 dios=0\n"
    )
    (path / "pids.current").write_text(f"{pids}\n")
    (path / "pids.max").write_text("max\n")
    (path / "cpu.pressure").write_text(CPU_PSI)
    (path / "memory.pressure").write_text(MEM_PSI)
    (path / "io.pressure").write_text(IO_PSI)


def systemd_tree(root: Path, container_id: str) -> tuple[Path, Path]:
    write_cgroup(root, usage_usec=10**9, current=0, inactive=0, pids=500)
    kubepods = root / "kubepods.slice"
    write_cgroup(kubepods, usage_usec=10**8, current=2**30, inactive=2**28, pids=60)
    qos = kubepods / "kubepods-burstable.slice"
    write_cgroup(qos, usage_usec=10**7, current=2**29, inactive=0, pids=10)
    pod = qos / f"kubepods-burstable-pod{UID.replace('-', '_')}.slice"
    write_cgroup(pod, usage_usec=5_000_000, current=300 * 2**20, inactive=20 * 2**20, pids=3)
    ctr = pod / f"cri-containerd-{container_id}.scope"
    write_cgroup(ctr, usage_usec=4_000_000, current=280 * 2**20, inactive=10 * 2**20, pids=2)
    return pod, ctr


def test_psi_parsing_keeps_the_kernel_microseconds() -> None:
    psi = parse_psi(CPU_PSI)
    assert psi is not None
    assert (psi.some.avg10, psi.some.avg60, psi.some.avg300, psi.some.total) == (
        12.5,
        8.0,
        2.0,
        4_000_000,
    )
    assert psi.full.total == 250_000
    only_some = parse_psi("some avg10=1.00 avg60=0.00 avg300=0.00 total=7\n")
    assert only_some is not None and only_some.full.total == 0
    assert parse_psi("garbage\n") is None


def test_io_stat_is_summed_over_devices() -> None:
    text = "8:0 rbytes=1000 wbytes=2000 rios=3 wios=4\n8:16 rbytes=10 wbytes=20 rios=1 wios=1\n"
    assert parse_io_stat(text) == {"rbytes": 1010, "wbytes": 2020, "rios": 4, "wios": 5}


@pytest.mark.parametrize(
    ("name", "uid"),
    [
        (f"pod{UID}", UID),
        (f"kubepods-burstable-pod{UID.replace('-', '_')}.slice", UID),
        (f"kubepods-pod{UID.replace('-', '_')}.slice", UID),
        ("kubepods-besteffort.slice", None),
        ("burstable", None),
    ],
)
def test_pod_directories_of_both_drivers(name: str, uid: str | None) -> None:
    assert pod_uid_from_dir(name) == uid


def test_container_directories_of_both_drivers() -> None:
    cid = "a" * 64
    assert container_id_from_dir(cid) == cid
    assert container_id_from_dir(f"cri-containerd-{cid}.scope") == cid
    assert container_id_from_dir("crio-conmon-x.scope") is None


def test_read_cgroup_working_set_rss_and_limits(tmp_path: Path) -> None:
    write_cgroup(tmp_path, usage_usec=5, current=1000, inactive=300, pids=3)
    cg = read_cgroup(str(tmp_path))
    assert cg.usage_ns == 5000
    assert cg.working_set == 700
    assert cg.memory["anon"] == 500
    assert cg.memory_max == 256 * 2**20
    assert cg.pids_current == 3 and cg.pids_max is None
    assert set(cg.psi) == {"cpu", "memory", "io"}
    assert read_cgroup(str(tmp_path / "missing")).usage_ns is None


def test_loadavg_task_count() -> None:
    assert processes_from_loadavg("0.52 0.58 0.59 3/457 12345\n") == 457
    assert processes_from_loadavg("") is None


def test_tree_walk_finds_pods_and_containers(tmp_path: Path) -> None:
    cid = "b" * 64
    pod, ctr = systemd_tree(tmp_path / "cg", cid)
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    (pressure / "cpu").write_text(CPU_PSI)
    (pressure / "memory").write_text(MEM_PSI)
    (pressure / "io").write_text(IO_PSI)
    tree = sample_tree(
        monotonic=1.0, timestamp_ns=1, root=str(tmp_path / "cg"), proc_pressure=str(pressure)
    )
    assert set(tree.pods) == {UID}
    assert tree.pod_paths[UID] == str(pod)
    assert set(tree.containers) == {cid}
    assert tree.container_paths[cid] == str(ctr)
    assert tree.kubepods is not None and tree.kubepods.working_set == 2**30 - 2**28
    assert tree.node_psi["memory"].some.total == 9_000_000


class Node:
    async def sample(self) -> NodeSample:
        return NodeSample(
            cpu_ns=10**12,
            memory_total=2 * 2**30,
            memory_free=2**29,
            inactive_file=2**28,
            anon=2**28,
            page_faults=1,
            major_page_faults=0,
            fs=FsSample(capacity=100, available=40, used=60, inodes=10, inodes_free=4),
            boot_time=T0.timestamp() - 3600,
            max_pid=32768,
            processes=300,
        )


async def pod_with_container(runtime: FakeRuntime) -> str:
    runtime.publish(IMAGE)
    await runtime.pull_image(IMAGE)
    sandbox = cri.sandbox_config(name="hog", namespace="default", uid=UID)
    sid = await runtime.run_pod_sandbox(sandbox)
    cid = await runtime.create_container(
        sid,
        cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="cpu"),
            image=cri.ImageSpec(image=IMAGE),
            labels={CONTAINER_NAME: "cpu", POD_NAME: "hog", POD_NAMESPACE: "default"},
        ),
        sandbox,
    )
    await runtime.start_container(cid)
    return cid


async def provider_over(tmp_path: Path) -> tuple[StatsProvider, CgroupStats, Path, str]:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    cid = await pod_with_container(runtime)
    root = tmp_path / "cg"
    _, ctr = systemd_tree(root, cid)
    pressure = tmp_path / "pressure"
    pressure.mkdir()
    (pressure / "cpu").write_text(CPU_PSI)
    (pressure / "memory").write_text(MEM_PSI)
    (pressure / "io").write_text(IO_PSI)
    sampler = CgroupStats(clock=clock, enabled=True, root=str(root), proc_pressure=str(pressure))
    provider = StatsProvider(
        runtime=runtime,
        clock=clock,
        node_name="n1",
        sample_node=Node().sample,
        cgroups=sampler,
        image_fs=runtime.image_fs_info,
        max_sample_age=20.0,
        pod_logs_dir=str(tmp_path / "pods"),
    )
    logs = tmp_path / "pods" / f"default_hog_{UID}" / "cpu"
    logs.mkdir(parents=True)
    (logs / "0.log").write_bytes(b"x" * 10_000)
    await sampler.housekeeping()
    clock.advance(10)
    (ctr / "cpu.stat").write_text("usage_usec 9000000\nnr_periods 200\nnr_throttled 150\n")
    await sampler.housekeeping()
    return provider, sampler, ctr, cid


async def test_summary_has_psi_from_the_cgroups(tmp_path: Path) -> None:
    provider, _, _, _ = await provider_over(tmp_path)
    summary = await provider.summary()
    node = summary["node"]
    assert node["cpu"]["psi"]["some"] == {
        "total": 4_000_000,
        "avg10": 12.5,
        "avg60": 8.0,
        "avg300": 2.0,
    }
    assert node["memory"]["psi"]["full"]["total"] == 7_000_000
    assert node["io"]["psi"]["full"]["total"] == 5
    assert node["rlimit"] == {"time": "2026-11-25T04:00:10Z", "maxpid": 32768, "curproc": 300}
    assert node["runtime"]["imageFs"]["usedBytes"] >= 0
    [pods_container] = node["systemContainers"]
    assert pods_container["name"] == "pods"
    assert pods_container["memory"]["workingSetBytes"] == 2**30 - 2**28
    [pod] = summary["pods"]
    assert pod["cpu"]["usageCoreNanoSeconds"] == 5_000_000_000
    assert pod["cpu"]["psi"]["some"]["avg10"] == 12.5
    assert pod["memory"]["workingSetBytes"] == 280 * 2**20
    assert pod["memory"]["rssBytes"] == 150 * 2**20
    assert pod["memory"]["pageFaults"] == 77
    assert pod["io"]["psi"]["some"]["total"] == 10
    assert pod["process_stats"] == {"process_count": 3}
    [container] = pod["containers"]
    # 9 s - 4 s of cpu over 10 s between the two housekeeping passes: half a core
    assert container["cpu"]["usageNanoCores"] == 500_000_000
    assert container["cpu"]["usageCoreNanoSeconds"] == 9_000_000_000
    assert container["memory"]["availableBytes"] == 0  # working set above memory.max
    assert container["memory"]["psi"]["some"]["total"] == 9_000_000
    assert container["logs"]["usedBytes"] >= 10_000
    assert container["logs"]["inodesUsed"] == 1
    assert container["logs"]["capacityBytes"] == 100


async def test_cadvisor_metrics_names_and_labels(tmp_path: Path) -> None:
    provider, _, ctr, cid = await provider_over(tmp_path)
    text = await provider.cadvisor()
    ms = int((T0 + dt.timedelta(seconds=10)).timestamp() * 1000)
    cgroup_id = str(ctr).removeprefix(str(tmp_path / "cg"))
    labels = (
        f'container="cpu",id="{cgroup_id}",image="{IMAGE}",name="{cid}",'
        'namespace="default",pod="hog"'
    )
    assert f"container_cpu_usage_seconds_total{{{labels}}} 9 {ms}" in text
    assert f"container_cpu_cfs_throttled_periods_total{{{labels}}} 150 {ms}" in text
    assert f"container_pressure_cpu_waiting_seconds_total{{{labels}}} 4 {ms}" in text
    assert f"container_pressure_cpu_stalled_seconds_total{{{labels}}} 0.25 {ms}" in text
    assert f"container_pressure_memory_stalled_seconds_total{{{labels}}} 7 {ms}" in text
    assert f"container_memory_working_set_bytes{{{labels}}} {270 * 2**20} {ms}" in text
    assert f"container_memory_rss{{{labels}}} {140 * 2**20} {ms}" in text
    pod_labels = 'container="",id="/kubepods.slice/kubepods-burstable.slice/'
    assert pod_labels in text
    assert 'container_cpu_usage_seconds_total{container="",id="/",image=""' in text
    assert "# TYPE container_pressure_io_waiting_seconds_total counter" in text


async def test_cgroup_v1_host_keeps_to_cri(tmp_path: Path) -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    await pod_with_container(runtime)
    sampler = CgroupStats(clock=clock, enabled=False, root=str(tmp_path))
    provider = StatsProvider(
        runtime=runtime, clock=clock, node_name="n1", sample_node=Node().sample, cgroups=sampler
    )
    summary = await provider.summary()
    assert "psi" not in summary["node"]["cpu"]
    assert "io" not in summary["pods"][0]
    assert await provider.cadvisor() == ""


async def test_cadvisor_over_http(tmp_path: Path) -> None:
    provider, _, _, _ = await provider_over(tmp_path)
    app = web.Application()
    app.add_routes(routes)
    app[STATS] = provider
    async with TestClient(TestServer(app)) as client:
        r = await client.get("/metrics/cadvisor")
        assert r.status == 200
        assert r.content_type == "text/plain"
        text = await r.text()
    assert "# TYPE container_pressure_memory_stalled_seconds_total counter" in text


async def test_each_housekeeping_pass_is_counted_on_metrics(tmp_path: Path) -> None:
    """``nodeagent_stats_housekeeping_*`` on /metrics: one more pass observed, the thread's CPU
    added, and the cgroups the pass read (root, kubepods, one pod, its container)."""
    registry = prometheus_client.REGISTRY
    name = "nodeagent_stats_housekeeping"
    passes = registry.get_sample_value(f"{name}_duration_seconds_count") or 0.0
    cpu = registry.get_sample_value(f"{name}_cpu_seconds_total") or 0.0
    _, sampler, _, _ = await provider_over(tmp_path)  # two passes
    assert registry.get_sample_value(f"{name}_duration_seconds_count") == passes + 2
    assert (registry.get_sample_value(f"{name}_cpu_seconds_total") or 0.0) > cpu
    assert registry.get_sample_value(f"{name}_cgroups") == 4
    assert sampler.pass_seconds > 0


async def test_pod_cgroups_spare_the_runtime_pod_stats_call(tmp_path: Path) -> None:
    """On cgroup v2 a pod's figures come from its cgroup, so ListPodSandboxStats (which the
    summary would throw away) is not asked for while every pod's cgroup was sampled."""
    provider, _, _, _ = await provider_over(tmp_path)
    runtime = provider._runtime
    assert isinstance(runtime, FakeRuntime)
    runtime.calls.clear()
    summary = await provider.summary()
    pod = summary["pods"][0]
    assert pod["cpu"]["usageCoreNanoSeconds"] == 5_000_000_000  # the pod cgroup's usage_usec
    assert pod["memory"]["workingSetBytes"] == 280 * 2**20  # memory.current - inactive_file
    assert "ListPodSandboxStats" not in runtime.calls
    assert "ListContainerStats" in runtime.calls  # still there: the writable layer's usage


def test_fast_parsers_agree_with_the_general_ones(tmp_path: Path) -> None:
    """memory.stat's kept keys by one regex scan, PSI by the kernel's line format (with the
    general parser for anything else), whole files by os.read however long."""
    stat = "".join(f"{k} {i}\n" for i, k in enumerate(["anon", "x_anon", "file", "pgfault"]))
    assert parse_flat_keyed(stat, MEMORY_STAT_KEYS) == {"anon": 0, "file": 2, "pgfault": 3}
    loose = "some avg60=1.5 avg10=2 avg300=0 total=7\n"  # not the kernel's layout
    psi = parse_psi(loose)
    assert psi is not None and (psi.some.avg10, psi.some.avg60, psi.some.total) == (2.0, 1.5, 7)
    big = tmp_path / "io.stat"
    text = "".join(f"8:{i} rbytes=1 wbytes=2 rios=3 wios=4 dbytes=0 dios=0\n" for i in range(3000))
    big.write_text(text)
    assert read_cgroup(str(tmp_path)).io["rbytes"] == 3000
    assert read_cgroup(str(tmp_path / "gone")) == CgroupSample()

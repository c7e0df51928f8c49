"""Pod CPU and memory on a cgroup v1 host, from the pod cgroups' files (as cAdvisor reads them
for the kubelet) instead of ListPodSandboxStats: parsing, the directory layout, and the
Summary built from a v1 tree written in a temporary directory."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from test_cgroup_stats import UID, Node, pod_with_container  # the same pod and node

from nodeagent.clock import FrozenClock
from nodeagent.stats.cgroupv1 import V1PodCgroups, memory_fields
from nodeagent.stats.summary import StatsProvider
from nodeagent.testing.fake_runtime import FakeRuntime

T0 = dt.datetime(2026, 11, 28, 12, 0, 0, tzinfo=dt.UTC)
V1_UNLIMITED = 9223372036854771712  # what a v1 memory cgroup without a limit shows
MEMORY_STAT = """\
cache 0
rss 0
pgfault 12
pgmajfault 1
total_cache 52428800
total_rss 31457280
total_inactive_file 41943040
total_pgfault 90000
total_pgmajfault 30
"""


def write_pod(
    mount: Path, qos: str, uid: str, *, cpu_ns: int, usage: int, limit: int, root: str = ""
) -> None:
    parts = [p for p in root.split("/") if p]
    for controller, files in (
        ("cpuacct", {"cpuacct.usage": f"{cpu_ns}\n"}),
        (
            "memory",
            {
                "memory.usage_in_bytes": f"{usage}\n",
                "memory.limit_in_bytes": f"{limit}\n",
                "memory.stat": MEMORY_STAT,
            },
        ),
    ):
        pod = mount.joinpath(controller, *parts, "kubepods", *([qos] if qos else []), f"pod{uid}")
        pod.mkdir(parents=True)
        for name, text in files.items():
            (pod / name).write_text(text)


def test_working_set_rss_and_faults_are_cadvisors_v1_figures() -> None:
    fields = memory_fields(104857600, V1_UNLIMITED, MEMORY_STAT)

    assert fields == {
        "usageBytes": 104857600,
        "workingSetBytes": 104857600 - 41943040,  # usage less total_inactive_file
        "rssBytes": 31457280,  # total_rss
        "pageFaults": 12,  # the pod cgroup's own, as the kubelet takes ContainerData
        "majorPageFaults": 1,
    }  # no availableBytes without a limit


def test_available_bytes_only_under_a_limit_and_never_below_zero() -> None:
    assert memory_fields(100 * 2**20, 128 * 2**20, MEMORY_STAT)["availableBytes"] == (
        128 * 2**20 - (100 * 2**20 - 41943040)
    )
    assert memory_fields(200 * 2**20, 64 * 2**20, "")["availableBytes"] == 0
    assert memory_fields(10, 10, "total_inactive_file 20\n")["workingSetBytes"] == 0


def test_pods_are_found_in_every_qos_tier_below_the_cgroup_root(tmp_path: Path) -> None:
    write_pod(tmp_path, "", "g", cpu_ns=1, usage=10, limit=100, root="/na-node")
    write_pod(tmp_path, "burstable", "b", cpu_ns=2, usage=20, limit=V1_UNLIMITED, root="/na-node")
    write_pod(tmp_path, "besteffort", "e", cpu_ns=3, usage=30, limit=V1_UNLIMITED, root="/na-node")
    write_pod(tmp_path, "burstable", "other-root", cpu_ns=4, usage=40, limit=100)

    found = V1PodCgroups(cgroup_root="/na-node", mount=tmp_path).read({"g", "b", "e", "gone"})

    assert {uid: u.cpu_ns for uid, u in found.items()} == {"g": 1, "b": 2, "e": 3}
    assert found["g"].memory["availableBytes"] == 100  # limit 100, working set 0
    assert "availableBytes" not in found["b"].memory


def test_a_pod_whose_cgroup_is_half_gone_is_left_out(tmp_path: Path) -> None:
    write_pod(tmp_path, "burstable", UID, cpu_ns=5, usage=50, limit=V1_UNLIMITED)
    (tmp_path / "memory" / "kubepods" / "burstable" / f"pod{UID}" / "memory.stat").unlink()

    assert V1PodCgroups(mount=tmp_path).read({UID}) == {}


async def test_the_summary_takes_v1_pod_cgroups_and_spares_list_pod_sandbox_stats(
    tmp_path: Path,
) -> None:
    """ListPodSandboxStats cost containerd 1.35 s a call with 100 pods on this v1 host; the pod
    cgroup's files give the same figures, the CPU rate from two passes."""
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    await pod_with_container(runtime)
    mount = tmp_path / "cg"
    write_pod(mount, "burstable", UID, cpu_ns=4_000_000_000, usage=100 * 2**20, limit=V1_UNLIMITED)
    provider = StatsProvider(
        runtime=runtime,
        clock=clock,
        node_name="n1",
        sample_node=Node().sample,
        v1_pods=V1PodCgroups(mount=mount),
    )
    await provider.summary()
    clock.advance(10)
    (mount / "cpuacct" / "kubepods" / "burstable" / f"pod{UID}" / "cpuacct.usage").write_text(
        "9000000000\n"
    )
    runtime.calls.clear()

    [pod] = (await provider.summary())["pods"]

    assert pod["cpu"] == {
        "time": "2026-11-28T12:00:10Z",
        "usageNanoCores": 500_000_000,  # 5 s of CPU over 10 s
        "usageCoreNanoSeconds": 9_000_000_000,
    }
    assert pod["memory"]["workingSetBytes"] == 100 * 2**20 - 41943040
    assert pod["memory"]["rssBytes"] == 31457280
    assert "ListPodSandboxStats" not in runtime.calls


async def test_without_the_pods_cgroup_the_runtime_still_answers(tmp_path: Path) -> None:
    clock = FrozenClock(T0)
    runtime = FakeRuntime(clock=clock)
    await pod_with_container(runtime)
    provider = StatsProvider(
        runtime=runtime,
        clock=clock,
        node_name="n1",
        sample_node=Node().sample,
        v1_pods=V1PodCgroups(mount=tmp_path / "empty"),
    )

    [pod] = (await provider.summary())["pods"]

    assert "ListPodSandboxStats" in runtime.calls
    assert "workingSetBytes" in pod["memory"]

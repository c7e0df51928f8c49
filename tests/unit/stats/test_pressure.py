"""The PSI the contention monitor reads: one housekeeping pass in the Summary API's shape."""

from __future__ import annotations

from nodeagent.eviction import contention
from nodeagent.stats.cgroup import CgroupSample, Psi, PsiLine, TreeSample
from nodeagent.stats.pressure import psi_summary


def psi(avg10: float, total: int) -> Psi:
    return Psi(
        some=PsiLine(avg10=avg10 * 2, avg60=avg10, avg300=0.5, total=total * 2),
        full=PsiLine(avg10=avg10, avg60=avg10 / 2, avg300=0.25, total=total),
    )


def line(p: PsiLine) -> dict[str, float | int]:
    return {"total": p.total, "avg10": p.avg10, "avg60": p.avg60, "avg300": p.avg300}


def tree(kubepods: CgroupSample | None) -> TreeSample:
    return TreeSample(
        monotonic=1.0,
        timestamp_ns=1,
        node=CgroupSample(),
        node_psi={"memory": psi(40.0, 100), "io": psi(5.0, 7), "cpu": psi(90.0, 9)},
        kubepods=kubepods,
    )


def test_node_and_pods_memory_and_io_psi_in_the_summarys_shape() -> None:
    pods = CgroupSample(psi={"memory": psi(12.0, 3), "cpu": psi(1.0, 1)})
    got = psi_summary(tree(pods))
    memory = psi(40.0, 100)
    assert got["node"]["memory"] == {"psi": {"full": line(memory.full), "some": line(memory.some)}}
    assert set(got["node"]) == {"memory", "io", "systemContainers"}  # no cpu
    (system,) = got["node"]["systemContainers"]
    assert system["name"] == "pods"
    assert set(system) == {"name", "memory"}
    assert system["memory"]["psi"]["full"] == line(psi(12.0, 3).full)


def test_without_kubepods_there_is_no_pods_container() -> None:
    assert "systemContainers" not in psi_summary(tree(None))["node"]


def test_without_a_pass_there_is_nothing_cgroup_v1() -> None:
    assert psi_summary(None) == {}


def test_the_contention_monitor_reads_what_it_builds() -> None:
    pods = CgroupSample(psi={"memory": psi(12.0, 3), "io": psi(3.0, 4)})
    readings = contention.readings(psi_summary(tree(pods)))
    node_memory = readings[contention.SYSTEM_MEMORY]
    pods_disk = readings[contention.KUBEPODS_DISK]
    assert node_memory is not None
    assert (node_memory.avg10, node_memory.avg60) == (40.0, 20.0)
    assert pods_disk is not None
    assert pods_disk.avg10 == 3.0

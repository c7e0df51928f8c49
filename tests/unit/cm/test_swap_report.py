"""``nodeagent swap report`` rows, the swap state the manager writes, and failSwapOn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from nodeagent.cm.cgroupfs import CgroupFs
from nodeagent.cm.cli import read_back, render, rows
from nodeagent.cm.host import fail_swap_on_refusal, swap_capacity
from nodeagent.cm.manager import CmSettings, ContainerManager
from nodeagent.kuberuntime.podsettings import CgroupDriver
from nodeagent.kuberuntime.resources import SwapInputs
from nodeagent.testing.pods import container, pod

MIB = 1 << 20
GIB = 1 << 30


async def test_manager_writes_each_containers_decision_and_the_report_joins_it(
    tmp_path: Path,
) -> None:
    state = tmp_path / "swap-state.json"

    async def driver() -> CgroupDriver:
        return "cgroupfs"

    cm = ContainerManager(
        settings=CmSettings(
            enabled=False,
            swap=SwapInputs(
                behavior="LimitedSwap",
                cgroup_v2=True,
                controller=True,
                memory_capacity=2 * GIB,
                swap_capacity=256 * MIB,
            ),
            swap_state=state,
        ),
        driver=driver,
        fs=CgroupFs(mount=tmp_path / "cg"),
    )
    p = pod(
        "b",
        uid="uid-b",
        containers=[
            container("hog", requests={"memory": "64Mi"}, limits={"memory": "128Mi"}),
            container("flat", requests={"memory": "64Mi"}, limits={"memory": "64Mi"}),
        ],
    )
    await cm.ensure_pod(p)
    saved = json.loads(state.read_text())
    assert saved["pods"]["uid-b"]["containers"]["hog"]["limit"] == 8 * MIB

    running = [
        {"uid": "uid-b", "container": "hog", "id": "abc", "runtime": str(8 * MIB),
         "cgroup": str(8 * MIB)},
        {"uid": "uid-b", "container": "flat", "id": "def", "runtime": "0", "cgroup": "0"},
        {"uid": "other", "container": "x", "id": "ghi", "runtime": None, "cgroup": None},
    ]  # fmt: skip
    table = rows(saved, running)
    assert [(r["container"], r["sent"], r["cgroup"]) for r in table] == [
        ("flat", "0", "0"),
        ("hog", str(8 * MIB), str(8 * MIB)),
    ]
    hog = table[1]
    assert (hog["request"], hog["memory_capacity"], hog["swap_capacity"], hog["qos"]) == (
        64 * MIB,
        2 * GIB,
        256 * MIB,
        "Burstable",
    )
    text = render(table)
    assert text.splitlines()[0].split()[:4] == ["POD", "CONTAINER", "QOS", "BEHAVIOR"]
    assert "memory request equals limit: NoSwap" in text

    await cm.remove_pod("uid-b")
    assert json.loads(state.read_text()) == {"pods": {}}


def test_read_back_follows_the_process_cgroup(tmp_path: Path) -> None:
    proc, mount = tmp_path / "proc", tmp_path / "cg"
    (proc / "42").mkdir(parents=True)
    (proc / "42" / "cgroup").write_text("0::/kubepods.slice/x.scope\n")
    (mount / "kubepods.slice/x.scope").mkdir(parents=True)
    (mount / "kubepods.slice/x.scope/memory.swap.max").write_text("8388608\n")
    assert read_back(42, proc=proc, mount=mount) == "8388608"
    assert read_back(43, proc=proc, mount=mount) is None


def test_fail_swap_on(tmp_path: Path) -> None:
    swaps = tmp_path / "swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n/swapfile file 262140 0 -2\n")
    refusal = fail_swap_on_refusal(True, swaps)
    assert refusal is not None and refusal.startswith("running with swap on is not supported")
    assert "/swapfile" in refusal
    assert fail_swap_on_refusal(False, swaps) is None
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n")
    assert fail_swap_on_refusal(True, swaps) is None


def test_swap_capacity_from_meminfo(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 2000 kB\nSwapTotal:     262140 kB\n")
    assert swap_capacity(meminfo) == 262140 * 1024


async def test_parallel_pod_syncs_leave_every_pod_in_the_swap_state(tmp_path: Path) -> None:
    state = tmp_path / "swap-state.json"

    async def driver() -> CgroupDriver:
        return "cgroupfs"

    for _ in range(10):  # the race the lock prevents is not hit every time
        state.unlink(missing_ok=True)
        cm = ContainerManager(
            settings=CmSettings(
                enabled=False,
                swap=SwapInputs(behavior="NoSwap", cgroup_v2=True, controller=True),
                swap_state=state,
            ),
            driver=driver,
        )
        pods = [pod(f"p{i}", uid=f"uid-{i}") for i in range(8)]
        await asyncio.gather(*(cm.ensure_pod(p) for p in pods))
        assert sorted(json.loads(state.read_text())["pods"]) == sorted(p.uid for p in pods)

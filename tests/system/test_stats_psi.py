"""Stats with PSI from the guest's cgroup v2, read as a user would without the kubelet API:
``nodeagent stats summary`` and ``nodeagent stats cadvisor`` on the node.

A pod spinning under ``limits.cpu: 50m`` (``cpu.max`` 5000 100000) is throttled, so its
cgroup's ``cpu.pressure`` grows; a pod reading a 120 MB file over and over under a 40 MiB
memory limit reclaims its own page cache at ``memory.max`` all the time, which PSI counts as
memory stall (anon memory past the limit would only be OOM-killed: containerd gives
containers no swap). The Summary's PSI must be
non-zero and agree with the cgroup files read around it: the cumulative ``total`` the CLI
printed lies between the file's value read just before and just after.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.pods import pod_manifest, wait_pod

pytestmark = pytest.mark.system


def _apply(control_plane: ControlPlane, manifest: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def _running(pod: dict[str, Any]) -> bool:
    return pod.get("status", {}).get("phase") == "Running"


def _container_cgroup(vm: Machine, pod: dict[str, Any]) -> str:
    cid = pod["status"]["containerStatuses"][0]["containerID"].removeprefix("containerd://")
    out = vm.check(f"find /sys/fs/cgroup -maxdepth 5 -type d -name '*{cid}*'")
    paths = out.split()
    assert len(paths) == 1, out
    return paths[0]


def _psi_total(vm: Machine, path: str, resource: str, line: str) -> int:
    text = vm.check(f"cat {path}/{resource}.pressure")
    for row in text.splitlines():
        if row.startswith(line + " "):
            return int(row.rsplit("total=", 1)[1])
    raise AssertionError(f"no {line} line in {path}/{resource}.pressure: {text}")


def _summary_container(summary: dict[str, Any], pod: str) -> dict[str, Any]:
    for p in summary["pods"]:
        if p["podRef"]["name"] == pod:
            return {"pod": p, "container": p["containers"][0]}
    raise AssertionError(f"pod {pod} not in the summary: {[p['podRef'] for p in summary['pods']]}")


def _between(vm: Machine, path: str, resource: str, name: str) -> tuple[int, dict[str, Any], int]:
    before = _psi_total(vm, path, resource, "some")
    summary = json.loads(vm.check(["nodeagent", "stats", "summary"], timeout=120))
    after = _psi_total(vm, path, resource, "some")
    return before, summary, after


def test_cpu_and_memory_pressure_of_pods_in_the_summary(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    del guest_node
    word = secrets.token_hex(3)
    hog, thrash = f"cpu-hog-{word}", f"thrash-{word}"
    _apply(
        control_plane,
        pod_manifest(
            hog,
            command=["sh", "-c", "while :; do :; done"],
            resources={"limits": {"cpu": "50m", "memory": "32Mi"}},
        ),
    )
    _apply(
        control_plane,
        pod_manifest(
            thrash,
            command=[
                "sh",
                "-c",
                "dd if=/dev/zero of=/big bs=1M count=120 2>/dev/null; "
                "while :; do cat /big > /dev/null; done",
            ],
            resources={"limits": {"cpu": "500m", "memory": "40Mi"}},
        ),
    )
    hog_pod = wait_pod(control_plane, hog, _running, what="Running", timeout=180)
    thrash_pod = wait_pod(control_plane, thrash, _running, what="Running", timeout=180)
    hog_cg = _container_cgroup(vm, hog_pod)
    thrash_cg = _container_cgroup(vm, thrash_pod)
    assert vm.check(f"cat {hog_cg}/cpu.max").split() == ["5000", "100000"]

    # Let both stall for a while: PSI's avg10 needs a few seconds of it.
    deadline = time.monotonic() + 120
    while _psi_total(vm, thrash_cg, "memory", "some") == 0 and time.monotonic() < deadline:
        time.sleep(2)
    time.sleep(12)

    before, summary, after = _between(vm, hog_cg, "cpu", hog)
    entry = _summary_container(summary, hog)
    cpu_psi = entry["container"]["cpu"]["psi"]
    assert set(cpu_psi) == {"some", "full"}
    assert set(cpu_psi["some"]) == {"total", "avg10", "avg60", "avg300"}
    assert 0 < before <= cpu_psi["some"]["total"] <= after
    assert cpu_psi["some"]["avg10"] > 0
    assert entry["pod"]["cpu"]["psi"]["some"]["total"] > 0  # the pod's own cgroup
    throttled = int(vm.check(f"grep nr_throttled {hog_cg}/cpu.stat").split()[1])
    assert throttled > 0
    # usage in the summary vs cpu.stat: the hog gets at most 50m of a core
    assert entry["container"]["cpu"]["usageNanoCores"] <= 80_000_000

    before, summary, after = _between(vm, thrash_cg, "memory", thrash)
    entry = _summary_container(summary, thrash)
    mem = entry["container"]["memory"]
    assert 0 < before <= mem["psi"]["some"]["total"] <= after
    assert mem["psi"]["full"]["total"] > 0
    current = int(vm.check(f"cat {thrash_cg}/memory.current"))
    assert mem["usageBytes"] <= 40 * 2**20 and current <= 40 * 2**20
    assert mem["workingSetBytes"] <= mem["usageBytes"]

    node = summary["node"]
    for resource in ("cpu", "memory"):
        assert set(node[resource]["psi"]) == {"some", "full"}
    assert "psi" in node["io"]
    assert node["cpu"]["psi"]["some"]["total"] > 0

    metrics = vm.check(["nodeagent", "stats", "cadvisor"], timeout=120)
    waiting = [
        line
        for line in metrics.splitlines()
        if line.startswith("container_pressure_cpu_waiting_seconds_total{")
        and f'pod="{hog}"' in line
        and 'container="app"' in line
    ]
    assert len(waiting) == 1, metrics[:2000]
    assert float(waiting[0].split()[1]) > 0
    assert "container_cpu_cfs_throttled_periods_total{" in metrics
    assert "container_memory_working_set_bytes{" in metrics

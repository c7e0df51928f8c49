"""PSI contention node conditions (KEP-5394, feature gate ``PSINodeCondition``) on the guest's
Node, seen from the host's apiserver.

- Off (the packaged configuration): no ``*ContentionPressure`` condition appears.
- On, with ``kubepodsMemoryContentionThreshold: 5``: the four conditions appear False; a pod
  re-reading a 120 MB file (written 1 MiB at a time, each flushed) under a 40 MiB memory
  limit reclaims its own page cache at ``memory.max`` all the time (memory stall in PSI), so
  the kubepods cgroup's ``memory.pressure`` ``full`` avg10 and avg60 climb past 5 %:
  KubepodsMemoryContentionPressure turns True (``KubeletHasKubepodsMemoryContentionPressure``)
  with its Node Events. Once the pod is deleted avg60 decays, and the condition turns False
  when it falls below 5 %.

The PSI values seen and the times to each transition are printed (``-s``) for the report.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.guest import main_pid
from harness.vm.pods import join_node, pod_manifest, wait_pod

pytestmark = pytest.mark.system

CONFIG = "/etc/nodeagent/config.yaml"
SAVED = "/root/config.yaml.before-psi-test"
TEST_CONFIG = "/root/config.yaml.psi-test"
THRESHOLD = 5
TYPES = (
    "SystemMemoryContentionPressure",
    "SystemDiskContentionPressure",
    "KubepodsMemoryContentionPressure",
    "KubepodsDiskContentionPressure",
)
KUBEPODS_MEMORY = "KubepodsMemoryContentionPressure"


def _node(control_plane: ControlPlane, node: str) -> dict[str, Any]:
    out = control_plane.kubectl("get", "node", node, "-o", "json").stdout
    result: dict[str, Any] = json.loads(out)
    return result


def _contention(control_plane: ControlPlane, node: str) -> dict[str, dict[str, Any]]:
    conditions = _node(control_plane, node)["status"].get("conditions") or []
    return {c["type"]: c for c in conditions if c["type"].endswith("ContentionPressure")}


def _strip_contention(control_plane: ControlPlane, node: str) -> None:
    """Remove contention conditions an earlier run left on the Node (they outlive the gate,
    as the KEP says), so each test sees only what the agent under test writes."""
    conditions = _node(control_plane, node)["status"].get("conditions") or []
    indices = [i for i, c in enumerate(conditions) if c["type"].endswith("ContentionPressure")]
    if not indices:
        return
    patch = [{"op": "remove", "path": f"/status/conditions/{i}"} for i in reversed(indices)]
    control_plane.kubectl(
        "patch", "node", node, "--subresource=status", "--type=json", "-p", json.dumps(patch)
    )


def _wait(what: str, check: Any, timeout: float, every: float = 2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(every)


def _kubepods(vm: Machine) -> str:
    out = vm.check("ls -d /sys/fs/cgroup/kubepods.slice /sys/fs/cgroup/kubepods 2>/dev/null || :")
    paths = out.split()
    assert paths, "no kubepods cgroup in the guest"
    return paths[0]


def _full(vm: Machine, path: str) -> dict[str, float]:
    for row in vm.check(["cat", path]).splitlines():
        if row.startswith("full "):
            fields = dict(kv.split("=") for kv in row.split()[1:])
            return {k: float(v) for k, v in fields.items() if k.startswith("avg")}
    raise AssertionError(f"no full line in {path}")


def _events(control_plane: ControlPlane, node: str) -> list[dict[str, Any]]:
    out = control_plane.kubectl(
        "get", "events", "-n", "default", "--field-selector",
        f"involvedObject.kind=Node,involvedObject.name={node}", "-o", "json",
    ).stdout  # fmt: skip
    items: list[dict[str, Any]] = json.loads(out)["items"]
    return items


def test_without_the_gate_no_contention_condition_appears(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    config = yaml.safe_load(vm.check(f"cat {CONFIG}")) or {}
    gates = (config.get("kubelet") or {}).get("featureGates") or {}
    assert not gates.get("PSINodeCondition")
    _strip_contention(control_plane, guest_node)
    # two housekeeping intervals and a status update's worth of time: nothing comes back
    time.sleep(25)
    assert _contention(control_plane, guest_node) == {}
    journal = vm.check(f"journalctl --no-pager -o cat _PID={main_pid(vm)}")
    assert journal and "PSI contention conditions enabled" not in journal


@pytest.fixture
def psi_node(
    vm: Machine, nodeagent_deb: Path, control_plane: ControlPlane, guest_node: str
) -> Iterator[str]:
    vm.check(f"cp {CONFIG} {SAVED}")
    config = yaml.safe_load(vm.check(f"cat {CONFIG}")) or {}
    kubelet = config.setdefault("kubelet", {})
    kubelet.setdefault("featureGates", {})["PSINodeCondition"] = True
    kubelet["kubepodsMemoryContentionThreshold"] = THRESHOLD
    vm.put(TEST_CONFIG, yaml.safe_dump(config).encode())
    _strip_contention(control_plane, guest_node)
    join_node(vm, nodeagent_deb, control_plane, "--config", TEST_CONFIG)
    try:
        yield guest_node
    finally:
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", "default", "--grace-period=0", "--force",
            "--wait=false", check=False,
        )  # fmt: skip
        join_node(vm, nodeagent_deb, control_plane, "--config", SAVED)
        vm.run(f"rm -f {SAVED} {TEST_CONFIG}")
        _strip_contention(control_plane, guest_node)


def test_memory_thrasher_turns_kubepods_memory_contention_true_then_false(
    vm: Machine, control_plane: ControlPlane, psi_node: str
) -> None:
    node = psi_node
    kubepods = _kubepods(vm)
    initial = _wait(
        "the four contention conditions",
        lambda: (c := _contention(control_plane, node)) and len(c) == 4 and c,
        timeout=60,
    )
    assert set(initial) == set(TYPES)
    idle = _full(vm, f"{kubepods}/memory.pressure")
    assert initial[KUBEPODS_MEMORY]["status"] == "False", (initial, idle)
    assert initial[KUBEPODS_MEMORY]["reason"] == "KubeletHasNoKubepodsMemoryContentionPressure"
    assert initial[KUBEPODS_MEMORY]["message"] == "kubelet has no KubepodsMemoryContentionPressure"

    thrash = f"psi-thrash-{secrets.token_hex(3)}"
    control_plane.kubectl(
        "apply", "-f", "-",
        input=yaml.safe_dump(
            pod_manifest(
                thrash,
                command=[
                    "sh", "-c",
                    # Written 1 MiB at a time, each flushed: 120 MiB of dirty pages under a
                    # 40 MiB limit stalls the writer in writeback while it holds the guest's
                    # root-fs journal, and under TCG on a busy host that froze the whole guest
                    # for over 20 min. Reading it back, the stall this test wants, dirties
                    # nothing.
                    "for i in $(seq 0 119); do dd if=/dev/zero of=/big bs=1M count=1"
                    " seek=$i conv=notrunc,fsync 2>/dev/null; done; "
                    "while :; do cat /big > /dev/null; done",
                ],
                resources={"limits": {"cpu": "500m", "memory": "40Mi"}},
                grace=1,
            )
        ),
    )  # fmt: skip
    wait_pod(
        control_plane, thrash, lambda p: p.get("status", {}).get("phase") == "Running",
        what="Running", timeout=180,
    )  # fmt: skip
    started = time.monotonic()
    seen: list[dict[str, float]] = []

    def true_now() -> dict[str, Any] | None:
        seen.append(_full(vm, f"{kubepods}/memory.pressure"))
        cond = _contention(control_plane, node)[KUBEPODS_MEMORY]
        return cond if cond["status"] == "True" else None

    cond = _wait(f"{KUBEPODS_MEMORY}=True", true_now, timeout=240, every=3)
    to_true = time.monotonic() - started
    peak = max(s["avg60"] for s in seen)
    assert cond["reason"] == "KubeletHasKubepodsMemoryContentionPressure"
    assert cond["message"] == "kubelet has KubepodsMemoryContentionPressure"
    assert seen[-1]["avg60"] >= THRESHOLD * 0.5, seen[-5:]  # the kernel's figures agree
    reasons = _wait(
        "the node events",
        lambda: (
            {e["reason"] for e in _events(control_plane, node)}
            >= {"ContentionPressureHigh", f"NodeHas{KUBEPODS_MEMORY}"}
            and True
        ),
        timeout=60,
    )
    assert reasons

    control_plane.kubectl("delete", "pod", thrash, "--grace-period=1", "--wait=true",
                          "--timeout=60s")  # fmt: skip
    deleted = time.monotonic()
    after: list[dict[str, float]] = []

    def false_now() -> dict[str, Any] | None:
        after.append(_full(vm, f"{kubepods}/memory.pressure"))
        c = _contention(control_plane, node)[KUBEPODS_MEMORY]
        return c if c["status"] == "False" else None

    cleared = _wait(f"{KUBEPODS_MEMORY}=False", false_now, timeout=420, every=3)
    to_false = time.monotonic() - deleted
    assert cleared["reason"] == "KubeletHasNoKubepodsMemoryContentionPressure"
    assert after[-1]["avg60"] < THRESHOLD * 1.5, after[-5:]
    print(
        f"\nPSI contention: idle kubepods memory full {idle}; True {to_true:.0f}s after the "
        f"thrasher ran (peak avg60 {peak:.2f}%, last {seen[-1]}); False {to_false:.0f}s after "
        f"it was deleted (last {after[-1]}); threshold {THRESHOLD}%"
    )

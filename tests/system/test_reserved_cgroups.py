"""enforceNodeAllocatable ``system-reserved`` in the VM, with the systemd cgroup driver:
``systemReservedCgroup: /system.slice`` gets the reservation in its cgroup files and in the
slice's unit properties, the Node gets the ``NodeAllocatableEnforced`` Event and allocatable
less the reservation, and with ``qosReserved`` (gate QOSReserved) the QoS tiers get
``memory.max``; a reserved cgroup that does not exist stops the agent with the kubelet's
error. containerd, the agent's configuration and system.slice are put back afterwards."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.guest import journal, journal_cursor, wait_until
from harness.vm.pods import node_ready

pytestmark = pytest.mark.system

CONFIG = "/etc/nodeagent/config.yaml"
SAVED_CONFIG = "/root/config.yaml.before-reserved-test"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
SAVED_CONTAINERD_CONFIG = "/root/containerd-config.toml.before-reserved-test"
SYSTEMD_CGROUP = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""
GIB = 1 << 30
RESERVED = (
    "  featureGates: {{QOSReserved: true}}\n"
    "  qosReserved: {{memory: 100%}}\n"
    "  enforceNodeAllocatable: [pods, system-reserved]\n"
    "  systemReservedCgroup: {cgroup}\n"
    "  systemReserved: {{cpu: 250m, memory: 1Gi, pid: '10000'}}\n"
)


def weight_of_shares(shares: int) -> int:
    return 1 + ((shares - 2) * 9999) // 262142


def _read(vm: Machine, path: str) -> str:
    return vm.check(["cat", path]).strip()


def _restart_agent(vm: Machine, control_plane: ControlPlane) -> None:
    vm.check("systemctl restart nodeagent", timeout=120)
    deadline = time.monotonic() + 90
    while not node_ready(control_plane):
        assert time.monotonic() < deadline, "node not Ready after restart"
        time.sleep(1)


def _with_reserved(vm: Machine, cgroup: str) -> None:
    """The saved config with the reserved lines added to its ``kubelet:`` section."""
    text = vm.check(["cat", SAVED_CONFIG])
    assert "\nkubelet:\n" in text, text
    text = text.replace("\nkubelet:\n", "\nkubelet:\n" + RESERVED.format(cgroup=cgroup), 1)
    vm.put(CONFIG, text.encode())


def _node(control_plane: ControlPlane, node: str) -> dict[str, Any]:
    out = control_plane.kubectl("get", "node", node, "-o", "json").stdout
    result: dict[str, Any] = json.loads(out)
    return result


@pytest.fixture
def systemd_driver(vm: Machine, control_plane: ControlPlane, guest_node: str) -> Iterator[str]:
    """containerd on runc's systemd cgroup driver (the agent learns it over CRI)."""
    control_plane.kubectl("delete", "pods", "--all", "--grace-period=1", "--wait=true",
                          "--timeout=90s", check=False)  # fmt: skip
    assert "SystemdCgroup" not in _read(vm, CONTAINERD_CONFIG)
    vm.check(["cp", CONTAINERD_CONFIG, SAVED_CONTAINERD_CONFIG])
    vm.check(["cp", CONFIG, SAVED_CONFIG])
    vm.check(["sh", "-c", f"cat >> {CONTAINERD_CONFIG}"], input=SYSTEMD_CGROUP.encode())
    try:
        vm.check("systemctl restart containerd", timeout=120)
        yield guest_node
    finally:
        vm.check(["mv", SAVED_CONFIG, CONFIG])
        vm.check(["mv", SAVED_CONTAINERD_CONFIG, CONTAINERD_CONFIG])
        # the runtime properties the agent set on system.slice
        vm.run("systemctl revert system.slice")
        vm.run("cd /sys/fs/cgroup/system.slice && echo max > memory.max && echo max > pids.max "
               "&& echo 100 > cpu.weight")  # fmt: skip
        vm.check("systemctl restart containerd", timeout=120)
        vm.run("systemctl reset-failed nodeagent")
        _restart_agent(vm, control_plane)
        vm.run("systemctl stop kubepods-besteffort.slice kubepods-burstable.slice "
               "kubepods.slice")  # fmt: skip


def test_system_reserved_is_written_to_system_slice_with_the_systemd_driver(
    vm: Machine, control_plane: ControlPlane, systemd_driver: str
) -> None:
    node = systemd_driver
    _with_reserved(vm, "/system.slice")
    _restart_agent(vm, control_plane)
    wait_until(vm, "test -d /sys/fs/cgroup/kubepods.slice", timeout=60, what="kubepods.slice")

    cg = "/sys/fs/cgroup/system.slice"
    # the Node may still read Ready from the agent before the restart: wait for the outcome
    wait_until(vm, f"grep -qx {GIB} {cg}/memory.max", timeout=90, what="system.slice memory.max")
    assert _read(vm, f"{cg}/cpu.weight") == str(weight_of_shares(256))  # 250m
    assert _read(vm, f"{cg}/memory.max") == str(GIB)
    assert _read(vm, f"{cg}/pids.max") == "10000"
    shown = vm.check("systemctl show system.slice -p CPUWeight -p MemoryMax -p TasksMax")
    props = dict(line.split("=", 1) for line in shown.split())
    assert props == {
        "CPUWeight": str(weight_of_shares(256)),
        "MemoryMax": str(GIB),
        "TasksMax": "10000",
    }
    # node allocatable on kubepods, and qosReserved on the QoS tiers (no pods: allocatable)
    mem_total = next(
        int(line.split()[1]) * 1024
        for line in _read(vm, "/proc/meminfo").splitlines()
        if line.startswith("MemTotal:")
    )
    allocatable = str(mem_total - GIB)
    kubepods = "/sys/fs/cgroup/kubepods.slice"
    assert _read(vm, f"{kubepods}/memory.max") == allocatable
    assert _read(vm, f"{kubepods}/kubepods-burstable.slice/memory.max") == allocatable
    assert _read(vm, f"{kubepods}/kubepods-besteffort.slice/memory.max") == allocatable
    # systemd keeps them: a daemon-reload re-applies the unit's settings to its cgroup
    vm.check("systemctl daemon-reload", timeout=60)
    assert _read(vm, f"{cg}/memory.max") == str(GIB)

    def enforced() -> bool:
        out = control_plane.kubectl(
            "get", "events", "-n", "default", "--field-selector",
            f"involvedObject.kind=Node,involvedObject.name={node},reason=NodeAllocatableEnforced",
            "-o", "json",
        ).stdout  # fmt: skip
        messages = {e["message"] for e in json.loads(out)["items"]}
        return "Updated limits on system reserved cgroup /system.slice" in messages

    deadline = time.monotonic() + 60
    while not enforced():
        assert time.monotonic() < deadline, "no NodeAllocatableEnforced event for system.slice"
        time.sleep(2)
    status = _node(control_plane, node)["status"]
    cap, alloc = status["capacity"], status["allocatable"]
    assert cap["cpu"] == vm.check("nproc").strip()
    assert alloc["cpu"] == f"{int(cap['cpu']) * 1000 - 250}m"


def test_a_missing_reserved_cgroup_stops_the_agent_with_the_kubelets_error(
    vm: Machine, control_plane: ControlPlane, systemd_driver: str
) -> None:
    del systemd_driver
    _with_reserved(vm, "/missing.slice")
    cursor = journal_cursor(vm)
    vm.run("systemctl restart nodeagent", timeout=120)
    expected = (
        'Failed to enforce System Reserved Cgroup Limits on "/missing.slice": could not read '
        'controllers for cgroup ["missing"]: open /sys/fs/cgroup/missing.slice/'
        "cgroup.controllers: no such file or directory"
    )
    wait_until(
        vm,
        "journalctl -u nodeagent --no-pager -o cat | grep -q 'Failed to start ContainerManager'",
        timeout=90,
        what="the refusal in the journal",
    )
    # systemd logs the exit only after the agent has logged its refusal and stopped its
    # managers: wait for that line too rather than reading the journal at once.
    wait_until(
        vm,
        f"journalctl -u nodeagent --no-pager -o cat --after-cursor='{cursor}'"
        " | grep -qE \"Failed with result 'exit-code'|Main process exited\"",
        timeout=90,
        what="the agent's exit in the journal",
    )
    entries = journal(vm, f"--after-cursor={cursor}")
    text = "\n".join(e.get("MESSAGE", "") + " " + e.get("ERR", "") for e in entries)
    assert expected in text, text[-3000:]
    assert any(
        "Failed with result 'exit-code'" in e.get("MESSAGE", "")
        or "Main process exited" in e.get("MESSAGE", "")
        for e in entries
    ), text[-3000:]

"""The container manager in the VM (cgroup v2, systemd PID 1, a swap file): the QoS hierarchy,
node allocatable on kubepods, and failSwapOn. Everything is read back from the guest's cgroup
files and journal."""

from __future__ import annotations

import pytest
from harness.vm import Machine
from harness.vm.guest import journal, journal_cursor, wait_until

pytestmark = pytest.mark.system

CONFIG = "/etc/nodeagent/config.yaml"
CG = "/sys/fs/cgroup"


def weight_of_shares(shares: int) -> int:
    """cgroup v1 cpu.shares -> v2 cpu.weight, the kubelet's formula."""
    return 1 + ((shares - 2) * 9999) // 262142


def read(vm: Machine, path: str) -> str:
    return vm.check(["cat", path]).strip()


def mem_total(vm: Machine) -> int:
    for line in read(vm, "/proc/meminfo").splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemTotal")


def test_qos_hierarchy_with_allocatable_on_kubepods_systemd_driver(agent: Machine) -> None:
    kubepods = f"{CG}/kubepods.slice"
    wait_until(agent, f"test -d {kubepods}/kubepods-besteffort.slice", timeout=60,
               what="the QoS hierarchy")  # fmt: skip
    cpus = int(agent.check("nproc").strip())
    # kubepods: allocatable (no reservations in the packaged config: capacity).
    assert read(agent, f"{kubepods}/cpu.weight") == str(weight_of_shares(cpus * 1024))
    assert read(agent, f"{kubepods}/memory.max") == str(mem_total(agent))
    # Burstable with no Burstable pods and BestEffort: the minimal shares (2 -> weight 1).
    assert read(agent, f"{kubepods}/kubepods-burstable.slice/cpu.weight") == "1"
    assert read(agent, f"{kubepods}/kubepods-besteffort.slice/cpu.weight") == "1"
    controllers = read(agent, f"{kubepods}/cgroup.subtree_control").split()
    assert {"cpu", "memory", "pids"} <= set(controllers), controllers
    units = agent.check("systemctl list-units --type=slice --no-legend --plain kubepods*")
    assert "kubepods-burstable.slice" in units and "kubepods-besteffort.slice" in units, units


def test_fail_swap_on_refuses_to_start_with_the_kubelets_message(agent: Machine) -> None:
    assert agent.check("swapon --show=NAME --noheadings").strip() == "/swapfile"
    assert "failSwapOn: false" in read(agent, CONFIG)  # the packaged default
    cursor = journal_cursor(agent)
    agent.check(f"sed -i 's/^  failSwapOn: false$/  failSwapOn: true/' {CONFIG}")
    try:
        agent.run("systemctl restart nodeagent", timeout=120)
        wait_until(
            agent,
            "journalctl -u nodeagent --no-pager -o cat | grep -q 'running with swap on'",
            timeout=60,
            what="the swap refusal in the journal",
        )
        entries = journal(agent, f"--after-cursor={cursor}")
        messages = [e.get("MESSAGE", "") for e in entries]
        refusal = [m for m in messages if "running with swap on is not supported" in m]
        assert refusal, messages
        assert (
            "running with swap on is not supported, please disable swap! or set "
            "--fail-swap-on flag to false. /proc/swaps contained: [Filename" in refusal[0]
        )
        assert "/swapfile" in refusal[0] and "kubelet.failSwapOn" in refusal[0]
        assert any("Failed with result 'exit-code'" in m for m in messages), messages
        assert agent.run("systemctl is-active nodeagent").stdout.strip() != "active"
    finally:
        agent.run(f"sed -i 's/^  failSwapOn: true$/  failSwapOn: false/' {CONFIG}")
        agent.run("systemctl restart nodeagent", timeout=120)

"""The container manager in the VM (cgroup v2, systemd PID 1, a swap file): the QoS hierarchy,
node allocatable on kubepods, and failSwapOn. Everything is read back from the guest's cgroup
files and journal."""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.guest import journal, journal_cursor, wait_until
from harness.vm.pods import BUSYBOX_IMAGE, node_ready, pod_manifest, wait_pod

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


QOS = {
    "cgroupfs": ("kubepods", "kubepods/burstable", "kubepods/besteffort"),
    "systemd": (
        "kubepods.slice",
        "kubepods.slice/kubepods-burstable.slice",
        "kubepods.slice/kubepods-besteffort.slice",
    ),
}


def _check_hierarchy(vm: Machine, driver: str) -> None:
    """kubepods with allocatable (no reservations in the packaged config: capacity), the
    Burstable and BestEffort tiers with the minimal weight (no Burstable pod yet)."""
    kubepods, burstable, besteffort = (f"{CG}/{p}" for p in QOS[driver])
    wait_until(vm, f"test -d {besteffort}", timeout=60, what="the QoS hierarchy")
    cpus = int(vm.check("nproc").strip())
    assert read(vm, f"{kubepods}/cpu.weight") == str(weight_of_shares(cpus * 1024))
    assert read(vm, f"{kubepods}/memory.max") == str(mem_total(vm))
    assert read(vm, f"{burstable}/cpu.weight") == "1"
    assert read(vm, f"{besteffort}/cpu.weight") == "1"
    controllers = read(vm, f"{kubepods}/cgroup.subtree_control").split()
    assert {"cpu", "memory", "pids"} <= set(controllers), controllers


def test_qos_hierarchy_and_swap_capacity_cgroupfs_driver(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    """Debian's containerd runs runc without SystemdCgroup: the agent learns cgroupfs."""
    node = json.loads(control_plane.kubectl("get", "node", guest_node, "-o", "json").stdout)
    assert node["status"]["nodeInfo"]["swap"]["capacity"] == meminfo(vm, "SwapTotal") > 0
    _check_hierarchy(vm, "cgroupfs")


def test_fail_swap_on_refuses_to_start_with_the_kubelets_message(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    del guest_node
    agent = vm
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
        _restart_agent(agent, control_plane)


# --- pods on the guest's node -------------------------------------------------------------

MIB = 1 << 20
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
G_RES = {"cpu": "200m", "memory": "64Mi"}
B_REQ = {"cpu": "100m", "memory": "32Mi"}
B_LIM = {"memory": "128Mi"}


def _apply(control_plane: ControlPlane, manifest: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def _phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def _delete(control_plane: ControlPlane, *names: str) -> None:
    control_plane.kubectl(
        "delete", "pod", *names, "--grace-period=1", "--wait=true", "--timeout=90s", check=False
    )


def _three_pods(control_plane: ControlPlane, tag: str) -> dict[str, dict[str, Any]]:
    """A Guaranteed, a Burstable and a BestEffort pod, Running; by QoS letter."""
    manifests = {
        "g": pod_manifest(f"g-{tag}", resources={"requests": G_RES, "limits": G_RES}),
        "b": pod_manifest(f"b-{tag}", resources={"requests": B_REQ, "limits": B_LIM}),
        "e": pod_manifest(f"e-{tag}"),
    }
    for m in manifests.values():
        _apply(control_plane, m)
    return {
        k: wait_pod(
            control_plane,
            m["metadata"]["name"],
            lambda p: _phase(p) == "Running",
            what="phase Running",
            timeout=180,
        )
        for k, m in manifests.items()
    }


def pod_cgroup(driver: str, qos: str, uid: str) -> str:
    """The kubelet's pod cgroup path (what users find under /sys/fs/cgroup)."""
    tier = {"g": [], "b": ["burstable"], "e": ["besteffort"]}[qos]
    if driver == "cgroupfs":
        return "/".join([CG, "kubepods", *tier, f"pod{uid}"])
    escaped = uid.replace("-", "_")
    slices, prefix = ["kubepods.slice"], "kubepods"
    for t in tier:
        prefix = f"{prefix}-{t}"
        slices.append(f"{prefix}.slice")
    slices.append(f"{prefix}-pod{escaped}.slice")
    return "/".join([CG, *slices])


def _app_status(pod: dict[str, Any]) -> dict[str, Any]:
    for status in pod.get("status", {}).get("containerStatuses", []):
        if status["name"] == "app":
            return dict(status)
    return {}


def container_cgroup(vm: Machine, pod: dict[str, Any]) -> str:
    """The app container's cgroup, from its process (``/proc/<pid>/cgroup``)."""
    status = _app_status(pod)
    cid = status["containerID"].split("://", 1)[1]
    for line in vm.check(["ctr", "-n", "k8s.io", "tasks", "list"]).splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] == cid:
            for entry in read(vm, f"/proc/{fields[1]}/cgroup").splitlines():
                if entry.startswith("0::"):
                    return CG + entry[3:]
    raise AssertionError(f"no running task for container {cid}")


def meminfo(vm: Machine, key: str) -> int:
    for line in read(vm, "/proc/meminfo").splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(key)


def _check_pods(vm: Machine, driver: str, pods: dict[str, dict[str, Any]]) -> dict[str, str]:
    """The pod cgroups and their limits as the kubelet sets them; returns the container
    cgroups."""
    paths = {k: pod_cgroup(driver, k, p["metadata"]["uid"]) for k, p in pods.items()}
    got = {
        k: {f: read(vm, f"{path}/{f}") for f in ("cpu.weight", "cpu.max", "memory.max")}
        for k, path in paths.items()
    }
    assert got == {
        "g": {"cpu.weight": str(weight_of_shares(204)), "cpu.max": "20000 100000",
              "memory.max": str(64 * MIB)},
        "b": {"cpu.weight": str(weight_of_shares(102)), "cpu.max": "max 100000",
              "memory.max": str(128 * MIB)},
        "e": {"cpu.weight": "1", "cpu.max": "max 100000", "memory.max": "max"},
    }  # fmt: skip
    qos_root = pod_cgroup(driver, "b", "x").rsplit("/", 1)[0]
    assert read(vm, f"{qos_root}/cpu.weight") == str(weight_of_shares(102))
    containers = {k: container_cgroup(vm, p) for k, p in pods.items()}
    for k, path in containers.items():
        assert path.startswith(paths[k] + "/"), (path, paths[k])
        assert read(vm, f"{path}/memory.oom.group") == "1"
    assert read(vm, f"{containers['g']}/memory.max") == str(64 * MIB)
    assert read(vm, f"{containers['b']}/memory.max") == str(128 * MIB)
    return containers


def _pods_with_no_swap(vm: Machine, control_plane: ControlPlane, driver: str) -> None:
    tag = secrets.token_hex(3)
    pods: dict[str, dict[str, Any]] = {}
    try:
        pods = _three_pods(control_plane, tag)
        containers = _check_pods(vm, driver, pods)
        # NoSwap (the default): 0 for every container.
        for path in containers.values():
            assert read(vm, f"{path}/memory.swap.max") == "0"
        report = json.loads(
            vm.check("nodeagent swap report --config /etc/nodeagent/config.yaml --json")
        )
        mine = {r["pod"]: r for r in report if r["pod"].endswith(tag)}
        assert len(mine) == 3, report
        assert {r["sent"] for r in mine.values()} == {"0"}
        assert {r["cgroup"] for r in mine.values()} == {"0"}
    finally:
        _delete(control_plane, *(p["metadata"]["name"] for p in pods.values()))
    # The pod cgroups go with the pods.
    for k, p in pods.items():
        wait_until(vm, f"! test -e {pod_cgroup(driver, k, p['metadata']['uid'])}",
                   timeout=60, what="the pod cgroup removed")  # fmt: skip


def test_pod_cgroups_limits_and_no_swap_cgroupfs_driver(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    del guest_node
    _pods_with_no_swap(vm, control_plane, "cgroupfs")


def _edit_config(vm: Machine, *sed: str) -> None:
    vm.check(["sed", "-i", *(a for s in sed for a in ("-e", s)), CONFIG])


def _restart_agent(vm: Machine, control_plane: ControlPlane) -> None:
    vm.check("systemctl restart nodeagent", timeout=120)
    deadline = time.monotonic() + 90
    while not node_ready(control_plane):
        assert time.monotonic() < deadline, "node not Ready after restart"
        time.sleep(1)


LIMITED = (
    r"s/^  # memorySwap:$/  memorySwap:/",
    r"s/^  #   swapBehavior: LimitedSwap$/    swapBehavior: LimitedSwap/",
    r"s/^  failSwapOn: false$/  failSwapOn: false\n  podPidsLimit: 256/",
)
UNLIMITED = (
    r"s/^  memorySwap:$/  # memorySwap:/",
    r"s/^    swapBehavior: LimitedSwap$/  #   swapBehavior: LimitedSwap/",
    r"/^  podPidsLimit: 256$/d",
)


def test_limited_swap_formula_and_an_oom_kill_past_limit_and_swap(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    del guest_node
    _edit_config(vm, *LIMITED)
    tag = secrets.token_hex(3)
    hog = f"hog-{tag}"
    try:
        _restart_agent(vm, control_plane)
        pods = _three_pods(control_plane, tag)
        containers = _check_pods(vm, "cgroupfs", pods)
        for k, p in pods.items():
            path = pod_cgroup("cgroupfs", k, p["metadata"]["uid"])
            assert read(vm, f"{path}/pids.max") == "256"
        memory, swap = meminfo(vm, "MemTotal"), meminfo(vm, "SwapTotal")
        assert swap > 0
        expected = int(32 * MIB / memory * swap)
        # The kernel keeps the limit in pages: the file reads the value sent, rounded down.
        page = int(vm.check("getconf PAGESIZE").strip())
        assert read(vm, f"{containers['b']}/memory.swap.max") == str(expected // page * page)
        assert read(vm, f"{containers['g']}/memory.swap.max") == "0"
        assert read(vm, f"{containers['e']}/memory.swap.max") == "0"
        report = json.loads(
            vm.check("nodeagent swap report --config /etc/nodeagent/config.yaml --json")
        )
        (row,) = [r for r in report if r["pod"] == f"default/b-{tag}"]
        assert (row["request"], row["memory_capacity"], row["swap_capacity"]) == (
            32 * MIB, memory, swap,
        )  # fmt: skip
        assert row["sent"] == row["runtime"] == str(expected)
        assert row["cgroup"] == str(expected // page * page)

        # A Burstable container that fills its limit swaps (up to its swap limit), then is
        # OOM-killed when it asks for more. It fills a memory-backed emptyDir (tmpfs pages are
        # charged to the writer and are swappable); a second container without a limit keeps
        # the pod without a pod-level memory limit, so the tmpfs is not capped at 320Mi.
        req, lim = 256 * MIB, 320 * MIB
        swap_limit = int(req / memory * swap)
        hold = (lim + swap_limit // 2) // MIB
        script = (
            f"dd if=/dev/zero of=/fill/a bs=1M count={hold} && echo held && sleep 20 && "
            "dd if=/dev/zero of=/fill/b bs=1M count=200 && echo survived; sleep 3600"
        )
        manifest = pod_manifest(
            hog, command=["sh", "-c", script],
            resources={"requests": {"memory": "256Mi"}, "limits": {"memory": "320Mi"}},
            container={"volumeMounts": [{"name": "fill", "mountPath": "/fill"}]},
            spec={"volumes": [{"name": "fill", "emptyDir": {"medium": "Memory"}}]},
        )  # fmt: skip
        manifest["spec"]["containers"].append(
            {"name": "idle", "image": BUSYBOX_IMAGE, "imagePullPolicy": "Never",
             "command": ["sleep", "3600"]}
        )  # fmt: skip
        _apply(control_plane, manifest)
        running = wait_pod(
            control_plane, hog,
            lambda p: "running" in _app_status(p).get("state", {}), timeout=120, what="Running",
        )  # fmt: skip
        path = container_cgroup(vm, running)
        assert read(vm, f"{path}/memory.swap.max") == str(swap_limit // page * page)
        wait_until(vm, f"[ $(cat {path}/memory.swap.current) -gt 0 ]", timeout=120,
                   what="the hog to swap")  # fmt: skip
        assert int(read(vm, f"{path}/memory.swap.current")) <= swap_limit
        done = wait_pod(
            control_plane, hog, lambda p: "terminated" in _app_status(p).get("state", {}),
            timeout=180, what="the OOM kill",
        )  # fmt: skip
        _assert_oom_killed(vm, path, _app_status(done)["state"]["terminated"])
    finally:
        control_plane.kubectl("delete", "pods", "--all", "--grace-period=1", "--wait=true",
                              "--timeout=90s", check=False)  # fmt: skip
        _edit_config(vm, *UNLIMITED)
        _restart_agent(vm, control_plane)


def _assert_oom_killed(vm: Machine, container_path: str, terminated: dict[str, Any]) -> None:
    """The kernel OOM-killed the container at ``container_path`` (gone now) and the node
    reports it as the runtime does."""
    assert terminated["exitCode"] == 137, terminated
    # the kernel's record of the kill: the pod's cgroup counts its subtree's OOM kills
    pod_events = read(vm, f"{container_path.rsplit('/', 1)[0]}/memory.events")
    oom_kills = dict(line.split() for line in pod_events.splitlines())["oom_kill"]
    assert int(oom_kills) >= 1, pod_events
    # containerd names it OOMKilled when its shim's OOM event reaches it (and logs
    # "TaskOOM event"), also after the exit: the agent reads a fresh SIGKILL exit once
    # more. containerd 1.6 loses the event when runc has removed the cgroup before the
    # shim read memory.events (containerd#8893, #12714): then it logs no TaskOOM for the
    # container and reports Error, and so does the node.
    cid = terminated["containerID"].split("://", 1)[1]
    logged = vm.check(f"journalctl -u containerd -o cat | grep -F {cid} | grep TaskOOM || :")
    if logged:
        assert terminated["reason"] == "OOMKilled", (terminated, logged)
    else:
        assert terminated["reason"] == "Error", terminated
        print(f"containerd lost the OOM event of {cid}; the pod's oom_kill {oom_kills}")


SAVED_CONTAINERD_CONFIG = "/root/provision/containerd-config.toml.orig"
SYSTEMD_CGROUP = """
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    SystemdCgroup = true
"""


def test_hierarchy_pod_cgroups_and_limits_with_the_systemd_driver(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    """containerd switched to runc's systemd cgroup driver (a config edit and a restart): the
    agent learns it from the runtime and makes ``.slice`` units through systemd's D-Bus API."""
    del guest_node
    control_plane.kubectl("delete", "pods", "--all", "--grace-period=1", "--wait=true",
                          "--timeout=90s", check=False)  # fmt: skip
    assert "SystemdCgroup" not in read(vm, CONTAINERD_CONFIG)
    vm.check(["cp", CONTAINERD_CONFIG, SAVED_CONTAINERD_CONFIG])
    vm.check(["sh", "-c", f"cat >> {CONTAINERD_CONFIG}"], input=SYSTEMD_CGROUP.encode())
    try:
        vm.check("systemctl restart containerd", timeout=120)
        _restart_agent(vm, control_plane)
        _check_hierarchy(vm, "systemd")
        units = vm.check("systemctl list-units --type=slice --no-legend --plain 'kubepods*'")
        assert "kubepods-burstable.slice" in units and "kubepods-besteffort.slice" in units
        _pods_with_no_swap(vm, control_plane, "systemd")
    finally:
        vm.check(["mv", SAVED_CONTAINERD_CONFIG, CONTAINERD_CONFIG])
        vm.check("systemctl restart containerd", timeout=120)
        _restart_agent(vm, control_plane)
        # The slices this test made the agent create.
        vm.run("systemctl stop kubepods-besteffort.slice kubepods-burstable.slice "
               "kubepods.slice")  # fmt: skip

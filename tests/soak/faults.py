"""The soak's faults, each a `begin` and an `end` the runner calls `duration` seconds apart
(the churn goes on between): processes killed and started again, the control plane stopped, a
node cut off from the apiserver, its root dir filled, its agent's CPU throttled."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import processes
from harness.multinode import Cluster, Node

from soak.peers import Peer
from soak.plan import Fault

CGROUPS = Path("/sys/fs/cgroup")
THROTTLE_QUOTA_US = 5000  # of every 100 ms: 5 % of one core
THROTTLE_PERIOD_US = 100000
EVICTION_NODEFS_AVAILABLE = 0.10  # the kubelet's default evictionHard nodefs.available
FILL_MARGIN = 16 << 20
CUTOFF_TABLE = "soak_cutoff"
API_RETURN_TIMEOUT = 120.0


@dataclass
class Injector:
    """Carries out the faults of one run against `cluster`."""

    cluster: Cluster
    peer: Peer
    _throttled: dict[str, list[tuple[int, Path, Path]]] = field(default_factory=dict)

    def _node(self, fault: Fault) -> Node:
        assert fault.node is not None
        return self.cluster.node(fault.node)

    def begin(self, fault: Fault) -> None:
        getattr(self, "_begin_" + fault.kind.replace("-", "_"))(fault)

    def end(self, fault: Fault) -> None:
        getattr(self, "_end_" + fault.kind.replace("-", "_"))(fault)

    # --- the agent ------------------------------------------------------------------------

    def _begin_agent_kill(self, fault: Fault) -> None:
        self.peer.stop(self._node(fault), kill=True)

    def _end_agent_kill(self, fault: Fault) -> None:
        self.peer.start(self._node(fault))

    def _begin_agent_term(self, fault: Fault) -> None:
        self.peer.stop(self._node(fault))

    _end_agent_term = _end_agent_kill

    # --- the node's containerd ------------------------------------------------------------

    def _begin_containerd_kill(self, fault: Fault) -> None:
        node = self._node(fault)
        if node.containerd_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.containerd_pid, signal.SIGKILL)
            if node.runtime is not None and node.runtime.popen is not None:
                node.runtime.popen.wait(timeout=30)
        node.runtime, node.containerd_pid = None, None

    def _end_containerd_kill(self, fault: Fault) -> None:
        self.cluster.start_runtime(self._node(fault))

    # --- the control plane ----------------------------------------------------------------

    def _component(self, name: str) -> processes.Proc:
        return next(p for p in self.cluster.plane.procs if p.name == name)

    def _stop_component(self, name: str) -> None:
        self._component(name).stop(timeout=30)

    def _start_component(self, name: str) -> None:
        plane = self.cluster.plane
        old = self._component(name)
        new = processes.start(name=old.name, argv=old.argv, log=old.log)
        plane.procs[plane.procs.index(old)] = new
        deadline = time.monotonic() + API_RETURN_TIMEOUT
        while not plane.readyz():
            if time.monotonic() > deadline or not new.alive():
                raise RuntimeError(f"{name} did not come back:\n{new.tail()}")
            time.sleep(1)

    def _begin_apiserver_stop(self, fault: Fault) -> None:
        self._stop_component("kube-apiserver")

    def _end_apiserver_stop(self, fault: Fault) -> None:
        self._start_component("kube-apiserver")

    def _begin_etcd_stop(self, fault: Fault) -> None:
        self._stop_component("etcd")

    def _end_etcd_stop(self, fault: Fault) -> None:
        self._start_component("etcd")

    # --- a node cut off from the apiserver ------------------------------------------------

    def _nft(self, node: Node, script: str) -> None:
        done = subprocess.run(
            ["ip", "netns", "exec", node.netns, "nft", "-f", "-"],
            input=script,
            text=True,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{node.name}: nft: {done.stderr.strip()}")

    def _begin_cut_off(self, fault: Fault) -> None:
        plane = self.cluster.plane
        match = f"ip daddr {plane.address} tcp dport {plane.ports.apiserver} drop"
        self._nft(
            self._node(fault),
            f"table inet {CUTOFF_TABLE} {{\n"
            f" chain cut_out {{ type filter hook output priority -300; {match}; }}\n"
            f" chain cut_forward {{ type filter hook forward priority -300; {match}; }}\n"
            "}\n",
        )

    def _end_cut_off(self, fault: Fault) -> None:
        self._nft(self._node(fault), f"delete table inet {CUTOFF_TABLE}\n")

    # --- the root dir filled past its eviction threshold ----------------------------------

    def _fill_file(self, node: Node) -> Path:
        return node.root_dir / "soak-fill"

    def _begin_disk_fill(self, fault: Fault) -> None:
        node = self._node(fault)
        st = os.statvfs(node.root_dir)
        total, avail = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        size = int(avail - EVICTION_NODEFS_AVAILABLE * total + FILL_MARGIN)
        if size <= 0 or size > 4 << 30:
            raise RuntimeError(
                f"{node.name}: root dir {node.root_dir} has {avail >> 20} MiB free of"
                f" {total >> 20} MiB; filling {size >> 20} MiB is not what this fault is for"
                " (the soak puts each node's root dir on a tmpfs of its own)"
            )
        fd = os.open(self._fill_file(node), os.O_CREAT | os.O_WRONLY | os.O_NOFOLLOW, 0o600)
        try:
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)

    def _end_disk_fill(self, fault: Fault) -> None:
        self._fill_file(self._node(fault)).unlink(missing_ok=True)

    # --- the agent's CPU throttled --------------------------------------------------------

    def _begin_cpu_throttle(self, fault: Fault) -> None:
        """Every agent process of the node (the kubelet and kube-proxy for that peer) into one
        cgroup capped at 5 % of a core, together."""
        node = self._node(fault)
        moved = []
        for pid in self.peer.pids(node).values():
            original, throttle = _cpu_cgroups(pid, f"soak-throttle-{node.netns}")
            throttle.mkdir(exist_ok=True)
            if (throttle / "cpu.max").exists():
                (throttle / "cpu.max").write_text(f"{THROTTLE_QUOTA_US} {THROTTLE_PERIOD_US}\n")
            else:
                (throttle / "cpu.cfs_period_us").write_text(f"{THROTTLE_PERIOD_US}\n")
                (throttle / "cpu.cfs_quota_us").write_text(f"{THROTTLE_QUOTA_US}\n")
            (throttle / "cgroup.procs").write_text(f"{pid}\n")
            moved.append((pid, original, throttle))
        self._throttled[node.name] = moved

    def _end_cpu_throttle(self, fault: Fault) -> None:
        moved = self._throttled.pop(self._node(fault).name, [])
        for pid, original, _ in moved:
            with contextlib.suppress(OSError):  # the agent may have died meanwhile
                (original / "cgroup.procs").write_text(f"{pid}\n")
        for throttle in {t for _, _, t in moved}:
            for _ in range(50):
                try:
                    throttle.rmdir()
                    break
                except OSError:
                    time.sleep(0.1)

    def supervise(self, active: Fault | None) -> list[str]:
        """Start again a control-plane component that exited: kube-controller-manager and
        kube-scheduler exit when they lose their leader lease (the apiserver or etcd away
        longer than its renew deadline), and on a real control plane the kubelet restarts
        their static pods. Not the component an active fault stopped."""
        stopped = {"apiserver-stop": "kube-apiserver", "etcd-stop": "etcd"}.get(
            active.kind if active else ""
        )
        restarted = []
        for proc in list(self.cluster.plane.procs):
            if proc.name != stopped and not proc.alive():
                new = processes.start(name=proc.name, argv=proc.argv, log=proc.log)
                plane = self.cluster.plane
                plane.procs[plane.procs.index(proc)] = new
                restarted.append(proc.name)
        return restarted

    def cleanup(self) -> None:
        """Undo whatever a fault left in place when the run stops part-way."""
        for name in list(self._throttled):
            self._end_cpu_throttle(Fault(0, "cpu-throttle", name, 0))


def _cpu_cgroups(pid: int, name: str) -> tuple[Path, Path]:
    """The cpu cgroup `pid` is in, and a sibling `name` at the hierarchy's top."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            return CGROUPS / path.lstrip("/"), CGROUPS / name
        if "cpu" in re.split(",", controllers):
            top = CGROUPS / controllers
            if not top.exists():
                top = CGROUPS / "cpu"
            return top / path.lstrip("/"), top / name
    raise RuntimeError(f"no cpu cgroup for pid {pid}")

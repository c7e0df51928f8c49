"""A multi-node cluster on one machine: the control plane on the host and N nodeagent nodes, each
a network namespace (`nodenet`), mount and UTS namespaces (`nodemount`) of its own with its own
containerd, root dir, cgroup root, node IP and podCIDR, each joined with one printed join
command (`nodeagent join` run inside the node, then the agent with the flags it wrote). Used by
`make up NODES=N` and by the multi-node tests; the reusable API for later work (cross-node
Services, conformance on N nodes).

    cluster = add_nodes(plane, index=k, count=3, directory=d, registry_host=reg.host)
    cluster.nodes[0].ip, .netns, .run("ip", "route"), .agent_pid
    cluster.stop_agent(cluster.nodes[1])          # SIGTERM; kill=True for SIGKILL
    cluster.start_agent(cluster.nodes[1])         # the same config and credentials again
    cluster.teardown()                            # or teardown_recorded(state) from `make down`

Layout of node `i` (1-based) of cluster `k` (0 = `make up`, tests lease others):

    name node-<i>, IP 198.18.<16+k>.1<i>, netns na-m<k>-n<i>, cgroup root /na-m<k>-n<i>
    <directory>/node-<i>/containerd/   its containerd (socket c.sock, root, state)
    <directory>/node-<i>/root/         the agent's root dir (join-flags.env, the bootstrap
                                       kubeconfig, then TLS bootstrap's kubeconfig and pki/)
    <directory>/node-<i>/fs/...        its /etc/cni/net.d, /opt/cni/bin, /run/flannel, ...
    <directory>/node-<i>/config.yaml   the agent's config; logs (agent, join) in <directory>/logs/

Each node runs the pause and busybox images imported at start and pulls everything else from the
registry (which listens on 198.18.0.1, reachable from every node) through containerd's mirrors.

A VM node (the packaged agent in a qemu guest, joining this cluster) fits the same layout:
`nodenet.add_vm_link(NodeAddr(k, i))` makes its host end a tap named like a node link (the
guard and routes treat it as one), the guest takes `NodeAddr(k, i).ip` and joins with a
bootstrap token (`nodeagent join`); flannel's DaemonSet runs there unchanged.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cgroups, flannel, mirrors, node_up, nodemount, nodenet, processes
from harness.containerd import ContainerdConfig, shims_of, start_containerd, stop_containerd
from harness.controlplane import ControlPlane

AGENT_STOP_TIMEOUT = 20.0


@dataclass(kw_only=True)
class Node:
    """One node: where it lives and what runs in it."""

    name: str
    addr: nodenet.NodeAddr
    dir: Path
    log_dir: Path
    containerd_pid: int | None = None
    agent_pid: int | None = None
    agent: processes.Proc | None = field(default=None, repr=False)
    runtime: processes.Proc | None = field(default=None, repr=False)  # containerd, if ours

    @property
    def ip(self) -> str:
        return self.addr.ip

    @property
    def netns(self) -> str:
        return self.addr.netns

    @property
    def cgroup_root(self) -> str:
        return f"/{self.addr.netns}"

    @property
    def containerd_dir(self) -> Path:
        return self.dir / "containerd"

    @property
    def endpoint(self) -> str:
        return f"unix://{self.containerd_dir / 'c.sock'}"

    @property
    def config(self) -> Path:
        return self.dir / "config.yaml"

    @property
    def agent_log(self) -> Path:
        return self.log_dir / f"nodeagent-{self.name}.log"

    @property
    def root_dir(self) -> Path:
        return self.dir / "root"

    @property
    def manifests(self) -> Path:
        """The node's static pod directory (its config's `staticPodPath`)."""
        return self.dir / "manifests"

    def host_path(self, path: str) -> Path:
        """Where the node's private `path` (/etc/cni/net.d, /run/flannel, ...) is on the host."""
        return nodemount.private_dir(self.dir, path)

    def enter(self) -> list[str]:
        return nodemount.enter_argv(self.netns)

    def run(
        self, *argv: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run a command inside the node (its network, mount and UTS namespaces)."""
        done = subprocess.run(
            [*self.enter(), *argv], capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{self.name}: {' '.join(argv)}: {done.stderr.strip()}")
        return done

    def agent_alive(self) -> bool:
        if self.agent is not None:
            return self.agent.alive()
        return self.agent_pid is not None and processes.is_running(
            self.agent_pid, binary=sys.executable
        )

    def record(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cluster": self.addr.cluster,
            "index": self.addr.index,
            "dir": str(self.dir),
            "log_dir": str(self.log_dir),
            "containerd_pid": self.containerd_pid,
            "agent_pid": self.agent_pid,
            "ip": self.ip,
            "netns": self.netns,
        }

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> Node:
        return cls(
            name=r["name"],
            addr=nodenet.NodeAddr(r["cluster"], r["index"]),
            dir=Path(r["dir"]),
            log_dir=Path(r["log_dir"]),
            containerd_pid=r.get("containerd_pid"),
            agent_pid=r.get("agent_pid"),
        )


@dataclass(kw_only=True)
class Cluster:
    """The nodes of one multi-node cluster and the control plane they joined."""

    plane: ControlPlane
    index: int
    directory: Path
    registry_host: str
    detached: bool = False
    root_size: str | None = None  # each node's root dir on a tmpfs of this size (the soak)
    nodes: list[Node] = field(default_factory=list)

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in {[n.name for n in self.nodes]}")

    @property
    def log_dir(self) -> Path:
        return self.directory / "logs"

    def start_agent(self, node: Node) -> None:
        """Start the node's agent with the config, the join's flags and the credentials it
        already has (its client certificate from TLS bootstrap)."""
        argv = node_up.agent_argv(node.config, enter=node.enter())
        proc = processes.start(
            name=f"nodeagent-{node.name}", argv=argv, log=node.agent_log, detached=self.detached
        )
        node.agent, node.agent_pid = proc, proc.pid

    def stop_agent(self, node: Node, *, kill: bool = False) -> None:
        """SIGTERM the agent (it stops in order) or, with `kill`, SIGKILL it (a crash)."""
        if node.agent_pid is None:
            return
        if kill and node.agent_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.agent_pid, signal.SIGKILL)
        processes.stop_pid(
            node.agent_pid,
            binary=sys.executable,
            timeout=AGENT_STOP_TIMEOUT,
            popen=node.agent.popen if node.agent else None,
        )
        node.agent = None

    def power_off(self, node: Node) -> None:
        """What a power cut leaves: every process of the node killed (agent, containerd, shims,
        containers), its namespaces, mounts and devices gone, its tmpfs (`/run`: containerd's
        state dir, /run/flannel) empty; what is on disk stays (containerd's root with its
        containers' records, the agent's root dir, /etc/cni/net.d, /var/lib/cni). `boot`
        starts it again."""
        self.stop_agent(node, kill=True)
        if node.containerd_pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(node.containerd_pid, signal.SIGKILL)
            if node.runtime is not None and node.runtime.popen is not None:
                node.runtime.popen.wait(timeout=AGENT_STOP_TIMEOUT)  # reap it
            node.runtime = None
        for shim in shims_of(node.containerd_dir / "c.sock"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(shim, signal.SIGKILL)
        cgroups.kill_tree(node.cgroup_root.lstrip("/"))
        node.containerd_pid = None
        nodemount.remove(node.netns)
        nodenet.remove_node(node.addr)
        shutil.rmtree(node.containerd_dir / "state", ignore_errors=True)
        shutil.rmtree(node.host_path("/run/flannel"), ignore_errors=True)

    def boot(self, node: Node) -> None:
        """Start a node `power_off` left: its network, mounts, containerd, then the agent."""
        nodenet.add_node(node.addr)
        nodemount.create(node.netns, node.dir, hostname=node.name)
        self.start_runtime(node)
        self.start_agent(node)

    def start_runtime(self, node: Node, images: Mapping[str, Path] | None = None) -> None:
        config = ContainerdConfig(
            base_dir=node.containerd_dir,
            cni_conf_dir=Path("/etc/cni/net.d"),  # inside the node's mount namespace
            cni_bin_dir=Path("/opt/cni/bin"),
            plain_http_registries=(self.registry_host,),
            mirror_registry=self.registry_host,
            log_path=self.log_dir / f"containerd-{node.name}.log",
        )
        ctd = start_containerd(config, detached=self.detached, enter=node.enter())
        node.containerd_pid, node.runtime = ctd.pid, ctd.proc
        for tarball in (images or {}).values():
            ctd.import_image(tarball)

    def state(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "directory": str(self.directory),
            "registry_host": self.registry_host,
            "nodes": [n.record() for n in self.nodes],
        }

    def teardown(self) -> None:
        teardown_recorded(
            self.state(),
            agents={n.name: n.agent for n in self.nodes},
            runtimes={n.name: n.runtime for n in self.nodes},
        )


def add_nodes(
    plane: ControlPlane,
    *,
    index: int,
    count: int,
    directory: Path,
    registry_host: str,
    images: Mapping[str, Path],
    detached: bool = False,
    root_size: str | None = None,
    say: Any = None,
) -> Cluster:
    """Create `count` nodes, start their runtimes and agents, and join them to `plane`.

    `images` are OCI tarballs imported into every node's containerd (pause, busybox). On any
    failure everything made so far is removed before the error propagates."""
    raise_inotify_limits()
    nodenet.claim(index, pid=plane.procs[0].pid if detached else _pid())
    cluster = Cluster(
        plane=plane,
        index=index,
        directory=directory,
        registry_host=registry_host,
        detached=detached,
        root_size=root_size,
    )
    try:
        nodenet.add_cluster(index)
        # One printed join command for every node, as an operator copies kubeadm's to each.
        join_command = plane.join_command()
        for i in range(1, count + 1):
            node = _make_node(cluster, i, images, join_command=join_command)
            write_state(cluster)
            if say:
                say(f"node {node.name} joined: IP {node.ip}, netns {node.netns}")
    except BaseException:
        cluster.teardown()
        raise
    return cluster


INOTIFY_INSTANCES = 1024  # what kind asks of a host running several node containers


def raise_inotify_limits(path: Path = Path("/proc/sys/fs/inotify/max_user_instances")) -> None:
    """Each node's containerd watches its CNI config dir and each agent its files: with the
    default 128 inotify instances per user, shared by every cluster on the machine, a node's
    containerd fails to start its CRI plugin ("too many open files"). Raised, never lowered."""
    try:
        if int(path.read_text()) < INOTIFY_INSTANCES:
            path.write_text(f"{INOTIFY_INSTANCES}\n")
    except OSError:
        pass


def _pid() -> int:
    return os.getpid()


def _make_node(cluster: Cluster, i: int, images: Mapping[str, Path], *, join_command: str) -> Node:
    addr = nodenet.NodeAddr(cluster.index, i)
    node = Node(
        name=f"node-{i}", addr=addr, dir=cluster.directory / f"node-{i}", log_dir=cluster.log_dir
    )
    cluster.nodes.append(node)
    node.dir.mkdir(parents=True, exist_ok=True)
    nodenet.add_node(addr)
    if cluster.root_size:
        node.root_dir.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={cluster.root_size},mode=0700", "soak-root",
             str(node.root_dir)],
            check=True,
        )  # fmt: skip
    nodemount.create(addr.netns, node.dir, hostname=node.name)
    flannel.install_node_plugins(node.host_path("/opt/cni/bin"))
    cluster.start_runtime(node, images)
    node.agent = node_up.join_node(
        cluster.plane,
        join_command=join_command,
        name=node.name,
        node_ip=node.ip,
        enter=node.enter(),
        directory=node.dir,
        runtime_endpoint=node.endpoint,
        cgroup_root=node.cgroup_root,
        log=node.agent_log,
        detached=cluster.detached,
    )
    node.agent_pid = node.agent.pid
    return node


def teardown_recorded(
    state: Mapping[str, Any] | None,
    *,
    agents: Mapping[str, processes.Proc | None] | None = None,
    runtimes: Mapping[str, processes.Proc | None] | None = None,
) -> None:
    """Stop and remove every node `state` records (agents, containers, containerd, mounts,
    namespaces, cgroups, links), then the cluster's host side. Safe on partial records and
    from another process (`make down`)."""
    if not state:
        return
    index = state["index"]
    nodes = [Node.from_record(r) for r in state.get("nodes", [])]
    for node in nodes:
        proc = (agents or {}).get(node.name)
        if node.agent_pid is not None:
            processes.stop_pid(
                node.agent_pid,
                binary=sys.executable,
                timeout=AGENT_STOP_TIMEOUT,
                popen=proc.popen if proc else None,
            )
    for node in nodes:
        stop_containerd(node.containerd_dir, proc=(runtimes or {}).get(node.name))
    # namespaces, links and cgroups, also of nodes a crashed `up` or test never recorded
    for addr in sorted({*(n.addr for n in nodes), *nodenet.stale_nodes(index)}, key=str):
        nodemount.remove(addr.netns)
        nodenet.remove_node(addr)
        cgroups.remove_cgroup_tree(addr.netns)
    others = [k for k in nodenet.live_clusters() if k != index]
    nodenet.remove_cluster(index, others_alive=bool(others))
    for node in nodes:
        nodemount.remove_created_dirs(node.dir, others_alive=nodemount.any_alive())
    nodemount.release_ns_dir()
    for node in nodes:
        if os.path.ismount(node.root_dir):  # a tmpfs root dir (`root_size`)
            subprocess.run(["umount", "-l", str(node.root_dir)], capture_output=True, check=False)
        shutil.rmtree(node.dir, ignore_errors=True)
    (Path(state["directory"]) / "nodes.json").unlink(missing_ok=True)
    (nodenet.LEASES / f"{index}.state").unlink(missing_ok=True)


def write_state(cluster: Cluster) -> None:
    """The nodes as JSON in `<directory>/nodes.json`, for tools and later sessions, and where
    that file is beside the cluster's lease (`recorded_state` finds it after a crash)."""
    path = cluster.directory / "nodes.json"
    path.write_text(json.dumps(cluster.state(), indent=2) + "\n")
    nodenet.LEASES.mkdir(parents=True, exist_ok=True)
    (nodenet.LEASES / f"{cluster.index}.state").write_text(f"{path}\n")


def recorded_state(index: int) -> dict[str, Any] | None:
    """The last `write_state` of cluster `index`, if its file is still there."""
    try:
        path = Path((nodenet.LEASES / f"{index}.state").read_text().strip())
        state: dict[str, Any] = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return state


def node_images(tarballs: Sequence[Path]) -> dict[str, Path]:
    return {p.name: p for p in tarballs}


def push_network_images(registry_host: str, work_dir: Path) -> list[str]:
    """flannel's two images into the registry, under their upstream names."""
    pushed = flannel.push(registry_host, work_dir)
    return [mirrors.normalize(p) for p in pushed]


def route_pod_cidrs(cluster: Cluster) -> None:
    """Route each node's IPv4 pod CIDRs (from its Node object) from the host to the node."""
    wanted = {n.name: n for n in cluster.nodes}
    for obj in cluster.plane.get_json("nodes")["items"]:
        node = wanted.get(obj["metadata"]["name"])
        if node is None:
            continue
        for cidr in obj.get("spec", {}).get("podCIDRs", []):
            if ":" not in cidr:
                nodenet.route_pod_cidr(node.addr, cidr)


def wait_ready(plane: ControlPlane, names: Sequence[str], *, timeout: float = 240.0) -> None:
    """Wait until every named Node reports Ready=True."""
    deadline = time.monotonic() + timeout
    while True:
        nodes = plane.get_json("nodes")["items"]
        ready = {
            n["metadata"]["name"]
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n["status"].get("conditions", [])
            )
        }
        if set(names) <= ready:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"nodes not Ready after {timeout:.0f}s: {set(names) - ready}")
        time.sleep(1.0)

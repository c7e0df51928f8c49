"""`make up` / `make down`: a local cluster that outlives the command.

With `NODES=N` (``up --nodes N``, N >= 2) the nodes live in namespaces of their own with flannel
between them (`harness.up_multinode`); N = 1 (the default) is the single node below.

``up`` builds the binaries (cached), starts the control plane as detached processes with its
files under ``<cache>/up/``, starts the container runtime (`harness.runtime_up`), and ends with
two lines to paste: ``export KUBECONFIG=...`` and ``export PATH=...``. A second ``up`` finds the
running cluster (recorded pids alive and ``/readyz`` ok) and says so. ``down`` stops everything
recorded in ``<cache>/up/state.json`` and removes the directory.
"""

from __future__ import annotations

import fcntl
import json
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from harness import (
    coredns,
    csi_hostpath,
    join_up,
    loops,
    metrics_server,
    node_up,
    runtime_up,
    up_multinode,
)
from harness.build import Binaries, ensure_built
from harness.containerd import unmount_and_remove
from harness.controlplane import (
    ControlPlane,
    Layout,
    all_running,
    attach,
    start_control_plane,
    stop_recorded,
)
from harness.versions import cache_dir

NODE_NOTE = (
    "nodeagent is the node: it renews its Lease, reports Ready from containerd, runs the pods "
    "bound to it (local images: localhost/busybox:latest and localhost/pause:latest with "
    "imagePullPolicy IfNotPresent, or <registry>/busybox:latest from the local registry) and "
    "programs Services into nftables (table `ip nodeagent`: ClusterIPs and NodePorts work from "
    "this host and from pods); `kubectl exec/attach/port-forward/cp` reach it on :10250 (its "
    "serving certificate signed by the cluster CA). Stock image names (busybox, "
    "registry.k8s.io/..., quay.io/..., gcr.io/...) are pulled from the local registry through "
    "containerd's mirrors, never the internet; cluster DNS is CoreDNS (kube-system/kube-dns); "
    "claims are provisioned by the CSI hostpath driver (default StorageClass csi-hostpath-sc)"
)


def state_dir() -> Path:
    return cache_dir() / "up"


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


@contextmanager
def locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory.parent / "up.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read_state(directory: Path) -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads((directory / "state.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return state


def write_state(directory: Path, state: dict[str, Any]) -> None:
    tmp = directory / "state.json.tmp"
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.rename(directory / "state.json")


def running_plane(state: dict[str, Any] | None) -> ControlPlane | None:
    """The recorded control plane, if every process is alive and /readyz answers ok."""
    if not state or "control_plane" not in state:
        return None
    plane = attach(state["control_plane"])
    if all_running(plane.procs) and plane.readyz():
        return plane
    return None


def teardown(directory: Path, state: dict[str, Any] | None) -> None:
    """Stop what `state` records (runtime first, then the control plane) and remove `directory`."""
    if state and state.get("nodes", 1) > 1:
        up_multinode.stop(state)
    elif state:
        node_up.stop(state.get("node"))
        runtime_up.stop(state.get("runtime"))
        stop_recorded(state.get("control_plane", {}))
    # A pod's volumes (tmpfs) stay mounted when the agent stops before tearing them down; the
    # hostpath driver's block volumes stay attached to loop devices when their claims remain.
    loops.detach_below(directory)
    unmount_and_remove(directory)


def up(nodes: int = 1) -> int:
    directory = state_dir()
    binaries: Binaries = ensure_built()
    with locked(directory):
        state = read_state(directory)
        plane = running_plane(state)
        running_nodes = (state or {}).get("nodes", 1)
        if plane is not None and state is not None and running_nodes != nodes:
            say(f"a cluster with {running_nodes} node(s) is running: `make down` first")
            return 1
        if nodes > 1:
            return _up_multinode(directory, state, plane, nodes=nodes, binaries=binaries)
        if plane is not None and state is not None:
            say(f"cluster already running: {plane.server} (logs in {plane.log_dir})")
            state["runtime"] = runtime_up.ensure(
                state.get("runtime"), directory=directory, holder=plane.procs[0].pid
            )
            write_state(directory, state)
        else:
            if state is not None or any(directory.iterdir()):
                previous = directory.parent / "up-previous-logs"
                say(f"found a stopped or broken cluster from an earlier `up`; its logs: {previous}")
                shutil.rmtree(previous, ignore_errors=True)
                if (directory / "logs").is_dir():
                    shutil.copytree(directory / "logs", previous)
                teardown(directory, state)
                directory.mkdir(parents=True)
            say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler ...")
            started = time.monotonic()
            cluster = directory / "cluster"
            cluster_ca = Layout(root=cluster, log_dir=directory / "logs").pki / "ca.crt"
            plane = start_control_plane(
                binaries=binaries,
                root=cluster,
                log_dir=directory / "logs",
                detached=True,
                # The apiserver verifies the node's serving certificate (kubelet-serving
                # signer, approved by node_up) against the cluster CA.
                apiserver_extra_args=[f"--kubelet-certificate-authority={cluster_ca}"],
            )
            took = time.monotonic() - started
            state = {"control_plane": plane.state(), "started_seconds": round(took, 1)}
            write_state(directory, state)
            say(
                f"control plane ready in {took:.1f}s (/readyz ok after "
                f"{plane.timings['readyz']:.1f}s): {plane.server}, logs in {plane.log_dir}"
            )
            state["runtime"] = runtime_up.ensure(
                None, directory=directory, holder=plane.procs[0].pid
            )
            write_state(directory, state)
        runtime = state.get("runtime") or {}
        endpoint = (
            f"unix://{runtime['containerd_dir']}/c.sock" if "containerd_dir" in runtime else None
        )
        state["node"] = node_up.ensure(
            state.get("node"), plane=plane, directory=directory, runtime_endpoint=endpoint
        )
        write_state(directory, state)
        if "containerd_dir" in runtime:
            metrics_server.up(
                plane,
                node_name=state["node"]["name"],
                containerd_socket=Path(runtime["containerd_dir"]) / "c.sock",
                work_dir=directory / "metrics-server",
            )
        if "registry" in runtime:
            coredns.up(plane, registry_host=runtime["registry"], work_dir=directory / "coredns")
            csi_hostpath.up(
                plane,
                registry_host=runtime["registry"],
                work_dir=directory / "csi-hostpath",
                root_dir=csi_hostpath.node_root_dir(Path(state["node"]["config"])),
                node=state["node"]["name"],
            )
    say(NODE_NOTE)
    join_up.print_join_command(plane)
    print(f"export KUBECONFIG={plane.admin_kubeconfig}")
    print(f"export PATH={plane.kubectl_path.parent}:$PATH")
    return 0


def _up_multinode(
    directory: Path,
    state: dict[str, Any] | None,
    plane: ControlPlane | None,
    *,
    nodes: int,
    binaries: Binaries,
) -> int:
    if plane is not None and state is not None:
        say(f"cluster already running: {plane.server} with {nodes} nodes")
    else:
        if state is not None or any(directory.iterdir()):
            say("found a stopped or broken cluster from an earlier `up`; removing it")
            teardown(directory, state)
            directory.mkdir(parents=True)
        plane, state = up_multinode.start(directory, count=nodes, binaries=binaries, say=say)
        write_state(directory, state)
    for line in up_multinode.describe(state):
        say(line)
    say(
        "each node: its own network namespace (routed link to the host), mount namespace, "
        "containerd and nodeagent; flannel (VXLAN) between them; `ip netns exec <netns> ...` "
        "enters one; nodes.json in " + str(directory / "nodes")
    )
    print(f"export KUBECONFIG={plane.admin_kubeconfig}")
    print(f"export PATH={plane.kubectl_path.parent}:$PATH")
    return 0


def down() -> int:
    directory = state_dir()
    if not directory.exists():
        say("nothing to stop (no cluster from `up`)")
        return 0
    with locked(directory):
        state = read_state(directory)
        teardown(directory, state)
    say(f"stopped the local cluster and removed {directory}")
    return 0


def join_command() -> int:
    """`make join-command`: a new token and the join line for the running `up` cluster."""
    plane = running_plane(read_state(state_dir()))
    if plane is None:
        say("no running cluster from `make up`")
        return 1
    join_up.print_join_command(plane)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["up"] and (len(argv) == 1 or (len(argv) == 3 and argv[1] == "--nodes")):
        count = argv[2] if len(argv) == 3 else "1"
        if not count.isdigit() or int(count) < 1:
            print(f"--nodes wants a whole number >= 1, not {count!r}", file=sys.stderr)
            return 2
        return up(int(count))
    if argv == ["down"]:
        return down()
    if argv == ["join-command"]:
        return join_command()
    print("usage: python -m harness up [--nodes N] | down | join-command", file=sys.stderr)
    return 2

"""`make up NODES=N` (N >= 2): the control plane of `make up`, a registry on 198.18.0.1 and N
nodeagent nodes in namespaces of their own (`harness.multinode`), each joined with the printed
join command (`nodeagent join`), flannel as the pod network and CoreDNS as the cluster DNS.

`start` returns the JSON-able state `up.py` keeps in ``state.json``; `stop` undoes it from that
state alone (`make down`, or the next `up` finding a broken cluster). The nodes are described in
``<up dir>/nodes/nodes.json`` (names, IPs, netns, pids) for other tools.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import coredns, flannel, mirrors, multinode, netsafety, registry
from harness.build import Binaries
from harness.controlplane import ControlPlane, Layout, start_control_plane, stop_recorded
from harness.controlplane_args import API_ADDRESS
from harness.images import build_images
from harness.versions import load_versions

UP_INDEX = 0  # `make up`'s cluster index (addresses 198.18.16.0/24)


def start(
    directory: Path, *, count: int, binaries: Binaries, say: Callable[[str], None]
) -> tuple[ControlPlane, dict[str, Any]]:
    """Start everything; on failure the partial state is returned in the exception's notes and
    `up.py` tears it down on the next run (as for one node)."""
    state: dict[str, Any] = {"nodes": count}
    started = time.monotonic()
    cluster_dir = directory / "cluster"
    logs = directory / "logs"
    ca = Layout(root=cluster_dir, log_dir=logs).pki / "ca.crt"
    say("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler ...")
    plane = start_control_plane(
        binaries=binaries,
        root=cluster_dir,
        log_dir=logs,
        detached=True,
        apiserver_extra_args=[f"--kubelet-certificate-authority={ca}"],
    )
    state["control_plane"] = plane.state()
    say(f"control plane ready in {time.monotonic() - started:.1f}s: {plane.server}")
    try:
        _start_nodes(plane, directory, state, count=count, say=say)
    except BaseException as error:
        error.add_note(f"partial state: {state}")
        stop(state)
        raise
    return plane, state


def _start_nodes(
    plane: ControlPlane,
    directory: Path,
    state: dict[str, Any],
    *,
    count: int,
    say: Callable[[str], None],
) -> None:
    versions = load_versions()
    holder = plane.procs[0].pid
    state["route_holder"], state["routes_held"] = holder, []
    for cidr in (versions.cluster_cidr, versions.service_cidr):
        if netsafety.hold_unreachable(cidr, holder=holder):
            state["routes_held"].append(cidr)
    reg = registry.start_registry(
        directory / "registry",
        log_path=directory / "logs" / "registry.log",
        detached=True,
        address=API_ADDRESS,
    )
    state["registry_dir"], state["registry"] = str(reg.base_dir), reg.host
    say(f"registry on {reg.url} (reachable from every node)")
    built = build_images()
    for recipe, image in built.items():
        registry.push_image(reg.host, image.layout, f"{recipe}:latest")
    mirrors.push_stock(reg.host, {recipe: image.layout for recipe, image in built.items()})
    pushed = flannel.push(reg.host, directory / "images")
    say(f"images pushed: pause, busybox, {', '.join(pushed)}")
    cluster = multinode.add_nodes(
        plane,
        index=UP_INDEX,
        count=count,
        directory=directory / "nodes",
        registry_host=reg.host,
        images={recipe: image.tarball for recipe, image in built.items()},
        detached=True,
        say=say,
    )
    state["multinode"] = cluster.state()
    multinode.write_state(cluster)
    flannel.deploy(plane, registry_host=reg.host, work_dir=directory / "images")
    say("flannel applied (kube-flannel/kube-flannel-ds); waiting for it on every node ...")
    flannel.rollout(plane)
    multinode.wait_ready(plane, [n.name for n in cluster.nodes])
    multinode.route_pod_cidrs(cluster)
    say(f"{count} nodes Ready: " + ", ".join(f"{n.name} {n.ip}" for n in cluster.nodes))
    coredns.up(plane, registry_host=reg.host, work_dir=directory / "coredns")


def stop(state: dict[str, Any] | None) -> None:
    """Undo `start` (newest first); safe on partial states."""
    if not state:
        return
    multinode.teardown_recorded(state.get("multinode"))
    if "registry_dir" in state:
        registry.stop_registry(Path(state["registry_dir"]))
    for cidr in reversed(state.get("routes_held", [])):
        netsafety.release_unreachable(cidr, holder=state["route_holder"])
    stop_recorded(state.get("control_plane", {}))


def describe(state: dict[str, Any]) -> list[str]:
    """One line per node for `up`'s summary."""
    return [
        f"{r['name']}: IP {r['ip']}, netns {r['netns']} (ip netns exec {r['netns']} ...)"
        for r in (state.get("multinode") or {}).get("nodes", [])
    ]

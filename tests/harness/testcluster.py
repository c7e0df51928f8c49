"""A multi-node cluster for a test session, independent of `make up`'s, removed even on failure.

    with multinode_cluster(count=3, work=tmp) as cluster:
        cluster.plane.kubectl("get", "nodes")
        cluster.nodes[0].ip, cluster.nodes[0].netns, cluster.stop_agent(cluster.nodes[1])

Its own control plane (the apiserver on 198.18.0.1 like every harness control plane), its own
registry on 198.18.0.1 with pause, busybox and flannel's images, a cluster index leased from
`nodenet` (addresses 198.18.<16+k>.0/24, never `make up`'s k = 0), N nodes joined by
`nodeagent join` (`node_up.join_node`), flannel rolled out and every Node Ready. Everything it
started is stopped and removed when the block ends, whatever happened inside it; a killed
session's leftovers are removed by the next session that leases the same index.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from harness import flannel, mirrors, multinode, netsafety, nodenet, registry
from harness.build import ensure_built
from harness.controlplane import Layout, start_control_plane
from harness.controlplane_args import API_ADDRESS
from harness.images import build_images

ROLLOUT_TIMEOUT = "300s"


def _remove_stale(index: int) -> None:
    """A killed session's namespaces and links of cluster `index` (its processes died with it:
    they are started with PDEATHSIG)."""
    stale = nodenet.stale_nodes(index)
    if stale:
        multinode.teardown_recorded({"index": index, "directory": "/nonexistent", "nodes": []})


@contextlib.contextmanager
def multinode_cluster(
    *,
    count: int = 3,
    work: Path | None = None,
    log_dir: Path | None = None,
    root_size: str | None = None,
) -> Iterator[multinode.Cluster]:
    """Start the cluster; stop and remove all of it when the block ends. `root_size` puts each
    node's root dir on a tmpfs of that size."""
    binaries = ensure_built(quiet=True)
    base = Path(tempfile.mkdtemp(prefix="na-mn-", dir=work))  # short: socket paths have a limit
    logs = log_dir or base / "logs"
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, base, True)
        index = stack.enter_context(nodenet.leased())
        _remove_stale(index)
        ca = Layout(root=base / "cp", log_dir=logs).pki / "ca.crt"
        plane = start_control_plane(
            binaries=binaries,
            root=base / "cp",
            log_dir=logs,
            apiserver_extra_args=[f"--kubelet-certificate-authority={ca}"],
        )
        stack.callback(plane.stop)
        for cidr in (plane.cluster_cidr, plane.service_cidr):
            if netsafety.hold_unreachable(cidr):
                stack.callback(netsafety.release_unreachable, cidr)
        reg = registry.start_registry(
            base / "registry", log_path=logs / "registry.log", address=API_ADDRESS
        )
        stack.callback(reg.stop)
        built = build_images()
        for recipe, image in built.items():
            registry.push_image(reg.host, image.layout, f"{recipe}:latest")
        mirrors.push_stock(reg.host, {recipe: image.layout for recipe, image in built.items()})
        cluster = multinode.add_nodes(
            plane,
            index=index,
            count=count,
            directory=base / "nodes",
            registry_host=reg.host,
            images={recipe: image.tarball for recipe, image in built.items()},
            root_size=root_size,
        )
        stack.callback(cluster.teardown)
        flannel.deploy(plane, registry_host=reg.host, work_dir=base / "images")
        flannel.rollout(plane, timeout=ROLLOUT_TIMEOUT)
        multinode.wait_ready(plane, [n.name for n in cluster.nodes])
        multinode.route_pod_cidrs(cluster)
        yield cluster

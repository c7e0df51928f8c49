"""``Node.status.images``: the setter, the facts it reads and when it causes a patch."""

from __future__ import annotations

import asyncio
import ipaddress
from pathlib import Path
from typing import Any

import pytest

from nodeagent.apiserver import NODES
from nodeagent.clock import FrozenClock
from nodeagent.gc import ImageList
from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.kuberuntime import types as cri
from nodeagent.nodestatus import setters
from nodeagent.nodestatus.compute import NodeFacts, compute_node, node_changed
from nodeagent.nodestatus.facts import HostFacts
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.nodestatus.setters import RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime

NODE = "node-a"
SETTINGS = NodeSettings(
    node_name=NODE,
    hostname=NODE,
    root_dir=Path("/var/lib/nodeagent"),
    kubeconfig=Path("/etc/nodeagent/kubeconfig"),
    node_ips=(ipaddress.ip_address("10.0.0.5"),),
)
NET = HostNetwork(
    addresses={"eth0": (ipaddress.ip_address("10.0.0.5"),)}, default_route_interfaces=("eth0",)
)


def image(size: int, *, id: str = "", digests: int = 1, tags: int = 1) -> cri.Image:
    return cri.Image(
        id=id or f"sha256:{size}",
        size=size,
        repo_digests=[f"r/i{size}@sha256:{n}" for n in range(digests)],
        repo_tags=[f"r/i{size}:t{n}" for n in range(tags)],
    )


def test_images_are_listed_largest_first_digests_before_tags_five_names_at_most() -> None:
    listed = setters.images(
        [image(10), image(30, digests=3, tags=4), image(20, tags=0)], max_images=2
    )

    assert listed == [
        {
            "names": ["r/i30@sha256:0", "r/i30@sha256:1", "r/i30@sha256:2", "r/i30:t0", "r/i30:t1"],
            "sizeBytes": 30,
        },
        {"names": ["r/i20@sha256:0"], "sizeBytes": 20},
    ]


def test_equal_sizes_are_ordered_by_id_descending_so_the_list_is_stable() -> None:
    a, b = image(5, id="sha256:a", tags=0), image(5, id="sha256:b", tags=0)

    listed = setters.images([a, b], max_images=50)

    assert listed == setters.images([b, a], max_images=50)
    assert [i["names"] for i in listed] == [list(b.repo_digests), list(a.repo_digests)]


@pytest.mark.parametrize(
    ("max_images", "sizes"),
    [
        pytest.param(50, list(range(60, 10, -1)), id="nodeStatusMaxImages 50: the 50 largest"),
        pytest.param(-1, list(range(60, 0, -1)), id="-1 lists every image"),
        pytest.param(0, [], id="0 lists none"),
    ],
)
def test_node_status_max_images_caps_the_list(max_images: int, sizes: list[int]) -> None:
    listed = setters.images([image(n) for n in range(1, 61)], max_images=max_images)

    assert [i["sizeBytes"] for i in listed] == sizes


def facts(images: tuple[cri.Image, ...] | None) -> NodeFacts:
    return NodeFacts(
        now=FrozenClock().now(),
        host=HostInfo(hostname=NODE, num_cpus=2, memory_bytes=2**30, boot_id="b"),
        network=NET,
        rootfs_bytes=2**34,
        runtime=RuntimeStatus(errors=(), version="containerd://1.6.20"),
        images=images,
    )


def test_images_change_the_node_only_when_the_list_changes() -> None:
    old: dict[str, Any] = {"metadata": {"name": NODE}, "status": {}}
    first = compute_node(old, facts((image(10), image(20))), SETTINGS).node
    assert first["status"]["images"] == [
        {"names": ["r/i20@sha256:0", "r/i20:t0"], "sizeBytes": 20},
        {"names": ["r/i10@sha256:0", "r/i10:t0"], "sizeBytes": 10},
    ]

    same = compute_node(first, facts((image(20), image(10))), SETTINGS).node
    unknown = compute_node(first, facts(None), SETTINGS).node
    more = compute_node(first, facts((image(10), image(20), image(5))), SETTINGS).node
    none = compute_node(first, facts(()), SETTINGS).node

    assert not node_changed(first, same)
    assert not node_changed(first, unknown)  # not listed yet: left as it was
    assert node_changed(first, more)
    assert "images" not in none["status"]


async def test_host_facts_carry_the_runtime_image_list(tmp_path: Path) -> None:
    runtime = FakeRuntime()
    runtime.add_image("docker.io/library/busybox:1.36", size=1234)
    images = ImageList(images=runtime)
    settings = NodeSettings(
        node_name=NODE,
        hostname=NODE,
        root_dir=tmp_path,
        kubeconfig=tmp_path / "kubeconfig",
        node_ips=SETTINGS.node_ips,
    )
    host_facts = HostFacts(
        settings=settings,
        clock=FrozenClock(),
        runtime_status=lambda: RuntimeStatus(errors=(), version="fake://1.0.0"),
        images=images.images,
        root=tmp_path,
    )

    before = (await host_facts()).images
    await images.refresh()
    after = (await host_facts()).images

    assert before is None
    assert after is not None
    assert [(i.repo_tags[0], i.size) for i in after] == [("docker.io/library/busybox:1.36", 1234)]


class Facts:
    def __init__(self, server: FakeApiServer, images: ImageList) -> None:
        self.clock = server.clock
        self.images = images

    async def __call__(self) -> NodeFacts:
        listed = self.images.images()
        return NodeFacts(
            now=self.clock.now(),
            host=HostInfo(hostname=NODE, num_cpus=2, memory_bytes=2**30, boot_id="b"),
            network=NET,
            rootfs_bytes=2**34,
            runtime=RuntimeStatus(errors=(), version="containerd://1.6.20"),
            images=None if listed is None else tuple(listed),
        )


class NoEvents:
    def record(self, type: str, reason: str, message: str) -> None:
        pass


def status_patches(server: FakeApiServer) -> list[Any]:
    return [c.body for c in server.calls_to("patch", "nodes")]


@pytest.mark.looptime
async def test_a_new_image_reaches_the_node_status_at_the_next_listing_and_sync() -> None:
    server = FakeApiServer()
    runtime = FakeRuntime()
    pause = runtime.add_image("registry.k8s.io/pause:3.10", size=300_000)
    images = ImageList(images=runtime)
    status = NodeStatusManager(
        api=server, settings=SETTINGS, facts=Facts(server, images), events=NoEvents()
    )
    tasks = [asyncio.create_task(images.run()), asyncio.create_task(status.run())]
    try:
        await asyncio.sleep(5)
        node = server.stored(NODES, NODE)
        assert node is not None
        assert node["status"]["images"] == [
            {"names": [*pause.repo_digests, *pause.repo_tags], "sizeBytes": 300_000}
        ]
        patches = len(status_patches(server))

        await asyncio.sleep(60)  # listed again at 30s and 60s, synced every 10s: no change
        assert len(status_patches(server)) == patches

        runtime.add_image("docker.io/library/busybox:1.36", size=1_000_000)
        await asyncio.sleep(40)  # listed at 90s, reported by the next sync
        node = server.stored(NODES, NODE)
        assert node is not None
        assert [i["sizeBytes"] for i in node["status"]["images"]] == [1_000_000, 300_000]
        new_patches = status_patches(server)[patches:]
        assert len(new_patches) == 1
        assert "images" in new_patches[0]["status"]
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

"""CSI raw block volumes (``volumeMode: Block``) through the volume manager, with a fake
driver's node side: the kubelet's staging, publish and pod link paths, a block capability in
each RPC, the container's device through the link, the reverse on teardown, and the clean-up
a restarted agent does from the records on disk."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_csi_volumes import DRIVER, NODE, Node  # the same node and driver

from nodeagent.kuberuntime.mounts import HostDevice
from nodeagent.podspec import Pod
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_csi import FakeCsiNode, csi_pv
from nodeagent.testing.pods import container, pod
from nodeagent.volumemanager.claims import PVCS, PVS
from nodeagent.volumemanager.csi.driverinfo import CSIDRIVERS
from nodeagent.volumemanager.csi.paths import attachment_name

HANDLE = "vol-blk"


@pytest.fixture
def server() -> FakeApiServer:
    s = FakeApiServer()
    claim = s.seed(
        PVCS,
        {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"volumeName": "pv-1", "volumeMode": "Block"},
            "status": {"phase": "Bound"},
        },
    )
    s.seed(
        PVS,
        csi_pv(
            "pv-1",
            driver=DRIVER,
            handle=HANDLE,
            claim_uid=claim["metadata"]["uid"],
            volumeMode="Block",
            csi={"volumeAttributes": {"kind": "loop"}},
        ),
    )
    s.seed(
        CSIDRIVERS,
        {
            "metadata": {"name": DRIVER},
            "spec": {"attachRequired": False, "volumeLifecycleModes": ["Persistent"]},
        },
    )
    return s


@pytest.fixture
def driver() -> FakeCsiNode:
    return FakeCsiNode()


@pytest.fixture
def node(tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode) -> Node:
    return Node(tmp_path / "root", server, driver)


def block_pod(uid: str, name: str = "p", *, read_only: bool = False) -> Pod:
    claim = {"claimName": "data", **({"readOnly": True} if read_only else {})}
    return pod(
        name,
        uid=uid,
        volumes=[{"name": "data", "persistentVolumeClaim": claim}],
        containers=[container("app", volumeDevices=[{"name": "data", "devicePath": "/dev/xvda"}])],
    )


def devices(root: Path) -> Path:
    return root / "plugins" / "kubernetes.io" / "csi" / "volumeDevices"


async def test_staged_once_published_per_pod_on_a_file_and_linked_from_the_pod(
    node: Node, driver: FakeCsiNode
) -> None:
    first = await node.volumes.set_up(block_pod("uid-1"))
    second = await node.volumes.set_up(block_pod("uid-2", "q"))
    assert first.ready and second.ready, (first.failures, second.failures)
    staging = devices(node.root) / "staging" / "pv-1"
    publish = devices(node.root) / "publish" / "pv-1"
    assert driver.staged == {str(staging): HANDLE}
    assert set(driver.published) == {str(publish / "uid-1"), str(publish / "uid-2")}
    assert driver.calls.count("NodeStageVolume") == 1
    assert all(r.capability.block for r in driver.requests)
    assert driver.requests[0].volume_context == {"kind": "loop"}
    assert json.loads((devices(node.root) / "pv-1" / "data" / "vol_data.json").read_text()) == {
        "specVolID": "pv-1",
        "volumeHandle": HANDLE,
        "driverName": DRIVER,
        "nodeName": NODE,
        "attachmentID": attachment_name(HANDLE, DRIVER, NODE),
    }
    link = node.root / "pods" / "uid-1" / "volumeDevices" / "kubernetes.io~csi" / "pv-1"
    assert os.readlink(link) == str(publish / "uid-1")
    [app] = block_pod("uid-1").spec.containers
    assert first.container_devices(app) == [HostDevice("/dev/xvda", str(link), "mrw")]
    assert node.csi.volumes.volumes_in_use() == [f"kubernetes.io/csi/{DRIVER}^{HANDLE}"]


async def test_a_read_only_claim_is_published_read_only_and_the_device_is_read_only(
    node: Node, driver: FakeCsiNode
) -> None:
    result = await node.volumes.set_up(block_pod("uid-1", read_only=True))
    assert result.ready, result.failures
    publish = [r for r in driver.requests if hasattr(r, "target_path")]
    assert [r.read_only for r in publish] == [True]
    [app] = block_pod("uid-1").spec.containers
    assert [d.permissions for d in result.container_devices(app)] == ["r"]


async def test_teardown_unpublishes_each_pod_and_unstages_after_the_last(
    node: Node, driver: FakeCsiNode
) -> None:
    assert (await node.volumes.set_up(block_pod("uid-1"))).ready
    assert (await node.volumes.set_up(block_pod("uid-2", "q"))).ready
    assert await node.volumes.tear_down("uid-1")
    assert driver.staged and len(driver.published) == 1
    assert not (node.root / "pods" / "uid-1").exists()
    assert await node.volumes.tear_down("uid-2")
    assert driver.published == {} and driver.staged == {}
    assert driver.calls[-2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    left = {p.relative_to(devices(node.root)) for p in devices(node.root).rglob("*")}
    assert left == {Path("staging"), Path("publish")}
    assert node.csi.volumes.volumes_in_use() == []


async def test_a_restarted_agent_unmaps_and_unstages_from_the_records(
    tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode
) -> None:
    first = Node(tmp_path / "root", server, driver)
    assert (await first.volumes.set_up(block_pod("uid-1"))).ready
    # the agent is killed; the pod was deleted meanwhile; a new agent starts
    second = Node(tmp_path / "root", server, driver)
    assert await second.volumes.clean_orphans(keep=lambda uid: False) == ["uid-1"]
    assert driver.published == {} and driver.staged == {}
    assert driver.calls[-2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]
    assert not (devices(tmp_path / "root") / "pv-1").exists()


async def test_a_stage_left_without_a_publish_is_unstaged_after_a_restart(
    tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode
) -> None:
    first = Node(tmp_path / "root", server, driver)
    driver.failures["NodePublishVolume"] = "DeadlineExceeded"  # uncertain
    result = await first.volumes.set_up(block_pod("uid-1"))
    assert result.events == {
        "data": 'MapVolume.MapPodDevice failed for volume "pv-1" : kubernetes.io/csi: '
        "blockMapper.publishVolumeForBlock failed: rpc error: code = DeadlineExceeded "
        "desc = NodePublishVolume failed"
    }
    del driver.failures["NodePublishVolume"]
    second = Node(tmp_path / "root", server, driver)
    assert await second.volumes.clean_orphans(keep=lambda uid: False) == ["uid-1"]
    assert driver.staged == {}
    assert not (devices(tmp_path / "root") / "pv-1").exists()


async def test_a_failed_stage_is_a_failed_set_up_device(node: Node, driver: FakeCsiNode) -> None:
    driver.failures["NodeStageVolume"] = "Internal"
    result = await node.volumes.set_up(block_pod("uid-1"))
    assert result.events == {
        "data": 'MapVolume.SetUpDevice failed for volume "pv-1" : kubernetes.io/csi: '
        "blockMapper.stageVolumeForBlock failed: rpc error: code = Internal "
        "desc = NodeStageVolume failed"
    }
    assert "NodePublishVolume" not in driver.calls
    del driver.failures["NodeStageVolume"]
    assert (await node.volumes.set_up(block_pod("uid-1"))).ready


async def test_a_driver_not_registered_keeps_the_pod_waiting(node: Node) -> None:
    await node.csi.drivers.remove(DRIVER)
    result = await node.volumes.set_up(block_pod("uid-1"))
    assert result.events == {
        "data": 'MapVolume.SetUpDevice failed for volume "pv-1" : kubernetes.io/csi: '
        "blockMapper.SetUpDevice failed to get CSI client: driver name "
        f"{DRIVER} not found in the list of registered CSI drivers"
    }


async def test_a_block_claim_in_volume_mounts_is_refused_by_its_mode(node: Node) -> None:
    p = pod(
        "p",
        uid="uid-1",
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        containers=[container("app", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
    )
    result = await node.volumes.set_up(p)
    assert not result.ready
    assert "volume data has volumeMode Block, but is specified in volumeMounts" in str(
        result.events
    )

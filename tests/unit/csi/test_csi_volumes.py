"""CSI volumes through the volume manager, with a fake driver's node side and the in-memory
API: stage once per volume and publish per pod on the kubelet's paths, ``vol_data.json``
written before each RPC, the reverse on teardown, attach and ``CSIDriver`` options, and the
clean-up a restarted agent does from what is on disk."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from nodeagent.podspec import Pod
from nodeagent.testing.fake_apiserver import Call, FakeApiServer
from nodeagent.testing.fake_csi import FakeCsiNode, csi_pv
from nodeagent.testing.fake_volumes import FakeContentSource, FakeMounter
from nodeagent.testing.pods import container, pod
from nodeagent.volumemanager.claims import PVCS, PVS
from nodeagent.volumemanager.csi import CsiPlugin
from nodeagent.volumemanager.csi.driverinfo import CSIDRIVERS
from nodeagent.volumemanager.csi.drivers import Driver
from nodeagent.volumemanager.csi.paths import attachment_name
from nodeagent.volumemanager.csi.volumes import VOLUME_ATTACHMENTS
from nodeagent.volumemanager.manager import VolumeManager

NODE = "node-a"
DRIVER = "hostpath.csi.k8s.io"
HANDLE = "vol-123"


class Node:
    def __init__(self, root: Path, server: FakeApiServer, driver: FakeCsiNode) -> None:
        self.root = root
        self.server = server
        self.driver = driver
        self.csi = CsiPlugin(
            root_dir=str(root), node_name=NODE, api=server, client=lambda _: driver
        )
        self.csi.drivers.set(Driver(DRIVER, "/csi.sock", (1, 0, 0)))
        self.volumes = VolumeManager(
            root_dir=str(root),
            content=FakeContentSource(),
            mounter=FakeMounter(),
            api=server,
            node_name=NODE,
            csi=self.csi.volumes,
        )


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def driver() -> FakeCsiNode:
    return FakeCsiNode()


@pytest.fixture
def node(tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode) -> Node:
    return Node(tmp_path / "root", server, driver)


def seed_claim(server: FakeApiServer, *, attach: bool = False, **csi: Any) -> None:
    claim = server.seed(
        PVCS,
        {
            "metadata": {"name": "data", "namespace": "default"},
            "spec": {"volumeName": "pv-1"},
            "status": {"phase": "Bound"},
        },
    )
    server.seed(
        PVS,
        csi_pv(
            "pv-1",
            driver=DRIVER,
            handle=HANDLE,
            claim_uid=claim["metadata"]["uid"],
            csi={"volumeAttributes": {"storage.kubernetes.io/csiProvisionerIdentity": "x"}, **csi},
        ),
    )
    server.seed(
        CSIDRIVERS,
        {
            "metadata": {"name": DRIVER},
            "spec": {
                "attachRequired": attach,
                "podInfoOnMount": True,
                "fsGroupPolicy": "File",
                "volumeLifecycleModes": ["Persistent", "Ephemeral"],
            },
        },
    )


def claim_pod(uid: str, name: str = "p", fs_group: int | None = None) -> Pod:
    return pod(
        name,
        uid=uid,
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
        containers=[container("app", volumeMounts=[{"name": "data", "mountPath": "/data"}])],
        **({"securityContext": {"fsGroup": fs_group}} if fs_group is not None else {}),
    )


def staging(root: Path) -> Path:
    [staged] = (root / "plugins" / "kubernetes.io" / "csi" / DRIVER).iterdir()
    return staged


async def test_stage_once_publish_per_pod_and_the_reverse(node: Node, driver: FakeCsiNode) -> None:
    seed_claim(node.server)
    first = await node.volumes.set_up(claim_pod("uid-1"))
    second = await node.volumes.set_up(claim_pod("uid-2", "q"))
    assert first.ready and second.ready, (first.failures, second.failures)
    target = node.root / "pods" / "uid-1" / "volumes" / "kubernetes.io~csi" / "pv-1" / "mount"
    assert first.mounted["data"].path == str(target)
    global_mount = staging(node.root) / "globalmount"
    assert driver.staged == {str(global_mount): HANDLE}
    assert set(driver.published) == {
        str(target),
        str(node.root / "pods" / "uid-2" / "volumes" / "kubernetes.io~csi" / "pv-1" / "mount"),
    }
    assert driver.calls.count("NodeStageVolume") == 1
    assert json.loads((staging(node.root) / "vol_data.json").read_text()) == {
        "volumeHandle": HANDLE,
        "driverName": DRIVER,
    }
    assert json.loads((target.parent / "vol_data.json").read_text()) == {
        "specVolID": "pv-1",
        "volumeHandle": HANDLE,
        "driverName": DRIVER,
        "nodeName": NODE,
        "volumeLifecycleMode": "Persistent",
        "attachmentID": attachment_name(HANDLE, DRIVER, NODE),
    }
    publish = driver.requests[-1]
    assert publish.staging_target_path == str(global_mount)
    assert publish.volume_context["csi.storage.k8s.io/pod.name"] == "q"
    assert publish.volume_context["csi.storage.k8s.io/ephemeral"] == "false"

    assert await node.volumes.tear_down("uid-1")
    assert str(target) not in driver.published
    assert driver.staged  # the other pod still uses it
    assert not (node.root / "pods" / "uid-1").exists()
    assert await node.volumes.tear_down("uid-2")
    assert driver.published == {} and driver.staged == {}
    assert not (node.root / "plugins" / "kubernetes.io" / "csi" / DRIVER).exists() or not list(
        (node.root / "plugins" / "kubernetes.io" / "csi" / DRIVER).iterdir()
    )


async def test_a_driver_not_registered_keeps_the_pod_waiting(node: Node) -> None:
    seed_claim(node.server)
    await node.csi.drivers.remove(DRIVER)
    result = await node.volumes.set_up(claim_pod("uid-1"))
    assert not result.ready
    assert result.events == {
        "data": 'MountVolume.MountDevice failed for volume "pv-1" : kubernetes.io/csi: '
        "attacher.MountDevice failed to create newCsiDriverClient: driver name "
        f"{DRIVER} not found in the list of registered CSI drivers"
    }


async def test_attach_required_waits_for_the_volume_attachment(
    node: Node, driver: FakeCsiNode
) -> None:
    seed_claim(node.server, attach=True)
    result = await node.volumes.set_up(claim_pod("uid-1"))
    assert not result.ready and result.events == {}  # no Event while it is being attached
    assert "NodeStageVolume" not in driver.calls
    node.server.seed(
        VOLUME_ATTACHMENTS,
        {
            "metadata": {"name": attachment_name(HANDLE, DRIVER, NODE)},
            "status": {"attached": True, "attachmentMetadata": {"device": "/dev/x"}},
        },
    )
    result = await node.volumes.set_up(claim_pod("uid-1"))
    assert result.ready, result.failures
    assert driver.requests[0].publish_context == {"device": "/dev/x"}


async def test_a_failed_publish_is_a_failed_mount_and_leaves_no_directory(
    node: Node, driver: FakeCsiNode
) -> None:
    seed_claim(node.server)
    driver.failures["NodePublishVolume"] = "Internal"
    result = await node.volumes.set_up(claim_pod("uid-1"))
    assert result.events == {
        "data": 'MountVolume.SetUp failed for volume "pv-1" : rpc error: code = Internal '
        "desc = NodePublishVolume failed"
    }
    assert not (node.root / "pods" / "uid-1" / "volumes" / "kubernetes.io~csi" / "pv-1").exists()


async def test_a_restarted_agent_unpublishes_and_unstages_from_the_records(
    tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode
) -> None:
    first = Node(tmp_path / "root", server, driver)
    seed_claim(server)
    assert (await first.volumes.set_up(claim_pod("uid-1"))).ready
    # the agent is killed; the pod was deleted meanwhile; a new agent starts
    second = Node(tmp_path / "root", server, driver)
    assert await second.volumes.clean_orphans(keep=lambda uid: False) == ["uid-1"]
    assert driver.published == {} and driver.staged == {}
    assert driver.calls[-2:] == ["NodeUnpublishVolume", "NodeUnstageVolume"]


async def test_a_stage_left_without_a_publish_is_unstaged(
    tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode
) -> None:
    first = Node(tmp_path / "root", server, driver)
    seed_claim(server)
    driver.failures["NodePublishVolume"] = "DeadlineExceeded"  # uncertain: the dir stays
    assert not (await first.volumes.set_up(claim_pod("uid-1"))).ready
    del driver.failures["NodePublishVolume"]
    second = Node(tmp_path / "root", server, driver)
    await second.volumes.clean_orphans(keep=lambda uid: False)
    assert driver.staged == {}


async def test_an_unregistered_driver_keeps_the_pod_directory_until_it_returns(
    tmp_path: Path, server: FakeApiServer, driver: FakeCsiNode
) -> None:
    first = Node(tmp_path / "root", server, driver)
    seed_claim(server)
    assert (await first.volumes.set_up(claim_pod("uid-1"))).ready
    second = Node(tmp_path / "root", server, driver)
    await second.csi.drivers.remove(DRIVER)
    assert await second.volumes.clean_orphans(keep=lambda uid: False) == []
    assert (tmp_path / "root" / "pods" / "uid-1").exists()
    second.csi.drivers.set(Driver(DRIVER, "/csi.sock", (1, 0, 0)))
    assert await second.volumes.clean_orphans(keep=lambda uid: False) == ["uid-1"]


async def test_an_inline_volume_is_published_without_staging(
    node: Node, driver: FakeCsiNode
) -> None:
    seed_claim(node.server)
    p = pod(
        "p",
        uid="uid-1",
        volumes=[{"name": "scratch", "csi": {"driver": DRIVER, "volumeAttributes": {"a": "b"}}}],
    )
    result = await node.volumes.set_up(p)
    assert result.ready, result.failures
    assert driver.staged == {}
    [request] = driver.requests
    assert request.volume_id.startswith("csi-")
    assert request.volume_context["a"] == "b"
    assert request.volume_context["csi.storage.k8s.io/ephemeral"] == "true"
    assert await node.volumes.tear_down("uid-1")
    assert driver.published == {}


async def test_an_inline_volume_of_a_persistent_only_driver_is_refused(
    node: Node, server: FakeApiServer
) -> None:
    server.seed(CSIDRIVERS, {"metadata": {"name": DRIVER}, "spec": {}})
    p = pod("p", uid="uid-1", volumes=[{"name": "scratch", "csi": {"driver": DRIVER}}])
    result = await node.volumes.set_up(p)
    assert result.events == {
        "scratch": 'MountVolume.SetUp failed for volume "scratch" : kubernetes.io/csi: '
        'mounter.SetupAt failed to check volume lifecycle mode: volume mode "Ephemeral" not '
        f"supported by driver {DRIVER} (only supports [])"
    }


async def test_volume_stats_come_from_the_driver_with_the_claim(
    node: Node, driver: FakeCsiNode
) -> None:
    from nodeagent.csi.types import NodeCapabilities, VolumeStats

    driver.capabilities = NodeCapabilities(stage_unstage=True, get_volume_stats=True)
    driver.stats = VolumeStats(
        capacity_bytes=1000,
        available_bytes=600,
        used_bytes=400,
        inodes=10,
        inodes_free=7,
        inodes_used=3,
    )
    seed_claim(node.server)
    assert (await node.volumes.set_up(claim_pod("uid-1"))).ready
    assert await node.volumes.persistent_volume_stats("uid-1") == [
        {
            "name": "data",
            "availableBytes": 600,
            "capacityBytes": 1000,
            "usedBytes": 400,
            "inodesFree": 7,
            "inodes": 10,
            "inodesUsed": 3,
            "pvcRef": {"name": "data", "namespace": "default"},
        }
    ]


async def test_a_claim_the_resizer_grew_is_expanded_on_the_node_and_marked_done(
    node: Node, driver: FakeCsiNode, server: FakeApiServer
) -> None:
    seed_claim(server)
    assert (await node.volumes.set_up(claim_pod("uid-1"))).ready

    def grow_pv(pv: dict[str, Any]) -> None:
        pv["spec"]["capacity"] = {"storage": "2Gi"}

    def pending(claim: dict[str, Any]) -> None:
        claim["status"]["capacity"] = {"storage": "1Gi"}
        claim["status"]["allocatedResourceStatuses"] = {"storage": "NodeResizePending"}
        claim["status"]["conditions"] = [{"type": "FileSystemResizePending", "status": "True"}]

    server.modify(PVS, "pv-1", grow_pv)
    server.modify(PVCS, "data", pending, "default")
    assert (await node.volumes.set_up(claim_pod("uid-1"))).ready
    assert driver.expanded == {HANDLE: 2 * 2**30}
    status = server.stored(PVCS, "data", "default")["status"]  # type: ignore[index]  # stored() is None when absent; here it exists
    assert status["capacity"] == {"storage": "2Gi"}
    assert "storage" not in (status.get("allocatedResourceStatuses") or {})
    assert not status.get("conditions")


@pytest.mark.looptime
async def test_token_requests_and_republish_as_the_csidriver_asks(
    node: Node, driver: FakeCsiNode, server: FakeApiServer
) -> None:
    server.seed(
        CSIDRIVERS,
        {
            "metadata": {"name": DRIVER},
            "spec": {
                "attachRequired": False,
                "requiresRepublish": True,
                "tokenRequests": [{"audience": "vault", "expirationSeconds": 600}],
                "volumeLifecycleModes": ["Ephemeral"],
            },
        },
    )

    def issue(call: Call) -> dict[str, Any]:
        status = {"token": "t0k", "expirationTimestamp": "2026-01-01T00:10:00Z"}
        return {**call.body, "status": status}

    server.react("create", "serviceaccounts", issue, times=None)
    p = pod(
        "p",
        uid="uid-1",
        serviceAccountName="default",
        volumes=[{"name": "secrets", "csi": {"driver": DRIVER}}],
    )
    assert (await node.volumes.set_up(p)).ready
    [request] = driver.requests
    assert json.loads(request.volume_context["csi.storage.k8s.io/serviceAccount.tokens"]) == {
        "vault": {"token": "t0k", "expirationTimestamp": "2026-01-01T00:10:00Z"}
    }
    [call] = server.calls_to("create", "serviceaccounts")
    assert call.body["spec"]["audiences"] == ["vault"]
    await node.volumes.set_up(p)
    assert driver.calls.count("NodePublishVolume") == 1
    await asyncio.sleep(11)
    await node.volumes.set_up(p)
    assert driver.calls.count("NodePublishVolume") == 2

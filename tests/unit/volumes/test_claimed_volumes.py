"""PVC-backed volumes through the volume manager: the claim resolved to its bound PV in the
in-memory API, hostPath and local PVs, node affinity, read-only claims and fsGroup; the
kubelet's words when a claim is not bound (a log line, no Event) and when a PV cannot be
used here (a ``FailedMount`` Event naming the PV)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.kuberuntime.mounts import HostDevice
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_volumes import FakeContentSource, FakeMounter
from nodeagent.testing.pods import container, pod
from nodeagent.volumemanager import persistent
from nodeagent.volumemanager.claims import PVCS, PVS
from nodeagent.volumemanager.manager import VolumeManager

UID = "0b7e-uid"
NODE = "node-a"


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def mounter() -> FakeMounter:
    return FakeMounter()


def new_manager(tmp_path: Path, mounter: FakeMounter, server: FakeApiServer) -> VolumeManager:
    """An agent's volume manager on ``tmp_path``; a second one is an agent restarted."""
    return VolumeManager(
        root_dir=str(tmp_path / "root"),
        content=FakeContentSource(),
        mounter=mounter,
        api=server,
        node_name=NODE,
        node_labels=lambda: {"kubernetes.io/hostname": NODE, "zone": "a"},
    )


@pytest.fixture
def manager(tmp_path: Path, mounter: FakeMounter, server: FakeApiServer) -> VolumeManager:
    return new_manager(tmp_path, mounter, server)


def claim(
    name: str = "data", *, pv: str = "pv-1", phase: str = "Bound", uid: str = "claim-uid"
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": uid},
        "spec": {"volumeName": pv if phase == "Bound" else ""},
        "status": {"phase": phase},
    }


def volume(name: str = "pv-1", claim_uid: str = "", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"claimRef": {"name": "data", "namespace": "default", "uid": claim_uid}, **spec},
    }


def claim_pod(
    read_only: bool = False,
    fs_group: int | None = None,
    *,
    name: str = "p",
    uid: str = UID,
    used_as: str = "volumeMounts",
    **extra: Any,
) -> Any:
    use = (
        {"volumeDevices": [{"name": "data", "devicePath": "/dev/xvda"}]}
        if used_as == "volumeDevices"
        else {"volumeMounts": [{"name": "data", "mountPath": "/data"}]}
    )
    return pod(
        name,
        uid=uid,
        volumes=[
            {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": read_only}}
        ],
        containers=[container("app", **use)],
        **({"securityContext": {"fsGroup": fs_group}} if fs_group is not None else {}),
        **extra,
    )


async def test_a_host_path_pv_is_its_path(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seeded = server.seed(PVCS, claim())
    server.seed(
        PVS,
        volume(
            claim_uid=seeded["metadata"]["uid"],
            hostPath={"path": str(tmp_path), "type": "Directory"},
        ),
    )
    result = await manager.set_up(claim_pod())
    assert result.ready and not result.failures
    assert result.mounted["data"].path == str(tmp_path)
    assert not result.mounted["data"].read_only
    await manager.set_up(claim_pod())  # set up once: the claim is not read again
    assert len(server.calls_to("get", "persistentvolumeclaims")) == 1


async def test_a_local_pv_is_bind_mounted_read_only_for_a_read_only_claim(
    manager: VolumeManager, server: FakeApiServer, mounter: FakeMounter, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    seeded = server.seed(PVCS, claim())
    server.seed(PVS, volume(claim_uid=seeded["metadata"]["uid"], local={"path": str(disk)}))
    result = await manager.set_up(claim_pod(read_only=True))
    target = tmp_path / "root" / "pods" / UID / "volumes" / "kubernetes.io~local-volume" / "pv-1"
    assert result.mounted["data"].path == str(target)
    assert result.mounted["data"].read_only
    assert mounter.binds == {str(target): str(disk)}
    assert mounter.read_only == {str(target)}
    assert await manager.tear_down(UID)
    assert mounter.binds == {} and not target.exists()


async def test_fs_group_is_applied_to_a_writable_local_pv(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    (disk / "sub").mkdir(parents=True)
    seeded = server.seed(PVCS, claim())
    server.seed(PVS, volume(claim_uid=seeded["metadata"]["uid"], local={"path": str(disk)}))
    gid = os.getgid() + 1 if os.geteuid() == 0 else os.getgid()
    result = await manager.set_up(claim_pod(fs_group=gid))
    assert result.ready
    # the fake mounter does not bind: ownership lands on the mount point directory
    assert os.stat(result.mounted["data"].path).st_gid == gid


@pytest.mark.parametrize(
    ("stored", "why"),
    [
        pytest.param(
            None,
            "error processing PVC default/data: failed to fetch PVC from API server: "
            'persistentvolumeclaims "data" not found',
            id="no such claim",
        ),
        pytest.param(
            claim(phase="Pending"),
            "error processing PVC default/data: PVC is not bound",
            id="claim not bound yet",
        ),
    ],
)
async def test_a_claim_that_is_not_bound_waits_without_an_event(
    manager: VolumeManager, server: FakeApiServer, stored: Any, why: str
) -> None:
    if stored is not None:
        server.seed(PVCS, stored)
    result = await manager.set_up(claim_pod())
    assert not result.ready and result.retry_in == 0.5
    assert result.failures == {"data": why}
    assert result.events == {}


async def test_a_pv_bound_to_another_claim_is_refused(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seeded = server.seed(PVCS, claim())
    server.seed(PVS, volume(claim_uid="other", hostPath={"path": str(tmp_path)}))
    result = await manager.set_up(claim_pod())
    assert result.failures == {
        "data": "error processing PVC default/data: found PV object pv-1 but its "
        f"pv.Spec.ClaimRef.UID other does not point to claim.UID {seeded['metadata']['uid']}"
    }


async def test_a_pv_for_another_node_fails_its_node_affinity_check(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seeded = server.seed(PVCS, claim())
    affinity = {
        "required": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}
                    ]
                }
            ]
        }
    }
    uid = seeded["metadata"]["uid"]
    server.seed(PVS, volume(claim_uid=uid, local={"path": str(tmp_path)}, nodeAffinity=affinity))
    result = await manager.set_up(claim_pod())
    assert result.events == {
        "data": 'MountVolume.NodeAffinity check failed for volume "pv-1" : '
        "no matching NodeSelectorTerms"
    }


@pytest.mark.parametrize(
    ("spec", "why"),
    [
        pytest.param(
            {"nfs": {"server": "n", "path": "/"}},
            'PersistentVolume "pv-1" source "nfs" is not supported on this node',
            id="nfs",
        ),
        pytest.param(
            {"hostPath": {"path": "/dev/sda"}, "volumeMode": "Block"},
            'volumeMode "Block" of PersistentVolume "pv-1" is not supported on this node',
            id="block mode of a host path pv",
        ),
    ],
)
async def test_a_pv_source_without_a_plugin_fails_by_name(
    manager: VolumeManager, server: FakeApiServer, spec: dict[str, Any], why: str
) -> None:
    seeded = server.seed(PVCS, claim())
    server.seed(PVS, volume(claim_uid=seeded["metadata"]["uid"], **spec))
    used_as = "volumeDevices" if spec.get("volumeMode") == "Block" else "volumeMounts"
    result = await manager.set_up(claim_pod(used_as=used_as))
    assert result.failures == {"data": why}
    assert result.events == {"data": f'MountVolume.SetUp failed for volume "pv-1" : {why}'}


async def test_a_generic_ephemeral_volume_uses_the_claim_the_pod_owns(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    owned = claim("p-scratch")
    owned["metadata"]["ownerReferences"] = [{"kind": "Pod", "uid": UID, "controller": True}]
    seeded = server.seed(PVCS, owned)
    pv = volume(claim_uid=seeded["metadata"]["uid"], hostPath={"path": str(tmp_path)})
    pv["spec"]["claimRef"]["name"] = "p-scratch"
    server.seed(PVS, pv)
    p = pod(
        "p",
        uid=UID,
        volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}],
    )
    result = await manager.set_up(p)
    assert result.mounted["scratch"].path == str(tmp_path)


async def test_a_generic_ephemeral_volume_refuses_a_claim_of_someone_else(
    manager: VolumeManager, server: FakeApiServer
) -> None:
    server.seed(PVCS, claim("p-scratch"))
    p = pod(
        "p",
        uid=UID,
        volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}],
    )
    result = await manager.set_up(p)
    assert result.failures == {
        "scratch": "PVC default/p-scratch was not created for pod default/p (pod is not owner)"
    }


# --- ReadWriteOncePod: one pod of the node at a time ---------------------------------------------

RWOP_EVENT = (
    'MountVolume.SetUp failed for volume "pv-1" : '
    "volume uses the ReadWriteOncePod access mode and is already in use by another pod"
)


def second_pod() -> Any:
    return claim_pod(name="q", uid="1c9f-uid")


def seed_local_pv(server: FakeApiServer, disk: Path, modes: list[str]) -> None:
    disk.mkdir(exist_ok=True)
    seeded = server.seed(PVCS, claim())
    uid = seeded["metadata"]["uid"]
    server.seed(PVS, volume(claim_uid=uid, local={"path": str(disk)}, accessModes=modes))


async def test_a_read_write_once_pod_pv_in_use_fails_a_second_pod_until_the_first_is_torn_down(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seed_local_pv(server, tmp_path / "disk", ["ReadWriteOncePod"])
    assert (await manager.set_up(claim_pod())).ready

    refused = await manager.set_up(second_pod())

    assert not refused.ready
    assert refused.events == {"data": RWOP_EVENT}
    assert (await manager.set_up(claim_pod())).ready  # the first pod keeps it
    assert await manager.tear_down(UID)
    assert (await manager.set_up(second_pod())).ready


async def test_a_pv_with_read_write_once_pod_beside_another_mode_is_shared(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seed_local_pv(server, tmp_path / "disk", ["ReadWriteOncePod", "ReadWriteOnce"])
    assert (await manager.set_up(claim_pod())).ready
    assert (await manager.set_up(second_pod())).ready


async def test_an_agent_restarted_beside_the_pod_using_it_still_refuses_a_second_pod(
    server: FakeApiServer, mounter: FakeMounter, tmp_path: Path
) -> None:
    seed_local_pv(server, tmp_path / "disk", ["ReadWriteOncePod"])

    assert (await new_manager(tmp_path, mounter, server).set_up(claim_pod())).ready

    restarted = new_manager(tmp_path, mounter, server)  # nothing in memory
    refused = await restarted.set_up(second_pod())

    assert refused.events == {"data": RWOP_EVENT}


async def test_two_pods_set_up_at_once_do_not_both_get_a_read_write_once_pod_pv(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seed_local_pv(server, tmp_path / "disk", ["ReadWriteOncePod"])

    first, second = await asyncio.gather(manager.set_up(claim_pod()), manager.set_up(second_pod()))

    assert sorted([first.ready, second.ready]) == [False, True]


# --- volumeMode: Block: a local PV's device, passed to containers through volumeDevices --------

DEVICE = "/dev/fake-disk"


@pytest.fixture
def block_device(monkeypatch: pytest.MonkeyPatch) -> str:
    """``DEVICE`` is the one block device of the node."""
    monkeypatch.setattr(persistent, "_is_block_device", lambda path: path == DEVICE)
    return DEVICE


def seed_block_pv(server: FakeApiServer, path: str = DEVICE, mode: str = "Block") -> None:
    seeded = server.seed(PVCS, claim())
    uid = seeded["metadata"]["uid"]
    server.seed(PVS, volume(claim_uid=uid, local={"path": path}, volumeMode=mode))


def device_link(tmp_path: Path, uid: str = UID) -> Path:
    pod_dir = tmp_path / "root" / "pods" / uid
    return pod_dir / "volumeDevices" / "kubernetes.io~local-volume" / "pv-1"


@pytest.mark.parametrize(("read_only", "permissions"), [(False, "mrw"), (True, "r")])
async def test_a_local_block_pv_is_linked_for_the_pod_and_passed_as_a_device(
    *,
    manager: VolumeManager,
    server: FakeApiServer,
    tmp_path: Path,
    block_device: str,
    read_only: bool,
    permissions: str,
) -> None:
    seed_block_pv(server)
    p = claim_pod(read_only=read_only, used_as="volumeDevices")

    result = await manager.set_up(p)

    assert result.ready, result.failures
    link = device_link(tmp_path)
    assert os.readlink(link) == block_device
    (app,) = p.spec.containers
    assert result.container_devices(app) == [HostDevice("/dev/xvda", str(link), permissions)]
    assert await manager.tear_down(UID)
    assert not await asyncio.to_thread(os.path.lexists, link)


@pytest.mark.parametrize(
    ("mode", "used_as", "why"),
    [
        (
            "Block",
            "volumeMounts",
            "volume data has volumeMode Block, but is specified in volumeMounts",
        ),
        (
            "Filesystem",
            "volumeDevices",
            "volume data has volumeMode Filesystem, but is specified in volumeDevices",
        ),
    ],
)
async def test_a_volume_used_against_its_mode_fails_with_the_kubelets_words(
    *,
    manager: VolumeManager,
    server: FakeApiServer,
    tmp_path: Path,
    block_device: str,
    mode: str,
    used_as: str,
    why: str,
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    seed_block_pv(server, block_device if mode == "Block" else str(disk), mode)

    result = await manager.set_up(claim_pod(used_as=used_as))

    assert result.failures == {"data": why}
    assert not device_link(tmp_path).parent.exists()


async def test_a_local_block_pv_whose_path_is_no_block_device_fails_to_map(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path, block_device: str
) -> None:
    seed_block_pv(server, str(tmp_path))

    result = await manager.set_up(claim_pod(used_as="volumeDevices"))

    assert result.events == {
        "data": f'MapVolume.MapPodDevice failed for volume "pv-1" : local volume '
        f"'{tmp_path}' is not a block device"
    }


async def test_a_device_of_a_volume_that_is_not_a_block_pv_is_a_config_error(
    manager: VolumeManager, server: FakeApiServer, tmp_path: Path
) -> None:
    seeded = server.seed(PVCS, claim())
    server.seed(
        PVS,
        volume(claim_uid=seeded["metadata"]["uid"], hostPath={"path": str(tmp_path)}),
    )
    result = await manager.set_up(claim_pod())

    def app(device_path: str) -> Any:
        devices = [{"name": "data", "devicePath": device_path}]
        return pod("x", containers=[container("app", volumeDevices=devices)]).spec.containers[0]

    with pytest.raises(ContainerConfigError, match='cannot find volume "data" to pass into'):
        result.container_devices(app("/dev/xvda"))
    with pytest.raises(ContainerConfigError, match="DevicePath `dev/xvda` must be an absolute"):
        result.container_devices(app("dev/xvda"))

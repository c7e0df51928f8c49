"""The volume manager over a real directory tree in tmp_path, with the mount table and the
content writer faked."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.kuberuntime.mounts import HostMount, Propagation, to_cri
from nodeagent.podspec import Pod
from nodeagent.testing.fake_volumes import FakeContentSource, FakeMounter
from nodeagent.testing.pods import container, pod
from nodeagent.volumemanager.manager import RETRY_MAX, VolumeManager, remove_tree
from nodeagent.volumemanager.mounter import below, parse_mountinfo

UID = "0b7e-uid"
MI = 2**20


@pytest.fixture
def mounter() -> FakeMounter:
    return FakeMounter()


@pytest.fixture
def content() -> FakeContentSource:
    return FakeContentSource()


@pytest.fixture
def manager(tmp_path: Path, mounter: FakeMounter, content: FakeContentSource) -> VolumeManager:
    return VolumeManager(
        root_dir=str(tmp_path / "root"),
        content=content,
        mounter=mounter,
        allocatable_memory=lambda: 1024 * MI,
    )


def volume_pod(*volumes: dict[str, object], mounts: list[dict[str, object]] | None = None) -> Pod:
    return pod(
        "p",
        uid=UID,
        volumes=list(volumes),
        containers=[container("app", volumeMounts=mounts or [])],
    )


def vol_dir(tmp_path: Path, plugin: str, name: str) -> Path:
    return tmp_path / "root" / "pods" / UID / "volumes" / f"kubernetes.io~{plugin}" / name


async def test_empty_dirs_on_disk_and_in_memory(
    manager: VolumeManager, mounter: FakeMounter, tmp_path: Path
) -> None:
    p = volume_pod(
        {"name": "disk", "emptyDir": {}},
        {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
    )
    result = await manager.set_up(p)
    assert result.ready and not result.failures and result.retry_in is None
    disk, mem = vol_dir(tmp_path, "empty-dir", "disk"), vol_dir(tmp_path, "empty-dir", "mem")
    assert disk.is_dir() and stat.S_IMODE(disk.stat().st_mode) == 0o777
    assert mounter.tmpfs == {str(mem): 16 * MI}
    await manager.set_up(p)  # a second sync does not mount twice
    assert [c for c in mounter.calls if c[0] == "mount"] == [("mount", str(mem))]


async def test_content_volumes_are_written_each_sync_and_secrets_on_tmpfs(
    manager: VolumeManager, mounter: FakeMounter, content: FakeContentSource, tmp_path: Path
) -> None:
    content.files = {"cfg": {"greeting": "hi"}, "sec": {"token": "t"}}
    p = volume_pod(
        {"name": "cfg", "configMap": {"name": "c"}},
        {"name": "sec", "secret": {"secretName": "s"}},
    )
    await manager.set_up(p)
    await manager.set_up(p)
    assert content.calls == [(UID, "cfg"), (UID, "sec")] * 2
    assert (vol_dir(tmp_path, "configmap", "cfg") / "greeting").read_text() == "hi"
    assert list(mounter.tmpfs) == [str(vol_dir(tmp_path, "secret", "sec"))]
    assert mounter.tmpfs[str(vol_dir(tmp_path, "secret", "sec"))] == 1024 * MI


async def test_a_failing_volume_keeps_the_pod_waiting_with_back_off(
    manager: VolumeManager, content: FakeContentSource
) -> None:
    content.failures = {"cfg": 'configmap "c" not found'}
    p = volume_pod({"name": "cfg", "configMap": {"name": "c"}}, {"name": "e", "emptyDir": {}})
    delays = []
    for _ in range(12):
        result = await manager.set_up(p)
        assert not result.ready and result.missing == ("cfg",)
        assert result.failures == {"cfg": 'configmap "c" not found'}
        delays.append(result.retry_in)
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert delays[-1] == RETRY_MAX
    del content.failures["cfg"]
    result = await manager.set_up(p)
    assert result.ready and result.retry_in is None


async def test_a_refresh_failure_after_set_up_does_not_stop_the_pod(
    manager: VolumeManager, content: FakeContentSource
) -> None:
    p = volume_pod({"name": "cfg", "configMap": {"name": "c"}})
    assert (await manager.set_up(p)).ready
    content.failures = {"cfg": 'configmap "c" not found'}
    result = await manager.set_up(p)
    assert result.ready and result.failures and "cfg" in result.mounted


async def test_unsupported_sources_fail_by_name(manager: VolumeManager) -> None:
    p = volume_pod(
        {"name": "data", "nfs": {"server": "nfs.example", "path": "/"}},
        {"name": "inline", "csi": {"driver": "hostpath.csi.k8s.io"}},
    )
    result = await manager.set_up(p)
    assert not result.ready
    assert result.failures == {
        "data": 'volume source "nfs" is not supported on this node',
        "inline": 'volume source "csi" is not supported on this node',
    }
    assert result.events == {
        "data": 'MountVolume.SetUp failed for volume "data" : volume source "nfs" is not '
        "supported on this node",
        "inline": 'MountVolume.SetUp failed for volume "inline" : volume source "csi" is not '
        "supported on this node",
    }


async def test_host_path_type_failure_is_a_failed_mount(
    manager: VolumeManager, tmp_path: Path
) -> None:
    p = volume_pod({"name": "h", "hostPath": {"path": str(tmp_path), "type": "File"}})
    result = await manager.set_up(p)
    assert result.failures == {"h": f"hostPath type check failed: {tmp_path} is not a file"}


async def test_container_mounts(
    manager: VolumeManager, mounter: FakeMounter, tmp_path: Path
) -> None:
    p = volume_pod(
        {"name": "e", "emptyDir": {}},
        {"name": "cfg", "configMap": {"name": "c"}},
        {"name": "h", "hostPath": {"path": str(tmp_path)}},
        mounts=[
            {"name": "e", "mountPath": "/data", "mountPropagation": "HostToContainer"},
            {"name": "cfg", "mountPath": "/etc/cfg"},
            {"name": "h", "mountPath": "/host", "readOnly": True},
            {"name": "e", "mountPath": "/logs", "subPathExpr": "logs/$(POD)"},
        ],
    )
    result = await manager.set_up(p)
    mounts = await result.container_mounts(p.spec.containers[0], {"POD": "p"})
    empty_dir = vol_dir(tmp_path, "empty-dir", "e")
    bound = tmp_path / "root" / "pods" / UID / "volume-subpaths" / "e" / "app" / "3"
    assert list(mounts) == [
        HostMount("/data", str(empty_dir), False, "host_to_container"),
        HostMount("/etc/cfg", str(vol_dir(tmp_path, "configmap", "cfg")), True, "private"),
        HostMount("/host", str(tmp_path), True, "private"),
        HostMount("/logs", str(bound), False, "private"),
    ]
    assert (empty_dir / "logs" / "p").is_dir()
    # the checked path, opened without following symlinks, is bind-mounted from its descriptor
    assert mounter.binds == {
        str(empty_dir): str(empty_dir),  # HostToContainer: the volume is a shared mount
        str(bound): str((empty_dir / "logs" / "p").resolve()),
    }
    assert mounter.shared == {str(empty_dir)}


async def test_a_mount_naming_no_volume_is_a_config_error(manager: VolumeManager) -> None:
    p = volume_pod({"name": "e", "emptyDir": {}}, mounts=[{"name": "nope", "mountPath": "/x"}])
    result = await manager.set_up(p)
    with pytest.raises(
        ContainerConfigError, match='cannot find volume "nope" to mount into container "app"'
    ):
        await result.container_mounts(p.spec.containers[0], {})


async def test_fs_group_is_applied_to_empty_dirs(manager: VolumeManager, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a group needs root")
    p = pod(
        "p",
        uid=UID,
        securityContext={"fsGroup": 3456},
        volumes=[{"name": "e", "emptyDir": {}}],
    )
    await manager.set_up(p)
    path = vol_dir(tmp_path, "empty-dir", "e")
    assert path.stat().st_gid == 3456
    assert stat.S_IMODE(path.stat().st_mode) == 0o2777
    await manager.set_up(p)  # the next sync keeps the setgid bit
    assert stat.S_IMODE(path.stat().st_mode) == 0o2777


async def test_an_owned_empty_dir_is_not_walked_again_after_a_restart(
    tmp_path: Path, mounter: FakeMounter, content: FakeContentSource
) -> None:
    """Once an emptyDir is set up, its ``ready`` mark (the kubelet's, under the pod's
    ``plugins/kubernetes.io~empty-dir/<name>``) is on disk: an agent started again does not
    walk the volume a running container controls; a volume directory that disappeared is
    set up, and walked, again."""
    if os.geteuid() != 0:
        pytest.skip("changing a group needs root")

    def agent() -> VolumeManager:
        return VolumeManager(root_dir=str(tmp_path / "root"), content=content, mounter=mounter)

    p = pod("p", uid=UID, securityContext={"fsGroup": 3456},
            volumes=[{"name": "e", "emptyDir": {}}])  # fmt: skip
    await agent().set_up(p)
    ready = tmp_path / "root" / "pods" / UID / "plugins" / "kubernetes.io~empty-dir" / "e" / "ready"
    assert stat.S_ISREG(ready.lstat().st_mode)
    written = vol_dir(tmp_path, "empty-dir", "e") / "by-the-container"
    written.write_text("x")
    os.chown(written, -1, 99)
    result = await agent().set_up(p)  # the agent restarted
    assert result.ready
    assert written.stat().st_gid == 99  # not walked again

    remove_tree(str(vol_dir(tmp_path, "empty-dir", "e")))
    await agent().set_up(p)
    assert vol_dir(tmp_path, "empty-dir", "e").stat().st_gid == 3456


async def test_a_memory_empty_dir_is_owned_again_on_a_new_tmpfs(
    tmp_path: Path, mounter: FakeMounter, content: FakeContentSource
) -> None:
    """``medium: Memory``: the mark holds while its tmpfs is mounted; a new tmpfs (after a
    reboot) is owned again."""
    if os.geteuid() != 0:
        pytest.skip("changing a group needs root")

    def agent() -> VolumeManager:
        return VolumeManager(root_dir=str(tmp_path / "root"), content=content, mounter=mounter)

    p = pod("p", uid=UID, securityContext={"fsGroup": 3456},
            volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])  # fmt: skip
    path = vol_dir(tmp_path, "empty-dir", "m")
    await agent().set_up(p)
    os.chown(path, -1, 99)  # as if a container or another owner had changed it
    await agent().set_up(p)
    assert path.stat().st_gid == 99  # still mounted: not walked again
    await mounter.unmount(str(path.resolve()))
    await agent().set_up(p)
    assert path.stat().st_gid == 3456


async def test_tear_down_unmounts_and_removes_without_following_links(
    manager: VolumeManager, mounter: FakeMounter, content: FakeContentSource, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("host data")
    p = volume_pod({"name": "e", "emptyDir": {}}, {"name": "mem", "emptyDir": {"medium": "Memory"}})
    await manager.set_up(p)
    (vol_dir(tmp_path, "empty-dir", "e") / "escape").symlink_to(outside)
    (vol_dir(tmp_path, "empty-dir", "e") / "deep" / "er").mkdir(parents=True)
    assert await manager.tear_down(UID)
    assert mounter.tmpfs == {}
    assert not (tmp_path / "root" / "pods" / UID).exists()
    assert (outside / "keep").read_text() == "host data"
    assert content.forgotten == [UID]


async def test_a_busy_mount_keeps_the_pod_dir(
    manager: VolumeManager, mounter: FakeMounter, tmp_path: Path
) -> None:
    p = volume_pod({"name": "mem", "emptyDir": {"medium": "Memory"}})
    await manager.set_up(p)
    mounter.busy = {str(vol_dir(tmp_path, "empty-dir", "mem"))}
    assert not await manager.tear_down(UID)
    assert (tmp_path / "root" / "pods" / UID).exists()
    mounter.busy = set()
    assert await manager.tear_down(UID)


async def test_orphaned_pod_dirs_are_cleaned_unless_kept(
    manager: VolumeManager, mounter: FakeMounter, tmp_path: Path
) -> None:
    kept = pod("kept", uid="kept-uid", volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])
    gone = pod("gone", uid="gone-uid", volumes=[{"name": "m", "emptyDir": {"medium": "Memory"}}])
    await manager.set_up(kept)
    await manager.set_up(gone)
    assert await manager.clean_orphans(lambda uid: uid == "kept-uid") == ["gone-uid"]
    pods = tmp_path / "root" / "pods"
    assert sorted(p.name for p in pods.iterdir()) == ["kept-uid"]
    assert list(mounter.tmpfs) == [str(pods / "kept-uid" / "volumes/kubernetes.io~empty-dir/m")]


def test_remove_tree_never_follows_a_symlink(tmp_path: Path) -> None:
    target = tmp_path / "target"
    (target / "sub").mkdir(parents=True)
    (target / "sub" / "f").write_text("x")
    tree = tmp_path / "tree"
    (tree / "a").mkdir(parents=True)
    (tree / "a" / "link").symlink_to(target)
    (tree / "a" / "filelink").symlink_to(target / "sub" / "f")
    remove_tree(str(tree))
    assert not tree.exists()
    assert (target / "sub" / "f").read_text() == "x"


def test_mountinfo_is_parsed_with_escapes_and_nested_mounts_deepest_first() -> None:
    text = (
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        "90 22 0:50 / /var/lib/na/pods/u/volumes/a\\040b rw - tmpfs tmpfs rw,size=1024k\n"
        "91 90 0:51 / /var/lib/na/pods/u/volumes/a\\040b/inner rw - tmpfs tmpfs rw\n"
        "92 22 0:52 / /var/lib/na/pods/u2 rw - tmpfs tmpfs rw\n"
    )
    points = parse_mountinfo(text)
    assert points[1] == "/var/lib/na/pods/u/volumes/a b"
    assert below(points, "/var/lib/na/pods/u") == [
        "/var/lib/na/pods/u/volumes/a b/inner",
        "/var/lib/na/pods/u/volumes/a b",
    ]


@pytest.mark.parametrize(
    ("propagation", "expected"),
    [
        ("private", api.PROPAGATION_PRIVATE),
        ("host_to_container", api.PROPAGATION_HOST_TO_CONTAINER),
        ("bidirectional", api.PROPAGATION_BIDIRECTIONAL),
    ],
)
def test_mounts_reach_cri_with_propagation_and_no_relabel(
    propagation: Propagation, expected: int
) -> None:
    mount = to_cri(HostMount("/data", "/host/data", True, propagation))
    assert (mount.container_path, mount.host_path, mount.readonly) == ("/data", "/host/data", True)
    assert mount.propagation == expected
    assert mount.selinux_relabel is False


async def test_propagation_on_a_host_path_leaves_the_host_mounts_alone(
    manager: VolumeManager, mounter: FakeMounter, tmp_path: Path
) -> None:
    p = volume_pod(
        {"name": "h", "hostPath": {"path": str(tmp_path)}},
        mounts=[{"name": "h", "mountPath": "/host", "mountPropagation": "HostToContainer"}],
    )
    result = await manager.set_up(p)
    [mount] = await result.container_mounts(p.spec.containers[0], {})
    assert mount.propagation == "host_to_container"
    assert mounter.binds == {} and mounter.shared == set()


async def test_the_root_dir_is_made_a_shared_mount_once_when_it_is_not(
    tmp_path: Path, mounter: FakeMounter, content: FakeContentSource
) -> None:
    mounter.root_shared = False
    manager = VolumeManager(root_dir=str(tmp_path / "root"), content=content, mounter=mounter)
    await manager.set_up(volume_pod({"name": "e", "emptyDir": {}}))
    await manager.clean_orphans(lambda uid: True)
    root = str((tmp_path / "root").resolve())
    assert [c for c in mounter.calls if c[1] == root] == [("bind", root), ("make-rshared", root)]


def test_a_mount_is_shared_when_its_deepest_mount_has_a_peer_group() -> None:
    from nodeagent.volumemanager.mounter import is_shared_mount

    text = (
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "40 27 0:45 / /var/lib/nodeagent rw,relatime shared:12 - ext4 /dev/vda rw\n"
        "41 40 0:46 / /var/lib/nodeagent/pods/x rw master:3 - tmpfs tmpfs rw\n"
    )
    assert not is_shared_mount(text, "/tmp/root")
    assert is_shared_mount(text, "/var/lib/nodeagent")
    assert is_shared_mount(text, "/var/lib/nodeagent/plugins")
    assert not is_shared_mount(text, "/var/lib/nodeagent/pods/x/volumes")
    assert not is_shared_mount(text, "/var/lib/nodeagentx")

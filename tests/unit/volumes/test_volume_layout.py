"""Path layout, tmpfs size, propagation and the FailedMount text: pure."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.podspec import Pod, PodSpecError, decode_checked_pod
from nodeagent.testing.pods import container, pod, pod_object
from nodeagent.volumemanager import layout

UID = "4f1c"


def one_volume(volume: dict[str, object], **kw: object) -> Pod:
    return pod("p", uid=UID, volumes=[volume], **kw)


@pytest.mark.parametrize(
    ("source", "plugin"),
    [
        ({"emptyDir": {}}, "kubernetes.io~empty-dir"),
        ({"configMap": {"name": "c"}}, "kubernetes.io~configmap"),
        ({"secret": {"secretName": "s"}}, "kubernetes.io~secret"),
        ({"downwardAPI": {"items": []}}, "kubernetes.io~downward-api"),
        ({"projected": {"sources": []}}, "kubernetes.io~projected"),
    ],
)
def test_volumes_live_under_the_pod_dir_in_the_kubelet_plugin_dirs(
    source: dict[str, object], plugin: str
) -> None:
    [volume] = one_volume({"name": "v", **source}).spec.volumes
    path = layout.volume_path("/var/lib/nodeagent", UID, volume)
    assert path == Path(f"/var/lib/nodeagent/pods/{UID}/volumes/{plugin}/v")


def test_a_host_path_volume_is_the_host_path_itself() -> None:
    [volume] = one_volume({"name": "h", "hostPath": {"path": "/srv/data"}}).spec.volumes
    assert layout.volume_path("/var/lib/nodeagent", UID, volume) == Path("/srv/data")


def test_memory_media_secrets_and_projected_volumes_are_tmpfs() -> None:
    volumes = pod(
        "p",
        volumes=[
            {"name": "disk", "emptyDir": {}},
            {"name": "mem", "emptyDir": {"medium": "Memory"}},
            {"name": "cm", "configMap": {"name": "c"}},
            {"name": "sec", "secret": {"secretName": "s"}},
            {"name": "proj", "projected": {"sources": []}},
            {"name": "down", "downwardAPI": {}},
        ],
    ).spec.volumes
    assert [v.name for v in volumes if layout.on_tmpfs(v)] == ["mem", "sec", "proj"]
    assert [v.name for v in volumes if layout.mounted_read_only(v)] == [
        "cm",
        "sec",
        "proj",
        "down",
    ]


def test_unsupported_sources_are_named() -> None:
    [nfs, hugepages, none] = pod(
        "p",
        volumes=[
            {"name": "data", "nfs": {"server": "nfs.example", "path": "/"}},
            {"name": "huge", "emptyDir": {"medium": "HugePages"}},
            {"name": "empty"},
        ],
    ).spec.volumes
    assert layout.unsupported_reason(nfs) == 'volume source "nfs" is not supported on this node'
    assert layout.unsupported_reason(hugepages) == (
        'emptyDir medium "HugePages" is not supported on this node'
    )
    assert layout.unsupported_reason(none) == "volume has no source this node recognises"
    with pytest.raises(ValueError):
        layout.volume_path("/r", UID, nfs)


def test_failed_mount_message_is_the_kubelet_one() -> None:
    assert layout.setup_failed_message("cfg", 'configmap "y" not found') == (
        'MountVolume.SetUp failed for volume "cfg" : configmap "y" not found'
    )


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (None, "private"),
        ("None", "private"),
        ("HostToContainer", "host_to_container"),
        ("Bidirectional", "bidirectional"),
    ],
)
def test_mount_propagation(mode: str | None, expected: str) -> None:
    assert layout.propagation(mode) == expected


def test_unknown_mount_propagation_is_refused_with_the_kubelet_message() -> None:
    with pytest.raises(ValueError, match='invalid MountPropagation mode: "Sideways"'):
        layout.propagation("Sideways")


GI = 2**30
MI = 2**20


def memory_pod(size_limit: str | None, limits: list[str | None]) -> Pod:
    empty_dir: dict[str, object] = {"medium": "Memory"}
    if size_limit is not None:
        empty_dir["sizeLimit"] = size_limit
    containers = [
        container(f"c{i}", limits={"memory": limit} if limit else None)
        for i, limit in enumerate(limits)
    ]
    return one_volume({"name": "m", "emptyDir": empty_dir}, containers=containers)


@pytest.mark.parametrize(
    ("size_limit", "limits", "allocatable", "expected"),
    [
        (None, [None], 4 * GI, 4 * GI),  # nothing lower than the node's allocatable
        (None, ["64Mi", "64Mi"], 4 * GI, 128 * MI),  # the pod's memory limit
        (None, ["64Mi", None], 4 * GI, 4 * GI),  # a container without a limit: no pod limit
        ("16Mi", ["64Mi"], 4 * GI, 16 * MI),  # sizeLimit below the pod's limit
        ("1Gi", ["64Mi"], 4 * GI, 64 * MI),  # sizeLimit above it does not count
        ("16Mi", [None], None, 16 * MI),
        (None, [None], None, None),  # the kernel's default
    ],
)
def test_memory_size_limit_as_the_kubelet_computes_it(
    size_limit: str | None, limits: list[str | None], allocatable: int | None, expected: int | None
) -> None:
    p = memory_pod(size_limit, limits)
    assert layout.memory_size_limit(p, p.spec.volumes[0], allocatable) == expected


def test_pod_memory_limit_counts_init_containers_and_overhead() -> None:
    p = pod(
        "p",
        containers=[container("a", limits={"memory": "100Mi"})],
        init_containers=[container("i", limits={"memory": "300Mi"})],
        overhead={"memory": "10Mi"},
    )
    assert layout.pod_memory_limit(p) == 310 * MI


def test_an_unreadable_size_limit_is_refused_at_decoding_naming_the_field() -> None:
    body = pod_object("p", volumes=[{"name": "m", "emptyDir": {"sizeLimit": "16 furlongs"}}])
    with pytest.raises(PodSpecError) as e:
        decode_checked_pod(body)
    assert e.value.field == "spec.volumes[0].emptyDir.sizeLimit"
    assert e.value.message.startswith('Invalid value: "16 furlongs": quantities must match')

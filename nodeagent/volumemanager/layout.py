"""Where a pod's volumes live and what the kubelet computes about them, as pure functions.

``<rootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>`` with the kubelet's plugin
directory names; a hostPath volume is the host path itself. The tmpfs size of a memory-backed
volume (the kubelet's ``calculateEmptyDirMemorySize``), the CRI propagation of a
``mountPropagation``, and the kubelet's ``FailedMount`` message.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodeagent.kuberuntime.mounts import Propagation
from nodeagent.podspec import Container, Pod, Volume
from nodeagent.quantity import value

PLUGIN_DIRS: Final = {
    "emptyDir": "kubernetes.io~empty-dir",
    "configMap": "kubernetes.io~configmap",
    "secret": "kubernetes.io~secret",
    "downwardAPI": "kubernetes.io~downward-api",
    "projected": "kubernetes.io~projected",
}
CONTENT_SOURCES: Final = frozenset({"configMap", "secret", "downwardAPI", "projected"})
"""Sources whose files the content writer fills from the API (the kubelet mounts them
read-only)."""
TMPFS_CONTENT: Final = frozenset({"secret", "projected"})
"""The kubelet wraps these in a memory-backed emptyDir: their files never touch the disk."""
CLAIM_SOURCES: Final = ("persistentVolumeClaim", "ephemeral")
"""Sources backed by a PersistentVolume (``persistent.py``, ``csi/``)."""
MEMORY_MEDIUM: Final = "Memory"
SUPPORTED_MEDIA: Final = ("", MEMORY_MEDIUM)

PROPAGATION: Final[dict[str | None, Propagation]] = {
    None: "private",
    "None": "private",
    "HostToContainer": "host_to_container",
    "Bidirectional": "bidirectional",
}


@dataclass(frozen=True, slots=True)
class MountedVolume:
    """A pod volume ready for its containers: where it is on the host."""

    path: str
    read_only: bool
    block: bool = False
    """A raw block device (``volumeMode: Block``): ``path`` is the pod's link to it, passed
    to containers as a device through ``volumeDevices``, never mounted."""


def pods_dir(root_dir: str | Path) -> Path:
    return Path(root_dir) / "pods"


def pod_dir(root_dir: str | Path, uid: str) -> Path:
    return pods_dir(root_dir) / uid


def volume_path(root_dir: str | Path, uid: str, volume: Volume) -> Path:
    """Where ``volume`` is on the host; raises ``ValueError`` for a source the node does not
    set up (see :func:`unsupported_reason`)."""
    if volume.host_path is not None:
        return Path(volume.host_path.path)
    plugin = PLUGIN_DIRS.get(volume.source)
    if plugin is None:
        raise ValueError(f"no plugin for volume source {volume.source!r}")
    return pod_dir(root_dir, uid) / "volumes" / plugin / volume.name


def plugin_meta_dir(root_dir: str | Path, uid: str, volume: Volume) -> Path:
    """``<podDir>/plugins/kubernetes.io~<plugin>/<name>``: the kubelet's per-volume metadata
    (its ``ready`` mark), out of the containers' reach."""
    return pod_dir(root_dir, uid) / "plugins" / PLUGIN_DIRS[volume.source] / volume.name


def on_tmpfs(volume: Volume) -> bool:
    if volume.empty_dir is not None:
        return volume.empty_dir.medium == MEMORY_MEDIUM
    return volume.source in TMPFS_CONTENT


def mounted_read_only(volume: Volume) -> bool:
    """The kubelet mounts API-sourced volumes read-only into every container."""
    return volume.source in CONTENT_SOURCES


def unsupported_reason(volume: Volume) -> str | None:
    """Why the node cannot set ``volume`` up, in the words of the ``FailedMount`` Event; None
    when it can."""
    source = volume.source
    if not source:
        return "volume has no source this node recognises"
    if source not in PLUGIN_DIRS and source not in ("hostPath", "csi", *CLAIM_SOURCES):
        return f'volume source "{source}" is not supported on this node'
    if volume.empty_dir is not None and volume.empty_dir.medium not in SUPPORTED_MEDIA:
        medium = volume.empty_dir.medium
        return f'emptyDir medium "{medium}" is not supported on this node'
    return None


def setup_failed_message(
    volume_name: str, why: str, operation: str = "MountVolume.SetUp failed"
) -> str:
    """The kubelet's ``FailedMount`` Event message (``GenerateError``)."""
    return f'{operation} for volume "{volume_name}" : {why}'


def propagation(mode: str | None) -> Propagation:
    """The CRI propagation of a ``mountPropagation``; raises ``ValueError`` with the
    kubelet's message for an unknown one."""
    found = PROPAGATION.get(mode)
    if found is None:
        raise ValueError(f'invalid MountPropagation mode: "{mode}"')
    return found


def _limit(container: Container) -> int | None:
    raw = container.resources.limits.get("memory")
    return value(raw) if raw is not None else None


def pod_memory_limit(pod: Pod) -> int | None:
    """The pod cgroup's memory limit, as the kubelet's ``ResourceConfigForPod``: only when
    every container declares one; the larger of the app containers' sum and the largest init
    container, plus the overhead."""
    containers = (*pod.spec.containers, *pod.spec.init_containers)
    limits = [_limit(c) for c in containers]
    if not containers or any(limit is None for limit in limits):
        return None
    apps = sum(_limit(c) or 0 for c in pod.spec.containers)
    inits = max((_limit(c) or 0 for c in pod.spec.init_containers), default=0)
    overhead = pod.spec.overhead.get("memory")
    return max(apps, inits) + (value(overhead) if overhead is not None else 0)


def memory_size_limit(pod: Pod, volume: Volume, allocatable_memory: int | None) -> int | None:
    """The tmpfs ``size=`` of a memory-backed volume: the node's allocatable memory, lowered to
    the pod's memory limit, lowered to the emptyDir's ``sizeLimit`` (each only when positive
    and not larger); None when nothing bounds it (the kernel's default)."""
    size = allocatable_memory if allocatable_memory and allocatable_memory > 0 else None
    for bound in (pod_memory_limit(pod), _size_limit(volume)):
        if bound is not None and bound > 0 and (size is None or bound <= size):
            size = bound
    return size


def _size_limit(volume: Volume) -> int | None:
    if volume.empty_dir is None or volume.empty_dir.size_limit in (None, ""):
        return None
    raw = volume.empty_dir.size_limit
    assert raw is not None
    return value(raw)

"""PersistentVolume-backed pod volumes through the in-tree plugins the kubelet keeps:
``hostPath`` and ``local`` (CSI volumes are :mod:`.csi`'s).

- ``hostPath``: the PV's path after its ``type`` check, as the pod-level hostPath volume
  (no fsGroup, as the kubelet's hostPath plugin);
- ``local``: the PV's directory bind-mounted (read-only when the claim or the PV says so) on
  ``<podDir>/volumes/kubernetes.io~local-volume/<pv>``, then ``fsGroup`` applied unless
  read-only (the kubelet's ``localVolumeMounter.SetUpAt``); a local path that is a block device
  with ``volumeMode: Filesystem`` (format and mount) is refused by name.

A local PV of ``volumeMode: Block`` (its path a block device) is mapped, not mounted: the pod
gets ``<podDir>/volumeDevices/kubernetes.io~local-volume/<pv>``, a link to the device, which
the runtime gives each container that names it in ``volumeDevices`` (permissions ``mrw``, or
``r`` for a read-only claim). The kubelet also bind-mounts the device under a global map path
and attaches a loop device to it, to hold a reference while pods use it; nodeagent does not.

Before either, the PV's ``nodeAffinity`` must match the node's labels (``MountVolume.NodeAffinity
check failed``). A Block PV of another source, or any source without a plugin here, fails
visibly, naming it.
"""

from __future__ import annotations

import asyncio
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodeagent.volumemanager import layout
from nodeagent.volumemanager.claims import BLOCK, BoundVolume
from nodeagent.volumemanager.hostpath import check_host_path
from nodeagent.volumemanager.mounter import Mounter, MountError
from nodeagent.volumemanager.source import VolumeSetupError

LOCAL_PLUGIN_DIR: Final = "kubernetes.io~local-volume"
VOLUME_DEVICES: Final = "volumeDevices"
MAP_FAILED: Final = "MapVolume.MapPodDevice failed"
MOUNT_DIR_MODE: Final = 0o750
IN_TREE: Final = ("hostPath", "local")
PV_SOURCES: Final = (
    "hostPath",
    "local",
    "csi",
    "nfs",
    "iscsi",
    "rbd",
    "cephfs",
    "fc",
    "flexVolume",
    "glusterfs",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "vsphereVolume",
    "cinder",
    "portworxVolume",
)


@dataclass(frozen=True, slots=True)
class SetUpVolume:
    path: str
    read_only: bool
    own: bool
    """The kubelet applies the pod's ``fsGroup`` to it."""
    metrics: str = ""
    """How its usage is measured: ``statfs`` (local), ``csi`` (``NodeGetVolumeStats``), or
    ``""`` for none (hostPath, as the kubelet's ``MetricsNil``)."""
    csi: CsiHandle | None = None
    republish: bool = False
    """Its CSI driver wants ``NodePublishVolume`` again now and then (``requiresRepublish``)."""
    block: bool = False
    """``path`` is the pod's link to a block device (``volumeMode: Block``)."""


@dataclass(frozen=True, slots=True)
class CsiHandle:
    driver: str
    volume_handle: str
    staging_path: str = ""


def pv_source(bound: BoundVolume) -> str:
    """The PV's source name (``hostPath``, ``local``, ``csi``, ...), ``""`` when none."""
    spec = bound.pv_spec
    return next((k for k in PV_SOURCES if spec.get(k) is not None), "")


def pv_read_only(bound: BoundVolume, source: str) -> bool:
    """The claim's ``readOnly``, or the PV source's own ``readOnly``."""
    own = (bound.pv_spec.get(source) or {}).get("readOnly")
    return bound.read_only or bool(own)


def local_volume_path(root_dir: str, uid: str, pv_name: str) -> Path:
    return layout.pod_dir(root_dir, uid) / "volumes" / LOCAL_PLUGIN_DIR / pv_name


def device_map_path(root_dir: str, uid: str, pv_name: str) -> Path:
    """The kubelet's pod device map path of a local block PV: a link to the device."""
    return layout.pod_dir(root_dir, uid) / VOLUME_DEVICES / LOCAL_PLUGIN_DIR / pv_name


def link_device(device: str, link: Path) -> None:
    """``link`` -> ``device``, made once; a link (or file) to anything else is replaced."""
    link.parent.mkdir(mode=MOUNT_DIR_MODE, parents=True, exist_ok=True)
    if link.is_symlink() and os.readlink(link) == device:
        return
    link.unlink(missing_ok=True)
    os.symlink(device, link)


async def map_local_block(bound: BoundVolume, *, root_dir: str, uid: str) -> SetUpVolume:
    """A local PV of ``volumeMode: Block``: its path must be a block device; the pod gets a
    link to it (the kubelet's ``MapVolume.MapPodDevice``), which the runtime resolves when it
    creates a container with the device. Raises :class:`VolumeSetupError`."""
    device = str(bound.pv_spec["local"].get("path", ""))
    if not await asyncio.to_thread(_is_block_device, device):
        raise VolumeSetupError(
            f"local volume {device!r} is not a block device", operation=MAP_FAILED
        )
    link = device_map_path(root_dir, uid, bound.pv_name)
    try:
        await asyncio.to_thread(link_device, device, link)
    except OSError as e:
        raise VolumeSetupError(f"mapping {device} to {link}: {e}", operation=MAP_FAILED) from e
    return SetUpVolume(str(link), pv_read_only(bound, "local"), own=False, block=True)


def unsupported(bound: BoundVolume) -> str | None:
    """Why the node cannot set this PV up through an in-tree plugin, or None."""
    if bound.volume_mode == BLOCK and pv_source(bound) != "local":
        name = bound.pv_name
        return f'volumeMode "{BLOCK}" of PersistentVolume "{name}" is not supported on this node'
    source = pv_source(bound)
    if source not in IN_TREE:
        what = source or "(none)"
        return f'PersistentVolume "{bound.pv_name}" source "{what}" is not supported on this node'
    return None


def _is_block_device(path: str) -> bool:
    try:
        return stat.S_ISBLK(os.stat(path).st_mode)
    except OSError:
        return False


def _make_mount_dir(path: Path) -> None:
    path.parent.mkdir(mode=MOUNT_DIR_MODE, parents=True, exist_ok=True)
    path.mkdir(mode=MOUNT_DIR_MODE, exist_ok=True)


async def set_up_in_tree(
    bound: BoundVolume, *, root_dir: str, uid: str, mounter: Mounter, mounts: list[str]
) -> SetUpVolume:
    """Set up a hostPath or local PV for the pod; raises :class:`VolumeSetupError`."""
    source = pv_source(bound)
    read_only = pv_read_only(bound, source)
    spec = bound.pv_spec[source]
    if source == "hostPath":
        await asyncio.to_thread(check_host_path, spec.get("path", ""), spec.get("type"))
        return SetUpVolume(spec.get("path", ""), read_only, own=False)
    local = str(spec.get("path", ""))
    if await asyncio.to_thread(_is_block_device, local):
        raise VolumeSetupError(
            f"local volume {local} is a block device: formatting and mounting it is not "
            "supported on this node"
        )
    if not await asyncio.to_thread(os.path.isdir, local):
        raise VolumeSetupError(f"path {local!r} does not exist")
    target = local_volume_path(root_dir, uid, bound.pv_name)
    try:
        await asyncio.to_thread(_make_mount_dir, target)
    except OSError as e:
        raise VolumeSetupError(f"mkdir {target}: {os.strerror(e.errno or 0).lower()}") from e
    real = await asyncio.to_thread(os.path.realpath, target)
    if real not in mounts:
        try:
            await mounter.bind(local, real, read_only=read_only)
        except (MountError, OSError) as e:
            raise VolumeSetupError(str(e)) from e
    return SetUpVolume(str(target), read_only, own=not read_only, metrics="statfs")

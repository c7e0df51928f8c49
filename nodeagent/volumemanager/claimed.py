"""Pod volumes backed by a PersistentVolume: ``persistentVolumeClaim`` and generic
``ephemeral`` volumes, set up once per pod and then reused on every sync.

The claim is resolved to its bound PV (``claims.py``), the PV's ``nodeAffinity`` checked
against the node's labels (``affinity.py``), then the PV is set up by its plugin: hostPath or
local (``persistent.py``) or a CSI driver (``csi/``, through the :class:`CsiVolumes` seam);
``fsGroup`` is applied once when the plugin asks for it (``ownership.py``). A volume already
set up for the pod is not resolved again: the kubelet's populator, too, processes a pod's
claims once.

A PV whose only access mode is ``ReadWriteOncePod`` is set up for one pod of the node at a
time, as the kubelet enforces it at mount time (the scheduler does too, but a pod created with
its ``nodeName`` set bypasses it): a second pod gets the kubelet's ``FailedMount`` text until
the first pod's volumes are torn down. Who uses such a PV is noted at its set-up until the pod's
teardown is done, and read from the pods' CSI and local volume directories too, so an agent
restarted beside a running pod still sees it (a hostPath PV leaves no such directory).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodeagent.apiserver import ApiError
from nodeagent.csi import CsiError
from nodeagent.csi.types import VolumeStats
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod, Volume
from nodeagent.quantity import value
from nodeagent.volumemanager.affinity import AffinityError, check_node_affinity
from nodeagent.volumemanager.claims import (
    BLOCK,
    FILESYSTEM,
    BoundVolume,
    ClaimResolver,
    claim_name,
)
from nodeagent.volumemanager.csi.paths import POD_PLUGIN_DIR
from nodeagent.volumemanager.expansion import finished_patch, node_expansion_size
from nodeagent.volumemanager.layout import MountedVolume, pods_dir
from nodeagent.volumemanager.mounter import Mounter
from nodeagent.volumemanager.ownership import set_volume_ownership
from nodeagent.volumemanager.persistent import (
    LOCAL_PLUGIN_DIR,
    VOLUME_DEVICES,
    CsiHandle,
    SetUpVolume,
    map_local_block,
    pv_source,
    set_up_in_tree,
    unsupported,
)
from nodeagent.volumemanager.source import VolumeSetupError

NODE_AFFINITY_FAILED = "MountVolume.NodeAffinity check failed"
RESIZE_CHECK = 10.0
RWOP_IN_USE = "volume uses the ReadWriteOncePod access mode and is already in use by another pod"


def read_write_once_pod(pv: Mapping[str, Any]) -> bool:
    """The kubelet enforces the mode only when it is the PV's one access mode: with several it
    cannot tell which one the pod means to use."""
    return list((pv.get("spec") or {}).get("accessModes") or []) == ["ReadWriteOncePod"]


def check_volume_mode(pod: Pod, volume: Volume, bound: BoundVolume) -> None:
    """The kubelet's populator: a Block PV only through ``volumeDevices``, a Filesystem one
    only through ``volumeMounts``."""
    containers = (*pod.spec.init_containers, *pod.spec.containers)
    mode = bound.volume_mode
    mounted = any(m.name == volume.name for c in containers for m in c.volume_mounts)
    mapped = any(d.get("name") == volume.name for c in containers for d in c.volume_devices)
    for field, used, allowed in (
        ("volumeMounts", mounted, FILESYSTEM),
        ("volumeDevices", mapped, BLOCK),
    ):
        if used and mode != allowed:
            raise VolumeSetupError(
                f"volume {volume.name} has volumeMode {mode}, but is specified in {field}"
            )


def pods_with_volume_dir(root_dir: str, pv_name: str) -> set[str]:
    """The pods whose directory holds a CSI or local volume, or a device link, named
    ``pv_name`` (what the kubelet's reconstruction reads after a restart). No link is
    followed."""
    try:
        uids = os.listdir(pods_dir(root_dir))
    except OSError:
        return set()
    places = (
        Path("volumes") / POD_PLUGIN_DIR,
        Path("volumes") / LOCAL_PLUGIN_DIR,
        Path(VOLUME_DEVICES) / LOCAL_PLUGIN_DIR,
        Path(VOLUME_DEVICES) / POD_PLUGIN_DIR,
    )
    return {
        uid
        for uid in uids
        for place in places
        if os.path.lexists(pods_dir(root_dir) / uid / place / pv_name)
    }


class CsiVolumes(Protocol):
    """CSI volumes (``csi/``'s ``CsiVolumePlugin``)."""

    async def set_up_persistent(
        self, pod: Pod, volume: Volume, bound: BoundVolume
    ) -> SetUpVolume: ...

    async def set_up_inline(self, pod: Pod, volume: Volume) -> SetUpVolume: ...

    async def set_up_block(self, pod: Pod, volume: Volume, bound: BoundVolume) -> SetUpVolume: ...

    async def tear_down_pod(self, uid: str) -> bool: ...

    async def clean_staged(self) -> bool: ...

    def forget(self, uid: str) -> None: ...

    async def volume_stats(self, handle: CsiHandle, path: str) -> VolumeStats | None: ...

    async def expand(self, handle: CsiHandle, path: str, size: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ClaimedVolume:
    """A PV-backed or CSI volume set up for a pod, as its stats need it."""

    volume: str
    namespace: str
    claim: str | None
    """The claim's name; None for an inline CSI volume."""
    set_up: SetUpVolume


class ClaimedVolumes:
    def __init__(
        self,
        *,
        root_dir: str,
        resolver: ClaimResolver,
        mounter: Mounter,
        node_name: str = "",
        node_labels: Callable[[], Mapping[str, str]] = dict,
        csi: CsiVolumes | None = None,
        log: Logger | None = None,
    ) -> None:
        self._root = root_dir
        self._resolver = resolver
        self._mounter = mounter
        self._node_name = node_name
        self._node_labels = node_labels
        self._csi = csi
        self._log = log or get_logger("volumes")
        self._done: dict[str, dict[str, MountedVolume]] = {}
        self._records: dict[str, dict[str, ClaimedVolume]] = {}
        self._checked: dict[tuple[str, str], float] = {}
        self._republished: dict[tuple[str, str, str], float] = {}
        self._users: dict[str, set[str]] = {}
        """``ReadWriteOncePod`` PV name -> the pods it is set up for, until each pod's
        teardown is done (one, but for a pod whose set-up is under way)."""

    def release(self, uid: str) -> None:
        """The pod's volumes are torn down: it no longer uses any PV."""
        for users in self._users.values():
            users.discard(uid)
        self._users = {pv: users for pv, users in self._users.items() if users}

    async def _reserve(self, pod: Pod, bound: BoundVolume) -> bool:
        """For a ``ReadWriteOncePod`` PV: note the pod as its user, or raise the kubelet's
        error when another pod uses it. True when this call took the note (undone if the
        set-up then fails). Taken before any await, so two pods set up at once cannot both
        pass."""
        if not read_write_once_pod(bound.pv):
            return False
        users = self._users.setdefault(bound.pv_name, set())
        if users - {pod.uid}:
            raise VolumeSetupError(RWOP_IN_USE, spec_name=bound.pv_name)
        if pod.uid in users:
            return False
        users.add(pod.uid)
        on_disk = await asyncio.to_thread(pods_with_volume_dir, self._root, bound.pv_name)
        if on_disk - {pod.uid}:
            users.discard(pod.uid)
            raise VolumeSetupError(RWOP_IN_USE, spec_name=bound.pv_name)
        return True

    def forget(self, uid: str) -> None:
        self._done.pop(uid, None)
        self._records.pop(uid, None)
        self._checked = {k: v for k, v in self._checked.items() if k[0] != uid}
        self._republished = {k: v for k, v in self._republished.items() if k[0] != uid}

    def _republish_due(self, pod: Pod, volume: Volume) -> bool:
        """A volume of a ``requiresRepublish`` driver is published again on a sync at most
        every ``RESIZE_CHECK`` seconds (the kubelet remounts it on each pod sync)."""
        record = self._records.get(pod.uid, {}).get(volume.name)
        if record is None or not record.set_up.republish:
            return False
        now = asyncio.get_running_loop().time()
        key = (pod.uid, volume.name, "republish")
        if now - self._republished.get(key, now) < RESIZE_CHECK:
            self._republished.setdefault(key, now)
            return False
        self._republished[key] = now
        return True

    async def _check_resize(self, pod: Pod, volume: Volume) -> None:
        """Expand a mounted CSI claim the resizer grew (``expansion.py``), looking at most
        every ``RESIZE_CHECK`` seconds (each look is a GET of the claim and the PV, as the
        kubelet's populator does on a pod sync)."""
        record = self._records.get(pod.uid, {}).get(volume.name)
        if record is None or record.set_up.csi is None or record.set_up.read_only:
            return
        if self._csi is None:
            return
        now = asyncio.get_running_loop().time()
        key = (pod.uid, volume.name)
        if now - self._checked.get(key, -RESIZE_CHECK) < RESIZE_CHECK:
            return
        self._checked[key] = now
        try:
            bound = await self._resolver.resolve(pod, volume)
        except VolumeSetupError:
            return
        size = node_expansion_size(bound.claim, bound.pv)
        if size is None:
            return
        fields = {"pod_namespace": pod.namespace, "pod_name": pod.name, "volume": volume.name}
        try:
            await self._csi.expand(record.set_up.csi, record.set_up.path, value(size))
            await self._resolver.patch_claim_status(bound.claim, finished_patch(bound.claim, size))
        except (CsiError, ApiError) as e:
            self._log.warning("MountVolume.NodeExpandVolume failed", error=str(e), **fields)
            return
        self._log.info(
            "MountVolume.NodeExpandVolume succeeded",
            persistent_volume=bound.pv_name,
            size=size,
            **fields,
        )

    def claimed(self, uid: str) -> list[ClaimedVolume]:
        """The pod's volumes set up through a claim or a CSI driver."""
        return list(self._records.get(uid, {}).values())

    def _record(self, pod: Pod, volume: Volume, claim: str | None, set_up: SetUpVolume) -> None:
        self._records.setdefault(pod.uid, {})[volume.name] = ClaimedVolume(
            volume.name, pod.namespace, claim, set_up
        )

    async def set_up_inline(self, pod: Pod, volume: Volume) -> MountedVolume:
        """An inline CSI volume (the driver's ``Ephemeral`` mode), published once per pod."""
        done = self._done.setdefault(pod.uid, {})
        if volume.name in done and not self._republish_due(pod, volume):
            return done[volume.name]
        if self._csi is None:
            raise VolumeSetupError('volume source "csi" is not supported on this node')
        set_up = await self._csi.set_up_inline(pod, volume)
        if set_up.own:
            await self._own(pod, set_up, volume.name)
        self._record(pod, volume, None, set_up)
        mounted = MountedVolume(set_up.path, set_up.read_only)
        done[volume.name] = mounted
        return mounted

    async def set_up(self, pod: Pod, volume: Volume, mounts: list[str]) -> MountedVolume:
        """The volume of ``pod`` ready for its containers; raises :class:`VolumeSetupError`."""
        done = self._done.setdefault(pod.uid, {})
        if volume.name in done and not self._republish_due(pod, volume):
            await self._check_resize(pod, volume)
            return done[volume.name]
        bound = await self._resolver.resolve(pod, volume)
        try:
            check_node_affinity(bound.pv, self._node_labels(), self._node_name)
        except AffinityError as e:
            raise VolumeSetupError(
                str(e), operation=NODE_AFFINITY_FAILED, spec_name=bound.pv_name
            ) from e
        check_volume_mode(pod, volume, bound)
        reserved = await self._reserve(pod, bound)
        try:
            set_up = await self._set_up_pv(pod, volume, bound, mounts)
        except BaseException:
            if reserved:
                self._users.get(bound.pv_name, set()).discard(pod.uid)
            raise
        if set_up.own:
            await self._own(pod, set_up, bound.pv_name)
        self._record(pod, volume, claim_name(pod, volume), set_up)
        self._log.v(2).info(
            "MountVolume.SetUp succeeded",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            volume=volume.name,
            persistent_volume=bound.pv_name,
        )
        mounted = MountedVolume(set_up.path, set_up.read_only, block=set_up.block)
        done[volume.name] = mounted
        return mounted

    async def _set_up_pv(
        self, pod: Pod, volume: Volume, bound: BoundVolume, mounts: list[str]
    ) -> SetUpVolume:
        if pv_source(bound) == "csi" and self._csi is not None:
            if bound.volume_mode == BLOCK:
                return await self._csi.set_up_block(pod, volume, bound)
            return await self._csi.set_up_persistent(pod, volume, bound)
        reason = unsupported(bound)
        if reason is not None:
            raise VolumeSetupError(reason, spec_name=bound.pv_name)
        try:
            if bound.volume_mode == BLOCK:
                return await map_local_block(bound, root_dir=self._root, uid=pod.uid)
            return await set_up_in_tree(
                bound, root_dir=self._root, uid=pod.uid, mounter=self._mounter, mounts=mounts
            )
        except VolumeSetupError as e:
            e.spec_name = bound.pv_name
            raise

    async def _own(self, pod: Pod, set_up: SetUpVolume, pv_name: str) -> None:
        psc = pod.spec.security_context
        if psc is None or psc.fs_group is None:
            return
        try:
            await asyncio.to_thread(
                set_volume_ownership,
                set_up.path,
                psc.fs_group,
                read_only=set_up.read_only,
                policy=psc.fs_group_change_policy,
                log=self._log,
            )
        except OSError as e:
            raise VolumeSetupError(
                f"applyFSGroup failed for vol {pv_name}: {e}", spec_name=pv_name
            ) from e

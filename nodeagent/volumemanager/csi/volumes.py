"""CSI volumes of pods: staged once per volume, published per pod, torn down in reverse, as the
kubelet's CSI plugin (``csi_attacher.go`` MountDevice/UnmountDevice, ``csi_mounter.go``
SetUpAt/TearDownAt).

Set up (a PV with ``spec.csi``, or an inline ``csi`` volume):

1. the driver must be registered (``driver name X not found in the list of registered CSI
   drivers``: the pod waits); its ``CSIDriver`` object decides attach, pod info, fsGroup and
   token requests (``driverinfo.py``); an inline volume needs the ``Ephemeral`` mode;
2. a driver that needs attach: the ``VolumeAttachment`` ``csi-<sha>`` must be ``attached``
   (the attach/detach controller and the external-attacher do that); its
   ``attachmentMetadata`` is the publish context. No Event while it is not there yet, as the
   kubelet; its ``attachError`` is one;
3. ``NodeStageVolume`` on ``globalmount`` when the driver has ``STAGE_UNSTAGE_VOLUME``, once
   per volume while the agent runs, ``vol_data.json`` written first;
4. ``NodePublishVolume`` on the pod's ``mount`` directory, its ``vol_data.json`` written first
   (so a ``kill -9`` at any point leaves what teardown needs); then ``fsGroup`` by the node
   when the driver cannot take it (``VOLUME_MOUNT_GROUP``) and the policy says so.

A PV of ``volumeMode: Block`` is mapped, not mounted (:meth:`CsiVolumePlugin.set_up_block`,
the kubelet's ``csi_block.go``): its record ``volumeDevices/<specName>/data/vol_data.json``
first; ``NodeStageVolume`` (a block capability) on the ``staging/<specName>`` directory, once
per volume; the pod's link ``pods/<uid>/volumeDevices/kubernetes.io~csi/<specName>`` to its
publish path; ``NodePublishVolume`` on that path, ``publish/<specName>/<podUID>``, a file the
driver makes the device (bind-mounted or a device node). The runtime resolves the link when it
creates a container with the device. Not made: the kubelet's bind mount of the device at the
global map path (``<specName>/dev/<podUID>``) and its loop device reference, which keep the
device from being released under a running container; the link is the record of the pod's use.

Tear down (:meth:`CsiVolumePlugin.tear_down_pod`): every ``vol_data.json`` under the pod's
``kubernetes.io~csi`` is ``NodeUnpublishVolume``'d and removed, and every block link's publish
path; a staged volume no other pod publishes any more is ``NodeUnstageVolume``'d and its global
directory (or a block volume's staging directory and record) removed.
:meth:`CsiVolumePlugin.clean_staged` unstages what no pod uses (an agent killed between stage
and publish). A driver that is not registered keeps its volumes until it is (the kubelet
retries the same way).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nodeagent.apiserver import Api, ApiError, NotFound, Resource
from nodeagent.csi import CsiError, CsiNode
from nodeagent.csi.types import Capability, PublishRequest, StageRequest, VolumeStats
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.claims import BoundVolume
from nodeagent.volumemanager.csi import paths, records
from nodeagent.volumemanager.csi.driverinfo import (
    CSIDRIVERS,
    DriverInfo,
    access_mode,
    applies_fs_group,
    check_lifecycle_mode,
    driver_info,
    pod_info_attributes,
)
from nodeagent.volumemanager.csi.drivers import CsiUnknownDriver, DriverRegistry
from nodeagent.volumemanager.csi.tokens import token_attributes
from nodeagent.volumemanager.persistent import CsiHandle, SetUpVolume, link_device
from nodeagent.volumemanager.source import VolumeSetupError

VOLUME_ATTACHMENTS: Final = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
SECRETS: Final = Resource("", "v1", "secrets", "Secret", namespaced=True)
MOUNT_DEVICE_FAILED: Final = "MountVolume.MountDevice failed"
WAIT_FOR_ATTACH_FAILED: Final = "MountVolume.WaitForAttach failed"
SETUP_FAILED: Final = "MountVolume.SetUp failed"
MAP_SETUP_FAILED: Final = "MapVolume.SetUpDevice failed"
MAP_POD_FAILED: Final = "MapVolume.MapPodDevice failed"
PREFIX: Final = "kubernetes.io/csi: "


@dataclass(frozen=True, slots=True)
class _Source:
    """What the kubelet's ``getSourceFromSpec`` gives: a PV's or an inline volume's CSI
    source, normalised."""

    driver: str
    handle: str
    spec_name: str
    mode: str
    read_only: bool
    fs_type: str
    attributes: Mapping[str, str]
    mount_flags: tuple[str, ...] = ()
    pv_modes: tuple[str, ...] | None = None
    stage_secret: tuple[str, str] | None = None
    publish_secret: tuple[str, str] | None = None


def _persistent_source(pod: Pod, bound: BoundVolume) -> _Source:
    csi: dict[str, Any] = bound.pv_spec["csi"]
    ns = pod.namespace

    def ref(key: str) -> tuple[str, str] | None:
        r = csi.get(key)
        return (str(r.get("namespace") or ns), str(r.get("name"))) if r else None

    return _Source(
        driver=str(csi.get("driver", "")),
        handle=str(csi.get("volumeHandle", "")),
        spec_name=bound.pv_name,
        mode=paths.PERSISTENT,
        read_only=bound.read_only or bool(csi.get("readOnly")),
        fs_type=str(csi.get("fsType") or ""),
        attributes=dict(csi.get("volumeAttributes") or {}),
        mount_flags=tuple(bound.pv_spec.get("mountOptions") or ()),
        pv_modes=tuple(bound.pv_spec.get("accessModes") or ()),
        stage_secret=ref("nodeStageSecretRef"),
        publish_secret=ref("nodePublishSecretRef"),
    )


def _stage_request(
    source: _Source,
    target: Path,
    capability: Capability,
    context: Mapping[str, str],
    secrets: Mapping[str, str],
) -> StageRequest:
    return StageRequest(
        volume_id=source.handle,
        staging_target_path=str(target),
        capability=capability,
        publish_context=dict(context),
        volume_context=dict(source.attributes),
        secrets=dict(secrets),
    )


def _publish_request(
    source: _Source,
    target: Path,
    capability: Capability,
    context: Mapping[str, str],
    secrets: Mapping[str, str],
    *,
    staging: str,
    attributes: Mapping[str, str],
) -> PublishRequest:
    return PublishRequest(
        volume_id=source.handle,
        target_path=str(target),
        capability=capability,
        read_only=source.read_only,
        staging_target_path=staging,
        publish_context=dict(context),
        volume_context=dict(attributes),
        secrets=dict(secrets),
    )


@dataclass
class _Staged:
    users: set[str] = field(default_factory=set)
    block_staged: bool = False
    """A block volume's ``NodeStageVolume`` answered (a file system volume's entry exists
    only once staged)."""


class CsiVolumePlugin:
    def __init__(
        self,
        *,
        root_dir: str,
        node_name: str,
        api: Api | None,
        drivers: DriverRegistry,
        log: Logger | None = None,
    ) -> None:
        self._root = root_dir
        self._node = node_name
        self._api = api
        self._drivers = drivers
        self._log = log or get_logger("csi")
        self._staged: dict[tuple[str, str], _Staged] = {}

    # --- lookups ----------------------------------------------------------------------

    async def _driver_info(self, name: str) -> DriverInfo:
        if self._api is None:
            return driver_info(name, None)
        try:
            return driver_info(name, await self._api.get(CSIDRIVERS, name))
        except NotFound:
            return driver_info(name, None)
        except ApiError as e:
            raise VolumeSetupError(f"{PREFIX}failed to get CSIDriver {name}: {e.message}") from e

    def _client(self, source: _Source, operation: str) -> CsiNode:
        try:
            return self._drivers.client(source.driver)
        except CsiUnknownDriver as e:
            what = {
                MOUNT_DEVICE_FAILED: "attacher.MountDevice failed to create newCsiDriverClient",
                MAP_SETUP_FAILED: "blockMapper.SetUpDevice failed to get CSI client",
            }.get(operation, "mounter.SetUpAt failed to get CSI client")
            raise VolumeSetupError(
                f"{PREFIX}{what}: {e}", operation=operation, spec_name=source.spec_name
            ) from e

    async def _secret(self, ref: tuple[str, str] | None, what: str) -> dict[str, str]:
        if ref is None or self._api is None:
            return {}
        namespace, name = ref
        try:
            obj = await self._api.get(SECRETS, name, namespace=namespace)
        except ApiError as e:
            raise VolumeSetupError(f"fetching {what} {namespace}/{name} failed: {e.message}") from e
        return {
            str(k): base64.b64decode(str(v)).decode(errors="replace")
            for k, v in (obj.get("data") or {}).items()
        }

    async def _publish_context(self, source: _Source, info: DriverInfo) -> dict[str, str]:
        if not info.attach_required or self._api is None:
            return {}
        name = paths.attachment_name(source.handle, source.driver, self._node)
        try:
            va = await self._api.get(VOLUME_ATTACHMENTS, name)
        except ApiError as e:
            raise VolumeSetupError(
                f"volume attachment {name} is not there yet: {e.message}", operation=None
            ) from e
        status = va.get("status") or {}
        if not status.get("attached"):
            error = (status.get("attachError") or {}).get("message")
            if error:
                raise VolumeSetupError(
                    f"{PREFIX}attachment for {source.handle} failed: {error}",
                    operation=WAIT_FOR_ATTACH_FAILED,
                    spec_name=source.spec_name,
                )
            raise VolumeSetupError(f"volume attachment {name} is not attached yet", operation=None)
        return {str(k): str(v) for k, v in (status.get("attachmentMetadata") or {}).items()}

    # --- set up -----------------------------------------------------------------------

    async def set_up_persistent(self, pod: Pod, volume: Volume, bound: BoundVolume) -> SetUpVolume:
        return await self._set_up(pod, _persistent_source(pod, bound))

    async def set_up_inline(self, pod: Pod, volume: Volume) -> SetUpVolume:
        csi = volume.csi
        assert csi is not None
        secret = csi.node_publish_secret_ref
        source = _Source(
            driver=csi.driver,
            handle=paths.inline_handle(pod.uid, volume.name),
            spec_name=volume.name,
            mode=paths.EPHEMERAL,
            read_only=bool(csi.read_only),
            fs_type=csi.fs_type or "",
            attributes=dict(csi.volume_attributes),
            publish_secret=(pod.namespace, secret.name) if secret is not None else None,
        )
        return await self._set_up(pod, source)

    async def _set_up(self, pod: Pod, source: _Source) -> SetUpVolume:
        client = self._client(
            source, MOUNT_DEVICE_FAILED if source.mode == paths.PERSISTENT else SETUP_FAILED
        )
        info = await self._driver_info(source.driver)
        try:
            check_lifecycle_mode(info, source.mode)
        except ValueError as e:
            raise VolumeSetupError(
                f"{PREFIX}mounter.SetupAt failed to check volume lifecycle mode: {e}",
                spec_name=source.spec_name,
            ) from e
        try:
            caps = await self._drivers.capabilities(source.driver)
        except CsiError as e:
            raise VolumeSetupError(str(e), spec_name=source.spec_name) from e
        mode = access_mode(
            source.pv_modes or (), single_node_multi_writer=caps.single_node_multi_writer
        )
        psc = pod.spec.security_context
        fs_group = psc.fs_group if psc is not None else None
        group = str(fs_group) if caps.volume_mount_group and fs_group is not None else ""
        capability = Capability(
            access_mode=mode,
            fs_type=source.fs_type,
            mount_flags=source.mount_flags,
            volume_mount_group=group,
        )
        staging = ""
        context: dict[str, str] = {}
        if source.mode == paths.PERSISTENT:
            context = await self._publish_context(source, info)
            if caps.stage_unstage:
                staging = await self._stage(pod, source, client, capability, context)
        await self._publish(
            pod,
            source,
            info=info,
            client=client,
            capability=capability,
            context=context,
            staging=staging,
        )
        own = not caps.volume_mount_group and applies_fs_group(
            info,
            fs_group=fs_group,
            read_only=source.read_only,
            fs_type=source.fs_type,
            pv_modes=source.pv_modes,
        )
        target = paths.target_path(self._root, pod.uid, source.spec_name)
        return SetUpVolume(
            str(target),
            source.read_only,
            own=own,
            metrics="csi" if caps.get_volume_stats else "",
            csi=CsiHandle(source.driver, source.handle, staging),
            republish=info.requires_republish,
        )

    async def _stage(
        self,
        pod: Pod,
        source: _Source,
        client: CsiNode,
        capability: Capability,
        context: Mapping[str, str],
    ) -> str:
        key = (source.driver, source.handle)
        staged = self._staged.get(key)
        target = paths.global_mount_path(self._root, source.driver, source.handle)
        if staged is not None:
            staged.users.add(pod.uid)
            return str(target)
        secrets = await self._secret(source.stage_secret, "NodeStageSecretRef")
        data = {paths.VOLUME_HANDLE: source.handle, paths.DRIVER_NAME: source.driver}
        self._staged[key] = _Staged(users={pod.uid})  # before any await: no clean-up races it
        try:
            await asyncio.to_thread(records.make_dirs, target)
            await asyncio.to_thread(
                records.write, target.parent / paths.VOL_DATA, paths.vol_data_text(data)
            )
            await client.node_stage_volume(
                _stage_request(source, target, capability, context, secrets)
            )
        except (CsiError, OSError) as e:
            del self._staged[key]
            if isinstance(e, CsiError) and not e.uncertain:
                await asyncio.to_thread(records.remove_dir, target.parent)
            raise VolumeSetupError(
                str(e), operation=MOUNT_DEVICE_FAILED, spec_name=source.spec_name
            ) from e
        self._log.v(2).info(
            "MountVolume.MountDevice succeeded",
            volume=source.spec_name,
            device_mount_path=str(target),
            pod_uid=pod.uid,
        )
        return str(target)

    async def _publish(
        self,
        pod: Pod,
        source: _Source,
        *,
        info: DriverInfo,
        client: CsiNode,
        capability: Capability,
        context: Mapping[str, str],
        staging: str,
    ) -> None:
        directory = paths.pod_volume_dir(self._root, pod.uid, source.spec_name)
        target = directory / paths.MOUNT
        attributes = dict(source.attributes)
        if info.pod_info_on_mount:
            attributes.update(pod_info_attributes(pod, ephemeral=source.mode == paths.EPHEMERAL))
        secrets = await self._secret(source.publish_secret, "NodePublishSecretRef")
        tokens = await token_attributes(self._api, pod, info)
        if info.token_in_secrets:
            secrets.update(tokens)
        else:
            attributes.update(tokens)
        data = {
            paths.SPEC_VOL_ID: source.spec_name,
            paths.VOLUME_HANDLE: source.handle,
            paths.DRIVER_NAME: source.driver,
            paths.NODE_NAME: self._node,
            paths.LIFECYCLE_MODE: source.mode,
            paths.ATTACHMENT_ID: paths.attachment_name(source.handle, source.driver, self._node),
        }
        try:
            await asyncio.to_thread(records.make_dirs, directory)
            await asyncio.to_thread(
                records.write, directory / paths.VOL_DATA, paths.vol_data_text(data)
            )
            await client.node_publish_volume(
                _publish_request(
                    source,
                    target,
                    capability,
                    context,
                    secrets,
                    staging=staging,
                    attributes=attributes,
                )
            )
        except (CsiError, OSError) as e:
            if isinstance(e, CsiError) and not e.uncertain:
                await asyncio.to_thread(records.remove_dir, directory)
            raise VolumeSetupError(str(e), spec_name=source.spec_name) from e

    # --- raw block volumes ------------------------------------------------------------

    async def set_up_block(self, pod: Pod, volume: Volume, bound: BoundVolume) -> SetUpVolume:
        """A PV of ``volumeMode: Block``: staged once, published per pod on a file, and the
        pod's link to that file (module docstring). Raises :class:`VolumeSetupError`."""
        source = _persistent_source(pod, bound)
        key = (source.driver, source.handle)
        self._staged.setdefault(key, _Staged()).users.add(pod.uid)  # no clean-up races it
        client = self._client(source, MAP_SETUP_FAILED)
        info = await self._driver_info(source.driver)
        try:
            caps = await self._drivers.capabilities(source.driver)
        except CsiError as e:
            raise VolumeSetupError(str(e), spec_name=source.spec_name) from e
        capability = Capability(
            access_mode=access_mode(
                source.pv_modes or (), single_node_multi_writer=caps.single_node_multi_writer
            ),
            block=True,
        )
        context = await self._publish_context(source, info)
        data = {
            paths.SPEC_VOL_ID: source.spec_name,
            paths.VOLUME_HANDLE: source.handle,
            paths.DRIVER_NAME: source.driver,
            paths.NODE_NAME: self._node,
            paths.ATTACHMENT_ID: paths.attachment_name(source.handle, source.driver, self._node),
        }
        data_file = paths.block_data_file(self._root, source.spec_name)
        try:
            await asyncio.to_thread(records.make_dirs, data_file.parent)
            await asyncio.to_thread(records.write, data_file, paths.vol_data_text(data))
        except OSError as e:
            raise VolumeSetupError(
                f"{PREFIX}blockMapper.SetUpDevice: {e}",
                operation=MAP_SETUP_FAILED,
                spec_name=source.spec_name,
            ) from e
        staging = ""
        if caps.stage_unstage:
            staging = await self._stage_block(source, client, capability, context)
        link = await self._publish_block(
            pod, source, client=client, capability=capability, context=context, staging=staging
        )
        return SetUpVolume(
            str(link),
            source.read_only,
            own=False,
            csi=CsiHandle(source.driver, source.handle, staging),
            block=True,
        )

    async def _stage_block(
        self,
        source: _Source,
        client: CsiNode,
        capability: Capability,
        context: Mapping[str, str],
    ) -> str:
        """``NodeStageVolume`` on the volume's staging directory, once while the agent runs
        (a staged volume is staged again after a restart: the call is idempotent)."""
        staged = self._staged[(source.driver, source.handle)]
        target = paths.block_staging_path(self._root, source.spec_name)
        if staged.block_staged:
            return str(target)
        secrets = await self._secret(source.stage_secret, "NodeStageSecretRef")
        try:
            await asyncio.to_thread(records.make_dirs, target)
            await client.node_stage_volume(
                _stage_request(source, target, capability, context, secrets)
            )
        except (CsiError, OSError) as e:
            if isinstance(e, CsiError) and not e.uncertain:
                with contextlib.suppress(OSError):
                    await asyncio.to_thread(target.rmdir)
            raise VolumeSetupError(
                f"{PREFIX}blockMapper.stageVolumeForBlock failed: {e}",
                operation=MAP_SETUP_FAILED,
                spec_name=source.spec_name,
            ) from e
        staged.block_staged = True
        self._log.v(2).info(
            "MapVolume.SetUpDevice succeeded", volume=source.spec_name, staging_path=str(target)
        )
        return str(target)

    async def _publish_block(
        self,
        pod: Pod,
        source: _Source,
        *,
        client: CsiNode,
        capability: Capability,
        context: Mapping[str, str],
        staging: str,
    ) -> Path:
        """``NodePublishVolume`` on ``publish/<specName>/<podUID>``; the pod's link to it is
        made first, so that a teardown after a ``kill -9`` at any point finds the volume."""
        target = paths.block_publish_path(self._root, source.spec_name, pod.uid)
        link = paths.pod_device_link(self._root, pod.uid, source.spec_name)
        secrets = await self._secret(source.publish_secret, "NodePublishSecretRef")
        try:
            await asyncio.to_thread(records.make_dirs, target.parent)
            await asyncio.to_thread(link_device, str(target), link)
            await client.node_publish_volume(
                _publish_request(
                    source,
                    target,
                    capability,
                    context,
                    secrets,
                    staging=staging,
                    attributes=source.attributes,
                )
            )
        except (CsiError, OSError) as e:
            raise VolumeSetupError(
                f"{PREFIX}blockMapper.publishVolumeForBlock failed: {e}",
                operation=MAP_POD_FAILED,
                spec_name=source.spec_name,
            ) from e
        self._log.v(2).info(
            "MapVolume.MapPodDevice succeeded",
            volume=source.spec_name,
            pod_uid=pod.uid,
            publish_path=str(target),
        )
        return link

    async def _unmap_pod_blocks(self, uid: str) -> bool:
        """``NodeUnpublishVolume`` of each block volume the pod links to, then the link (the
        kubelet's ``UnmapPodDevice``); False when one remains."""
        done = True
        for name in await asyncio.to_thread(records.pod_block_links, self._root, uid):
            link = paths.pod_device_dir(self._root, uid) / name
            block = await asyncio.to_thread(records.read_block, self._root, name)
            target = paths.block_publish_path(self._root, name, uid)
            if block is not None and block.driver:
                try:
                    client = self._drivers.client(block.driver)
                    await client.node_unpublish_volume(block.handle, str(target))
                    await asyncio.to_thread(records.remove_unpublished, target)
                except (CsiUnknownDriver, CsiError, OSError) as e:
                    self._log.warning(
                        "UnmapVolume.UnmapPodDevice failed", pod_uid=uid, volume=name, error=str(e)
                    )
                    done = False
                    continue
                staged = self._staged.get((block.driver, block.handle))
                if staged is not None:
                    staged.users.discard(uid)
            await asyncio.to_thread(records.remove_unpublished, link)
            self._log.v(2).info("UnmapVolume.UnmapPodDevice succeeded", pod_uid=uid, volume=name)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(paths.pod_device_dir(self._root, uid).rmdir)
        return done

    async def _clean_staged_blocks(self) -> bool:
        """Unstage every block volume no pod links to; False when one could not be."""
        done = True
        blocks = await asyncio.to_thread(records.block_volumes, self._root)
        if not blocks:
            return True
        in_use = await asyncio.to_thread(records.blocks_in_use, self._root)
        for block in blocks:
            key = (block.driver, block.handle)
            staged = self._staged.get(key)
            if (staged is not None and staged.users) or block.spec_name in in_use:
                continue
            target = paths.block_staging_path(self._root, block.spec_name)
            staged_on_disk: bool = await asyncio.to_thread(os.path.lexists, target)
            if block.driver and staged_on_disk:
                try:
                    client = self._drivers.client(block.driver)
                    await client.node_unstage_volume(block.handle, str(target))
                except (CsiUnknownDriver, CsiError) as e:
                    self._log.warning("UnmapDevice failed", volume=block.spec_name, error=str(e))
                    done = False
                    continue
            self._staged.pop(key, None)
            await asyncio.to_thread(records.remove_block_volume, self._root, block.spec_name)
            self._log.v(2).info("UnmapDevice succeeded", volume=block.spec_name)
        return done

    # --- tear down ---------------------------------------------------------------------

    async def tear_down_pod(self, uid: str) -> bool:
        """Unpublish the pod's CSI volumes and unstage the ones no pod uses any more; False
        when some remain (a driver not registered, an RPC that failed)."""
        base = Path(self._root) / "pods" / uid / "volumes" / paths.POD_PLUGIN_DIR
        done = True
        for p in await asyncio.to_thread(records.read_published, base):
            if not p.driver:
                await asyncio.to_thread(records.remove_dir, p.directory)
                continue
            try:
                client = self._drivers.client(p.driver)
                await client.node_unpublish_volume(p.handle, str(p.directory / paths.MOUNT))
            except (CsiUnknownDriver, CsiError) as e:
                self._log.warning(
                    "UnmountVolume.TearDown failed",
                    pod_uid=uid,
                    volume=p.directory.name,
                    error=str(e),
                )
                done = False
                continue
            await asyncio.to_thread(records.remove_dir, p.directory)
            self._log.v(2).info(
                "UnmountVolume.TearDown succeeded", pod_uid=uid, volume=p.directory.name
            )
            staged = self._staged.get((p.driver, p.handle))
            if staged is not None:
                staged.users.discard(uid)
        with contextlib.suppress(OSError):
            await asyncio.to_thread(base.rmdir)
        if not await self._unmap_pod_blocks(uid):
            done = False
        return await self.clean_staged() and done

    async def clean_staged(self) -> bool:
        """Unstage every staged volume no pod publishes; False when one could not be."""
        used = await asyncio.to_thread(records.all_published, self._root)
        done = True
        for directory, driver, handle in await asyncio.to_thread(records.staged, self._root):
            key = (driver, handle)
            staged = self._staged.get(key)
            if key in used or (staged is not None and staged.users):
                continue
            try:
                client = self._drivers.client(driver)
                await client.node_unstage_volume(handle, str(directory / paths.GLOBAL_MOUNT))
            except (CsiUnknownDriver, CsiError) as e:
                self._log.warning(
                    "UnmountDevice failed", driver=driver, volume_handle=handle, error=str(e)
                )
                done = False
                continue
            self._staged.pop(key, None)
            await asyncio.to_thread(records.remove_dir, directory)
            self._log.v(2).info("UnmountDevice succeeded", driver=driver, volume_handle=handle)
        return await self._clean_staged_blocks() and done

    def volumes_in_use(self) -> list[str]:
        """The node status' ``volumesInUse``: every persistent CSI volume staged or being
        staged for a pod (the kubelet's unique name ``kubernetes.io/csi/<driver>^<handle>``)."""
        return sorted(
            f"{paths.PLUGIN_NAME}/{driver}^{handle}"
            for (driver, handle), staged in self._staged.items()
            if staged.users
        )

    def forget(self, uid: str) -> None:
        for staged in self._staged.values():
            staged.users.discard(uid)

    async def expand(self, handle: CsiHandle, path: str, size: int) -> None:
        """``NodeExpandVolume`` to ``size`` bytes when the driver has ``EXPAND_VOLUME`` (a
        driver without it has nothing to do on the node); raises ``CsiError``."""
        try:
            client = self._drivers.client(handle.driver)
        except CsiUnknownDriver as e:
            raise CsiError(rpc="NodeExpandVolume", code="Unavailable", details=str(e)) from e
        if not (await self._drivers.capabilities(handle.driver)).expand_volume:
            return
        await client.node_expand_volume(handle.volume_handle, path, size, handle.staging_path)

    async def volume_stats(self, handle: CsiHandle, path: str) -> VolumeStats | None:
        """``NodeGetVolumeStats`` of a published volume; None when the driver cannot say."""
        try:
            client = self._drivers.client(handle.driver)
            return await client.node_get_volume_stats(
                handle.volume_handle, path, handle.staging_path
            )
        except (CsiUnknownDriver, CsiError) as e:
            self._log.v(4).info("NodeGetVolumeStats failed", path=path, error=str(e))
            return None

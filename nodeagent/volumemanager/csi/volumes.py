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

Tear down (:meth:`CsiVolumePlugin.tear_down_pod`): every ``vol_data.json`` under the pod's
``kubernetes.io~csi`` is ``NodeUnpublishVolume``'d and removed; a staged volume no other pod
publishes any more is ``NodeUnstageVolume``'d and its global directory removed.
:meth:`CsiVolumePlugin.clean_staged` unstages what no pod uses (an agent killed between stage
and publish). A driver that is not registered keeps its volumes until it is (the kubelet
retries the same way).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
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
from nodeagent.volumemanager.persistent import CsiHandle, SetUpVolume
from nodeagent.volumemanager.source import VolumeSetupError

VOLUME_ATTACHMENTS: Final = Resource(
    "storage.k8s.io", "v1", "volumeattachments", "VolumeAttachment", namespaced=False
)
SECRETS: Final = Resource("", "v1", "secrets", "Secret", namespaced=True)
MOUNT_DEVICE_FAILED: Final = "MountVolume.MountDevice failed"
WAIT_FOR_ATTACH_FAILED: Final = "MountVolume.WaitForAttach failed"
SETUP_FAILED: Final = "MountVolume.SetUp failed"
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


@dataclass
class _Staged:
    users: set[str] = field(default_factory=set)


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
            raise VolumeSetupError(
                f"{PREFIX}attacher.MountDevice failed to create newCsiDriverClient: {e}"
                if operation == MOUNT_DEVICE_FAILED
                else f"{PREFIX}mounter.SetUpAt failed to get CSI client: {e}",
                operation=operation,
                spec_name=source.spec_name,
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
        csi: dict[str, Any] = bound.pv_spec["csi"]
        ns = pod.namespace

        def ref(key: str) -> tuple[str, str] | None:
            r = csi.get(key)
            return (str(r.get("namespace") or ns), str(r.get("name"))) if r else None

        source = _Source(
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
        return await self._set_up(pod, source)

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
                StageRequest(
                    volume_id=source.handle,
                    staging_target_path=str(target),
                    capability=capability,
                    publish_context=dict(context),
                    volume_context=dict(source.attributes),
                    secrets=secrets,
                )
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
                PublishRequest(
                    volume_id=source.handle,
                    target_path=str(target),
                    capability=capability,
                    read_only=source.read_only,
                    staging_target_path=staging,
                    publish_context=dict(context),
                    volume_context=attributes,
                    secrets=secrets,
                )
            )
        except (CsiError, OSError) as e:
            if isinstance(e, CsiError) and not e.uncertain:
                await asyncio.to_thread(records.remove_dir, directory)
            raise VolumeSetupError(str(e), spec_name=source.spec_name) from e

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
        return done

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

"""The volume manager: each pod's volumes set up before its containers start (the kubelet's
``WaitForAttachAndMount``), refreshed on every sync, torn down once its containers are gone.

:meth:`VolumeManager.set_up` makes ``<rootDir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>``
for every volume (a hostPath volume is the host path, after its ``type`` check): an emptyDir on
disk, or on tmpfs for ``medium: Memory``; configMap and downwardAPI on disk, secret and
projected on tmpfs, their files written by the :class:`ContentSource` on every call so updates
reach running pods (its writer applies ``fsGroup`` to them, as the kubelet's); ``fsGroup``
ownership of emptyDirs (``ownership.py``), once: the kubelet's ``ready`` mark on disk
(``readymark.py``) keeps a restarted agent from walking them again. It never raises for a
volume: the result names each volume that failed with the ``FailedMount`` text, whether the pod
may start containers (every volume set up once), and when to try again (0.5 s doubling to
2 min 2 s, the kubelet's volume operation back-off). A source the node does not set up
(persistentVolumeClaim, csi, ...) fails the same way, by name, so the pod waits in
``ContainerCreating``.

:meth:`PodVolumes.container_mounts` gives the runtime manager a container's mounts (subPath
checked, then bind-mounted from a descriptor under ``<podDir>/volume-subpaths``:
``subpath.py``). :meth:`VolumeManager.tear_down` unmounts everything mounted below the
pod's directory (deepest first) and removes the volumes (a terminated pod still in the API)
or the whole directory (the pod is gone), never following a symlink or crossing into a mount;
it leaves the directory when a mount cannot be removed and says so.
:meth:`VolumeManager.clean_orphans` does that for every pod directory whose UID the caller does
not keep (agent start, housekeeping), so a ``kill -9`` mid-setup leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nodeagent.apiserver import Api
from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.kuberuntime.mounts import HostDevice, HostMount
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Container, Pod, Volume
from nodeagent.volumemanager import layout, readymark, subpath
from nodeagent.volumemanager.claimed import ClaimedVolumes, CsiVolumes
from nodeagent.volumemanager.claims import ClaimResolver, uses_claim
from nodeagent.volumemanager.hostpath import check_host_path
from nodeagent.volumemanager.layout import MountedVolume
from nodeagent.volumemanager.mounter import Mounter, MountError, SystemMounter, below
from nodeagent.volumemanager.ownership import set_volume_ownership
from nodeagent.volumemanager.persistent import VOLUME_DEVICES
from nodeagent.volumemanager.pvstats import volume_entries
from nodeagent.volumemanager.source import (
    ContentSource,
    NoContentSource,
    VolumeSetupError,
    failure_message,
)

RETRY_INITIAL: Final = 0.5  # nestedpendingoperations' initialDurationBeforeRetry
RETRY_MAX: Final = 122.0  # maxDurationBeforeRetry: 2m2s
POD_DIR_MODE: Final = 0o750
VOLUME_DIR_MODE: Final = 0o777
DIR_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
VOLUMES: Final = "volumes"
SUBPATHS: Final = "volume-subpaths"
PLUGINS: Final = "plugins"


@dataclass
class PodVolumes:
    """The outcome of one :meth:`VolumeManager.set_up` of a pod."""

    mounted: dict[str, MountedVolume] = field(default_factory=dict)
    failures: dict[str, str] = field(default_factory=dict)
    """volume name -> why it cannot be set up (the ``FailedMount`` text after ``: ``)."""
    events: dict[str, str] = field(default_factory=dict)
    """volume name -> the ``FailedMount`` Event to post (not every failure has one)."""
    missing: tuple[str, ...] = ()
    """Volumes never set up: the pod's containers must not start."""
    retry_in: float | None = None
    log: Logger = field(default_factory=lambda: get_logger("volumes"))
    pod_dir: str = ""
    mounter: Mounter | None = None
    """Bind-mounts checked subPaths under ``pod_dir``; None mounts the checked path itself."""

    @property
    def ready(self) -> bool:
        return not self.missing

    def container_devices(self, container: Container) -> Sequence[HostDevice]:
        """``container``'s ``volumeDevices`` as the kubelet's ``makeBlockVolumes`` builds them
        (the pod's link to the device, ``mrw`` or ``r`` for a read-only claim); raises
        ``ContainerConfigError`` with its messages."""
        out = []
        for device in container.volume_devices:
            name, path = str(device.get("name", "")), str(device.get("devicePath", ""))
            if not path.startswith("/"):
                raise ContainerConfigError(f"error DevicePath `{path}` must be an absolute path")
            volume = self.mounted.get(name)
            if volume is None or not volume.block:
                raise ContainerConfigError(
                    f'cannot find volume "{name}" to pass into container "{container.name}"'
                )
            out.append(HostDevice(path, volume.path, "r" if volume.read_only else "mrw"))
        return out

    async def container_mounts(
        self, container: Container, env: Mapping[str, str]
    ) -> Sequence[HostMount]:
        """``container``'s mounts as the kubelet's ``makeMounts`` builds them; raises
        ``ContainerConfigError`` with its messages."""
        out = []
        for index, mount in enumerate(container.volume_mounts):
            volume = self.mounted.get(mount.name)
            if volume is None:
                raise ContainerConfigError(
                    f'cannot find volume "{mount.name}" to mount into container "{container.name}"'
                )
            host = volume.path
            sub = mount.sub_path
            if mount.sub_path_expr:
                sub = subpath.expand_expr(mount.sub_path_expr, env)
            if sub:
                subpath.check_relative(sub)
                resolved = await asyncio.to_thread(
                    subpath.prepare,
                    host,
                    sub,
                    mount_name=mount.name,
                    container=container.name,
                    log=self.log,
                )
                host = await self._bind_sub_path(host, resolved, mount.name, container, index)
            try:
                propagation = layout.propagation(mount.mount_propagation)
            except ValueError as e:
                raise ContainerConfigError(str(e)) from e
            if propagation != "private":
                await self._share(host, mount.name)
            if mount.recursive_read_only == "Enabled":
                raise ContainerConfigError(
                    f'volumeMount "{mount.name}": recursiveReadOnly "Enabled" is not '
                    "supported on this node"
                )
            out.append(
                HostMount(
                    container_path=mount.mount_path,
                    host_path=host,
                    read_only=mount.read_only or volume.read_only,
                    propagation=propagation,
                )
            )
        return out

    async def _share(self, host: str, mount_name: str) -> None:
        """Make a volume below the pod directory a shared mount of its own (bound onto itself
        when it is a plain directory), so the runtime accepts ``HostToContainer`` and
        ``Bidirectional`` propagation whatever the propagation of the filesystem holding the
        root directory (the kubelet makes its whole root directory rshared for that). A
        hostPath is the host's: as with the kubelet, its own mount must be shared."""
        if self.mounter is None or not self.pod_dir:
            return
        real = await asyncio.to_thread(os.path.realpath, host)
        base = await asyncio.to_thread(os.path.realpath, self.pod_dir)
        if not real.startswith(base + "/"):
            return
        try:
            if real not in await self.mounter.mount_points():
                await self.mounter.bind(real, real)
            await self.mounter.make_shared(real)
        except (OSError, MountError) as e:
            self.log.error("Cannot share a volume's mount", path=real, error=str(e))
            raise ContainerConfigError(
                f'failed to share volumeMount "{mount_name}" for its mountPropagation'
            ) from e

    async def _bind_sub_path(
        self, volume: str, resolved: str, mount_name: str, container: Container, index: int
    ) -> str:
        """``resolved`` opened without following symlinks and bind-mounted from that
        descriptor under the pod directory (kept across container restarts while it is still
        the same file), so what the runtime mounts cannot be swapped after the check."""
        if self.mounter is None:
            return resolved
        try:
            fd = await asyncio.to_thread(subpath.open_within, volume, resolved)
        except (OSError, subpath.SubPathEscape) as e:
            raise self._prepare_failed(mount_name, container, e) from e
        try:
            is_dir = stat.S_ISDIR(os.fstat(fd).st_mode)
            target = await asyncio.to_thread(
                subpath.bind_target,
                self.pod_dir,
                mount_name,
                container.name,
                index,
                is_dir=is_dir,
            )
            if target in await self.mounter.mount_points():
                if await asyncio.to_thread(subpath.same_file, target, fd):
                    return target
                await self.mounter.unmount(target)
            await self.mounter.bind(f"/proc/{os.getpid()}/fd/{fd}", target)
            return target
        except (OSError, MountError) as e:
            raise self._prepare_failed(mount_name, container, e) from e
        finally:
            os.close(fd)

    def _prepare_failed(
        self, mount_name: str, container: Container, error: Exception
    ) -> ContainerConfigError:
        self.log.error(
            "Failed to prepare subPath for volumeMount of the container",
            container_name=container.name,
            volume_mount_name=mount_name,
            error=str(error),
        )
        return ContainerConfigError(
            f'failed to prepare subPath for volumeMount "{mount_name}" of container '
            f'"{container.name}"'
        )


def remove_tree(path: str) -> None:
    """Remove the directory tree at ``path`` through directory descriptors opened with
    ``O_NOFOLLOW``: a symlink is removed, never followed; a directory on another device (a
    mount) stops the removal with ``EBUSY``. Iterative: a container controls the depth."""
    root = os.open(path, DIR_FLAGS)
    device = os.fstat(root).st_dev
    stack: list[tuple[int, list[str], int | None, str]] = [(root, os.listdir(root), None, "")]
    try:
        while stack:
            fd, pending, parent, name = stack[-1]
            if not pending:
                stack.pop()
                os.close(fd)
                if parent is not None:
                    os.rmdir(name, dir_fd=parent)
                continue
            child = pending.pop()
            st = os.stat(child, dir_fd=fd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                os.unlink(child, dir_fd=fd)
            elif st.st_dev != device:
                raise OSError(errno.EBUSY, "a mount point is still below the pod directory", child)
            else:
                child_fd = os.open(child, DIR_FLAGS, dir_fd=fd)
                stack.append((child_fd, os.listdir(child_fd), fd, child))
    finally:
        for fd, *_ in stack:
            os.close(fd)
    os.rmdir(path)


def _make_dir(path: Path, mode: int) -> None:
    """``path`` with ``mode`` (umask aside) when it is new; an existing one (a mounted tmpfs,
    a volume whose fsGroup bits are set) keeps its mode."""
    try:
        path.mkdir(mode=mode)
    except FileExistsError:
        return
    os.chmod(path, mode)


def _make_pod_dirs(root_dir: str, uid: str) -> None:
    pods = layout.pods_dir(root_dir)
    pods.mkdir(mode=0o750, parents=True, exist_ok=True)
    pod = layout.pod_dir(root_dir, uid)
    pod.mkdir(mode=POD_DIR_MODE, exist_ok=True)
    (pod / "volumes").mkdir(mode=POD_DIR_MODE, exist_ok=True)


def _make_volume_dir(path: Path) -> None:
    path.parent.mkdir(mode=POD_DIR_MODE, exist_ok=True)
    _make_dir(path, VOLUME_DIR_MODE)


def _still_ready(path: Path, meta: Path, mounts: Sequence[str], tmpfs: bool) -> bool:
    """The volume was set up (and owned) before, by this agent or an earlier one: its ready
    mark is on disk and its directory still there (else the mark goes), its tmpfs still
    mounted for ``medium: Memory`` (a new one is set up again), as the kubelet's."""
    if not readymark.is_ready(meta):
        return False
    if tmpfs:
        return os.path.realpath(path) in mounts
    if os.path.lexists(path):
        return True
    readymark.clear(meta)
    return False


def _list_pod_dirs(root_dir: str) -> list[str]:
    try:
        entries = list(os.scandir(layout.pods_dir(root_dir)))
    except FileNotFoundError:
        return []
    return [e.name for e in entries if e.is_dir(follow_symlinks=False)]


@dataclass
class _PodState:
    ready: dict[str, MountedVolume] = field(default_factory=dict)
    owned: set[str] = field(default_factory=set)
    attempts: int = 0


class VolumeManager:
    def __init__(
        self,
        *,
        root_dir: str,
        content: ContentSource | None = None,
        mounter: Mounter | None = None,
        allocatable_memory: Callable[[], int | None] = lambda: None,
        api: Api | None = None,
        node_name: str = "",
        node_labels: Callable[[], Mapping[str, str]] = dict,
        csi: CsiVolumes | None = None,
        log: Logger | None = None,
    ) -> None:
        """``allocatable_memory``: the node's allocatable memory in bytes (the largest tmpfs
        a memory-backed volume gets); ``api`` reads claims and PersistentVolumes;
        ``node_labels`` (the Node's) decide a PV's ``nodeAffinity``; ``csi`` sets up CSI
        volumes (None: they fail by name)."""
        self._root = root_dir
        self._content: ContentSource = content or NoContentSource()
        self._mounter: Mounter = mounter or SystemMounter()
        self._allocatable_memory = allocatable_memory
        self._log = log or get_logger("volumes")
        self._csi = csi
        self._claims = ClaimedVolumes(
            root_dir=root_dir,
            resolver=ClaimResolver(api=api),
            mounter=self._mounter,
            node_name=node_name,
            node_labels=node_labels,
            csi=csi,
            log=self._log,
        )
        self._pods: dict[str, _PodState] = {}
        self._tearing_down: set[str] = set()
        self._root_shared = False

    def pod_dir(self, uid: str) -> Path:
        return layout.pod_dir(self._root, uid)

    # --- setting up ---------------------------------------------------------------------

    async def ensure_root_shared(self) -> None:
        """Make the root directory a shared mount of its own unless it already propagates,
        as the kubelet's ``MakeRShared`` at start: a CSI plugin's container mounts volumes
        below it with ``Bidirectional`` propagation, which the runtime refuses on a private
        mount. Once per agent; a failure is logged and tried again on the next call."""
        if self._root_shared:
            return
        try:
            await asyncio.to_thread(os.makedirs, self._root, 0o750, True)
            real = await asyncio.to_thread(os.path.realpath, self._root)
            if not await self._mounter.is_shared(real):
                await self._mounter.bind(real, real)
                await self._mounter.make_shared(real)
                self._log.info("Made the root directory a shared mount", path=real)
        except (OSError, MountError) as e:
            self._log.error("Cannot make the root directory shared", path=self._root, error=str(e))
            return
        self._root_shared = True

    async def set_up(self, pod: Pod) -> PodVolumes:
        await self.ensure_root_shared()
        state = self._pods.setdefault(pod.uid, _PodState())
        result = PodVolumes(
            log=self._log, pod_dir=str(self.pod_dir(pod.uid)), mounter=self._mounter
        )
        await asyncio.to_thread(_make_pod_dirs, self._root, pod.uid)
        mounts: list[str] | None = None
        for volume in pod.spec.volumes:
            if volume.image is not None:
                # The runtime mounts an image volume (CRI Mount.image): nothing on the host.
                state.ready[volume.name] = MountedVolume("", read_only=True)
                continue
            try:
                reason = layout.unsupported_reason(volume)
                if reason is not None:
                    raise VolumeSetupError(reason)
                if mounts is None and (layout.on_tmpfs(volume) or uses_claim(volume)):
                    mounts = await self._mount_points()
                if uses_claim(volume):
                    mounted = await self._claims.set_up(pod, volume, mounts or [])
                elif volume.csi is not None:
                    mounted = await self._claims.set_up_inline(pod, volume)
                else:
                    path = await self._set_up_volume(pod, volume, state, mounts or [])
                    mounted = MountedVolume(path, layout.mounted_read_only(volume))
            except VolumeSetupError as e:
                result.failures[volume.name] = e.message
                if e.operation is not None:
                    result.events[volume.name] = layout.setup_failed_message(
                        e.spec_name or volume.name, e.message, e.operation
                    )
                if volume.name not in state.ready:
                    continue
                mounted = state.ready[volume.name]  # keeps running
            state.ready[volume.name] = mounted
            result.mounted[volume.name] = mounted
        result.missing = tuple(v.name for v in pod.spec.volumes if v.name not in state.ready)
        if result.failures:
            result.retry_in = min(RETRY_INITIAL * 2**state.attempts, RETRY_MAX)
            state.attempts += 1
            for name, message in result.failures.items():
                what = (
                    "MountVolume.SetUp failed"
                    if name in result.events
                    else ("Error processing volume")
                )
                self._log.warning(
                    what,
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    volume=name,
                    error=message,
                )
        else:
            state.attempts = 0
        return result

    async def _mount_points(self) -> list[str]:
        try:
            return await self._mounter.mount_points()
        except OSError as e:
            raise VolumeSetupError(f"cannot read the mount table: {e}") from e

    async def _set_up_volume(
        self, pod: Pod, volume: Volume, state: _PodState, mounts: list[str]
    ) -> str:
        if volume.host_path is not None:
            await asyncio.to_thread(check_host_path, volume.host_path.path, volume.host_path.type)
            return volume.host_path.path
        path = layout.volume_path(self._root, pod.uid, volume)
        meta = layout.plugin_meta_dir(self._root, pod.uid, volume)
        owned = volume.name in state.owned
        if not owned and volume.empty_dir is not None:
            owned = await asyncio.to_thread(
                _still_ready, path, meta, mounts, layout.on_tmpfs(volume)
            )
        try:
            await asyncio.to_thread(_make_volume_dir, path)
        except OSError as e:
            raise VolumeSetupError(f"mkdir {path}: {os.strerror(e.errno or 0).lower()}") from e
        if layout.on_tmpfs(volume):
            await self._mount_tmpfs(pod, volume, path, mounts)
        if volume.source in layout.CONTENT_SOURCES:
            try:
                await self._content.set_up(pod, volume, path)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                raise VolumeSetupError(failure_message(e)) from e
            # fsGroup: the content writer owns its files, as the kubelet's atomic writer does
        elif not owned:
            await self._own(pod, volume, path, read_only=False)
            await asyncio.to_thread(readymark.set_ready, meta)
        state.owned.add(volume.name)
        return str(path)

    async def _mount_tmpfs(self, pod: Pod, volume: Volume, path: Path, mounts: list[str]) -> None:
        real = await asyncio.to_thread(os.path.realpath, path)
        if real in mounts:
            return
        size = layout.memory_size_limit(pod, volume, self._allocatable_memory())
        try:
            await self._mounter.mount_tmpfs(real, size)
        except (MountError, OSError) as e:
            raise VolumeSetupError(str(e)) from e
        self._log.v(2).info(
            "Mounted tmpfs volume",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            volume=volume.name,
            size=size or 0,
        )

    async def _own(self, pod: Pod, volume: Volume, path: Path, *, read_only: bool) -> None:
        psc = pod.spec.security_context
        if psc is None or psc.fs_group is None:
            return
        try:
            await asyncio.to_thread(
                set_volume_ownership,
                str(path),
                psc.fs_group,
                read_only=read_only,
                policy=psc.fs_group_change_policy,
                log=self._log,
            )
        except OSError as e:
            raise VolumeSetupError(f"applying fsGroup {psc.fs_group} to {path}: {e}") from e

    async def persistent_volume_stats(self, uid: str) -> list[dict[str, Any]]:
        """The Summary ``volume`` entries (no ``time``) of the pod's claimed and CSI
        volumes (``pvstats.py``)."""
        return await volume_entries(self._claims.claimed(uid), self._csi)

    # --- tearing down -------------------------------------------------------------------

    async def tear_down(self, uid: str, *, keep_pod_dir: bool = False) -> bool:
        """Unmount the pod's volumes and remove them; then its directory, unless
        ``keep_pod_dir`` (a terminated pod still in the API: the kubelet unmounts and removes
        its volumes then, and the directory once the pod is gone). True when done."""
        self._pods.pop(uid, None)
        self._content.forget(uid)
        self._claims.forget(uid)
        if self._csi is not None:
            self._csi.forget(uid)
        path = self.pod_dir(uid)
        if uid in self._tearing_down:
            return False
        self._tearing_down.add(uid)
        try:
            done = await self._tear_down(uid, path, keep_pod_dir=keep_pod_dir)
            if done:
                self._claims.release(uid)
            return done
        finally:
            self._tearing_down.discard(uid)

    async def _tear_down(self, uid: str, path: Path, *, keep_pod_dir: bool) -> bool:
        if not await asyncio.to_thread(os.path.lexists, path):
            return True
        if self._csi is not None and not await self._csi.tear_down_pod(uid):
            self._log.warning("Pod directory kept: CSI volumes are still published", pod_uid=uid)
            return False
        real = await asyncio.to_thread(os.path.realpath, path)
        for point in below(await self._mounter.mount_points(), real):
            try:
                await self._mounter.unmount(point)
            except MountError as e:
                self._log.warning("Cannot unmount volume", pod_uid=uid, path=point, error=str(e))
        left = below(await self._mounter.mount_points(), real)
        if left:
            self._log.warning(
                "Pod directory kept: mounts remain below it", pod_uid=uid, mounts=",".join(left)
            )
            return False
        doomed = (
            [path / VOLUMES, path / VOLUME_DEVICES, path / SUBPATHS, path / PLUGINS]
            if keep_pod_dir
            else [path]
        )
        try:
            for tree in doomed:
                if await asyncio.to_thread(os.path.lexists, tree):
                    await asyncio.to_thread(remove_tree, str(tree))
        except OSError as e:
            self._log.warning("Cannot remove pod directory", pod_uid=uid, error=str(e))
            return False
        what = "Removed pod volumes" if keep_pod_dir else "Removed pod directory"
        self._log.v(2).info(what, pod_uid=uid, path=str(path))
        return True

    async def clean_orphans(self, keep: Callable[[str], bool]) -> list[str]:
        """Tear down every pod directory whose UID ``keep`` rejects (asked again right
        before each one); the UIDs removed."""
        await self.ensure_root_shared()
        removed = []
        for uid in await asyncio.to_thread(_list_pod_dirs, self._root):
            if keep(uid):
                continue
            self._log.info("Cleaning up orphaned pod directory", pod_uid=uid)
            if await self.tear_down(uid):
                removed.append(uid)
        if self._csi is not None:
            await self._csi.clean_staged()
        return removed

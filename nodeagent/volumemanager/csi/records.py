"""The CSI plugin's records on disk: the ``vol_data.json`` beside each published and staged
volume, read back for teardown and clean-up after a restart, and the directories around them.
Blocking: call through ``asyncio.to_thread``."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from nodeagent.volumemanager.csi import paths

DIR_MODE: Final = 0o750


@dataclass(frozen=True, slots=True)
class Published:
    """A volume published for a pod, read back from its ``vol_data.json``."""

    directory: Path
    driver: str
    handle: str
    mode: str


def write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def make_dirs(path: Path) -> None:
    path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)


def read_published(pods_volumes: Path) -> list[Published]:
    found = []
    try:
        entries = list(os.scandir(pods_volumes))
    except FileNotFoundError:
        return []
    for entry in entries:
        if not entry.is_dir(follow_symlinks=False):
            continue
        data_file = Path(entry.path) / paths.VOL_DATA
        try:
            data = paths.parse_vol_data(data_file.read_text())
        except FileNotFoundError:
            found.append(Published(Path(entry.path), "", "", ""))  # publish never started
            continue
        except (OSError, ValueError):
            continue
        found.append(
            Published(
                Path(entry.path),
                data.get(paths.DRIVER_NAME, ""),
                data.get(paths.VOLUME_HANDLE, ""),
                data.get(paths.LIFECYCLE_MODE, paths.PERSISTENT),
            )
        )
    return found


def all_published(root_dir: str) -> set[tuple[str, str]]:
    """(driver, handle) of every persistent volume some pod directory publishes."""
    used: set[tuple[str, str]] = set()
    pods = Path(root_dir) / "pods"
    try:
        uids = [e.name for e in os.scandir(pods) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return used
    for uid in uids:
        for p in read_published(pods / uid / "volumes" / paths.POD_PLUGIN_DIR):
            if p.driver and p.mode != paths.EPHEMERAL:
                used.add((p.driver, p.handle))
    return used


def staged(root_dir: str) -> list[tuple[Path, str, str]]:
    """(staging dir, driver, handle) of every ``vol_data.json`` under the plugin dir."""
    out: list[tuple[Path, str, str]] = []
    base = paths.plugin_dir(root_dir)
    try:
        drivers = [
            e
            for e in os.scandir(base)
            if e.is_dir(follow_symlinks=False) and e.name != paths.DEVICES  # block volumes'
        ]
    except FileNotFoundError:
        return out
    for driver in drivers:
        for entry in os.scandir(driver.path):
            data_file = Path(entry.path) / paths.VOL_DATA
            try:
                data = paths.parse_vol_data(data_file.read_text())
            except (OSError, ValueError):
                continue
            out.append(
                (
                    Path(entry.path),
                    data.get(paths.DRIVER_NAME, driver.name),
                    data.get(paths.VOLUME_HANDLE, ""),
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class BlockVolume:
    """A raw block volume's record (``volumeDevices/<specName>/data/vol_data.json``)."""

    spec_name: str
    driver: str
    handle: str


def read_block(root_dir: str, spec_name: str) -> BlockVolume | None:
    """The block volume's record; None when there is none (or it cannot be read)."""
    try:
        data = paths.parse_vol_data(paths.block_data_file(root_dir, spec_name).read_text())
    except (OSError, ValueError):
        return None
    return BlockVolume(
        spec_name, data.get(paths.DRIVER_NAME, ""), data.get(paths.VOLUME_HANDLE, "")
    )


def block_volumes(root_dir: str) -> list[BlockVolume]:
    """Every raw block volume with a record on the node."""
    try:
        names = [
            e.name
            for e in os.scandir(paths.device_dir(root_dir))
            if e.is_dir(follow_symlinks=False) and e.name not in (paths.STAGING, paths.PUBLISH)
        ]
    except FileNotFoundError:
        return []
    return [b for b in (read_block(root_dir, n) for n in sorted(names)) if b is not None]


def pod_block_links(root_dir: str, uid: str) -> list[str]:
    """The names (escaped spec names) of the pod's links to CSI block volumes."""
    try:
        return sorted(e.name for e in os.scandir(paths.pod_device_dir(root_dir, uid)))
    except FileNotFoundError:
        return []


def blocks_in_use(root_dir: str) -> set[str]:
    """The block volumes (escaped spec names) some pod still links to or is still published
    with: each pod's links and each publish directory read once."""
    used: set[str] = set()
    pods = Path(root_dir) / "pods"
    try:
        uids = [e.name for e in os.scandir(pods) if e.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        uids = []
    for uid in uids:
        used.update(pod_block_links(root_dir, uid))
    try:
        published = list(os.scandir(paths.device_dir(root_dir) / paths.PUBLISH))
    except FileNotFoundError:
        return used
    for entry in published:
        if entry.is_dir(follow_symlinks=False) and _has_entries(entry.path):
            used.add(entry.name)
    return used


def _has_entries(directory: str) -> bool:
    try:
        with os.scandir(directory) as entries:
            return next(entries, None) is not None
    except FileNotFoundError:
        return False


def remove_unpublished(path: Path) -> None:
    """A publish path the driver left as a plain file (or a dangling link); a mount is not
    touched (``unlink`` of a mount point fails)."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def remove_block_volume(root_dir: str, spec_name: str) -> None:
    """The unstaged block volume's staging and publish directories and its record; each
    directory only when empty (nothing is forced)."""
    volume = paths.block_volume_dir(root_dir, spec_name)
    with contextlib.suppress(FileNotFoundError):
        paths.block_data_file(root_dir, spec_name).unlink()
    for directory in (
        paths.block_staging_path(root_dir, spec_name),
        paths.block_publish_dir(root_dir, spec_name),
        volume / paths.DATA,
        volume / "dev",
        volume,
    ):
        with contextlib.suppress(FileNotFoundError):
            directory.rmdir()


def remove_dir(path: Path) -> None:
    """``path`` (an unmounted directory) and its ``vol_data.json``; anything else left is
    kept (a mount the driver did not remove makes ``rmdir`` fail, and it is not forced)."""
    with contextlib.suppress(FileNotFoundError):
        (path / paths.VOL_DATA).unlink()
    for name in (paths.MOUNT, paths.GLOBAL_MOUNT):
        with contextlib.suppress(FileNotFoundError):
            (path / name).rmdir()
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()

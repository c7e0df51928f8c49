"""The usage of a pod's persistent and CSI volumes, as the Summary API's ``volume`` entries
(the kubelet's ``VolumeStats``: the pod's volume name, ``pvcRef`` for a claim) and the
``kubelet_volume_stats_*`` metrics read them: a CSI volume by ``NodeGetVolumeStats`` when its
driver has ``GET_VOLUME_STATS``, a local PV by ``statfs`` of its directory (the kubelet's
``MetricsStatFS``), a hostPath PV not at all (``MetricsNil``)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from nodeagent.csi.types import VolumeStats
from nodeagent.volumemanager.claimed import ClaimedVolume, CsiVolumes


def statfs_stats(path: str) -> VolumeStats:
    """Blocking: call through ``asyncio.to_thread``."""
    st = os.statvfs(path)
    return VolumeStats(
        capacity_bytes=st.f_blocks * st.f_frsize,
        available_bytes=st.f_bavail * st.f_frsize,
        used_bytes=(st.f_blocks - st.f_bfree) * st.f_frsize,
        inodes=st.f_files,
        inodes_free=st.f_ffree,
        inodes_used=st.f_files - st.f_ffree,
    )


def entry(volume: ClaimedVolume, stats: VolumeStats) -> dict[str, Any]:
    """A Summary ``volume`` entry, without its ``time``."""
    out: dict[str, Any] = {"name": volume.volume}
    for key, value in (
        ("availableBytes", stats.available_bytes),
        ("capacityBytes", stats.capacity_bytes),
        ("usedBytes", stats.used_bytes),
        ("inodesFree", stats.inodes_free),
        ("inodes", stats.inodes),
        ("inodesUsed", stats.inodes_used),
    ):
        if value is not None:
            out[key] = value
    if volume.claim is not None:
        out["pvcRef"] = {"name": volume.claim, "namespace": volume.namespace}
    return out


async def volume_entries(
    volumes: list[ClaimedVolume], csi: CsiVolumes | None
) -> list[dict[str, Any]]:
    out = []
    for volume in volumes:
        set_up = volume.set_up
        stats: VolumeStats | None = None
        if set_up.metrics == "statfs":
            try:
                stats = await asyncio.to_thread(statfs_stats, set_up.path)
            except OSError:
                stats = None
        elif set_up.metrics == "csi" and csi is not None and set_up.csi is not None:
            stats = await csi.volume_stats(set_up.csi, set_up.path)
        if stats is not None:
            out.append(entry(volume, stats))
    return out

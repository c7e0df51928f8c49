"""A pod with a tmpfs volume (every pod's service-account token) reads the mount table on each
of its syncs; with 110 pods the table has ~500 mounts (the containers' rootfs, the sandboxes'
shm, the token volumes), so its parse must not walk every character in Python."""

from __future__ import annotations

from nodeagent.volumemanager import mounter
from nodeagent.volumemanager.mounter import parse_mountinfo


def table(mounts: int) -> str:
    return "".join(
        f"{1000 + i} 27 0:{100 + i} / /run/containerd/io.containerd.runtime.v2.task/k8s.io/"
        f"{i:064x}/rootfs rw,relatime - overlay overlay rw,lowerdir=/var/lib/containerd/x\n"
        for i in range(mounts)
    )


def test_mount_points_without_escapes_are_taken_as_they_are() -> None:
    text = table(500)
    fields = [line.split(" ")[4] for line in text.splitlines()]
    points = parse_mountinfo(text)
    assert points == fields
    # the very strings split from the table: no per-character rebuild
    assert all(mounter._unescape(f) is f for f in fields)


def test_escaped_mount_points_are_still_unescaped() -> None:
    text = "90 22 0:50 / /var/lib/na/pods/u/volumes/a\\040b\\134c rw - tmpfs tmpfs rw\n"
    assert parse_mountinfo(text) == ["/var/lib/na/pods/u/volumes/a b\\c"]

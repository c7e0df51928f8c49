"""Loop devices whose backing files lie in a directory, detached: what the hostpath driver's
block volumes leave when its data directory is removed without their claims being deleted
first (`make down`, a failed test). A loop device's ``backing_file`` is the path as the process
that attached it saw it (the plugin's container sees ``/csi-data-dir``), so files are matched
by device and inode, which ``losetup`` reports as ``BACK-MAJ:MIN`` and ``BACK-INO``."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path


def parse_list(text: str) -> list[tuple[str, int, int, int]]:
    """``losetup --list --raw --noheadings --output NAME,BACK-INO,BACK-MAJ:MIN`` lines as
    (device, inode, major, minor); lines without a backing file are left out."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) != 3 or ":" not in fields[2] or not fields[1].isdigit():
            continue
        major, minor = fields[2].split(":", 1)
        out.append((fields[0], int(fields[1]), int(major), int(minor)))
    return out


def files_below(directory: Path) -> set[tuple[int, int, int]]:
    """(inode, major, minor) of every regular file below ``directory``; links not followed."""
    found = set()
    for top, _dirs, files in os.walk(directory):
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found.add((st.st_ino, os.major(st.st_dev), os.minor(st.st_dev)))
    return found


def detach_below(directory: Path) -> list[str]:
    """Detach every loop device backed by a file below ``directory``; the devices detached."""
    if not directory.is_dir():
        return []
    listing = subprocess.run(
        ["losetup", "--list", "--raw", "--noheadings", "--output", "NAME,BACK-INO,BACK-MAJ:MIN"],
        capture_output=True,
        text=True,
        check=False,
    )
    loops = parse_list(listing.stdout)
    if not loops:
        return []
    wanted = files_below(directory)
    detached = []
    for device, inode, major, minor in loops:
        if (inode, major, minor) in wanted:
            subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)
            detached.append(device)
    return detached

"""Which cgroup version the host runs, and the kubelet's ``failCgroupV1`` gate.

The kubelet asks ``statfs("/sys/fs/cgroup")`` for CGROUP2_SUPER_MAGIC; the mount table says the
same thing without a syscall binding: the file system type mounted at ``/sys/fs/cgroup`` is
``cgroup2`` on a unified (v2) host and ``tmpfs`` (with v1 hierarchies below it) otherwise.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_MOUNT = "/sys/fs/cgroup"
MOUNTS = Path("/proc/self/mounts")
CGROUP_V1_REFUSED = (
    "kubelet is configured to not run on a host using cgroup v1. cgroup v1 support is "
    "unsupported and will be removed in a future release"
)


def mounted_type(mounts: str, mount_point: str = CGROUP_MOUNT) -> str | None:
    """The file system type mounted last at ``mount_point`` in a ``/proc/self/mounts`` text."""
    found = None
    for line in mounts.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[1] == mount_point:
            found = fields[2]
    return found


def host_cgroup_fs() -> str | None:
    """What is mounted at /sys/fs/cgroup here: ``cgroup2`` on a v2 host."""
    return mounted_type(MOUNTS.read_text())


def cgroup_v1_refusal(*, cgroup_v2: bool, fail_cgroup_v1: bool, fs_type: str | None) -> str | None:
    """The error that stops the daemon on a v1 host when ``failCgroupV1`` is set, else None."""
    if cgroup_v2 or not fail_cgroup_v1:
        return None
    return (
        f"kubelet.failCgroupV1 (true): this host uses cgroup v1 ({CGROUP_MOUNT} is "
        f"{fs_type or 'not mounted'}, not cgroup2): {CGROUP_V1_REFUSED}. Boot with cgroup v2 "
        "(systemd.unified_cgroup_hierarchy=1), or set kubelet.failCgroupV1: false to run in "
        "cgroup v1 maintenance mode (swap is NoSwap, no per-container PSI)"
    )

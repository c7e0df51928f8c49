"""A mount namespace per node: the node's own /etc/cni/net.d, /opt/cni/bin, /run/flannel,
/var/lib/cni and /var/log/pods, as a kind node container has; and a UTS namespace whose hostname
is the node's name, as a machine's (a hostNetwork pod's `hostname` is the node's, which the e2e
specs of hostNetwork endpoints compare with the Node's name).

A CNI DaemonSet writes to fixed host paths (flannel: `/etc/cni/net.d/10-flannel.conflist`,
`/run/flannel/subnet.env`, the plugin into `/opt/cni/bin`); nodes sharing one file system would
overwrite each other's. Each node's containerd and agent run inside a mount namespace of the
node's (`nsenter --mount=... --net=...`) where those paths are bind mounts of directories under
the node's own directory; the containers containerd starts inherit it, so a hostPath volume
resolves inside the node. Everything else is the host's (propagation `slave`: host mounts show
in the node; the node's own mounts, its containers' rootfs and volumes, never leave it).

A bind mount sits on the host's directory entry: if anything on the host removed that directory
(another harness's containerd drops an empty /var/lib/cni when it stops), the kernel would
detach the node's mount and the node would write to the host's file system again. So each host
directory under a node mount holds a marker file (`MARKER`) while any node lives: it is never
empty, and `rmdir` leaves it alone.

The namespaces are kept by bind mounts of their nsfs files under `NS_DIR` (a private mount, as
`ip netns` does for /run/netns): `<netns>` the mount namespace, `<netns>.uts` the UTS one.
`remove` unmounts both: once the node's processes are gone the kernel drops the namespaces and
every mount made inside. A mount-point directory missing
on the host (`/etc/cni/net.d` on a machine without CNI) is created empty and listed in
`<node dir>/created-dirs`, and removed again by the last node out.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from pathlib import Path

NS_DIR = Path("/run/nodeagent-harness/mntns")
PRIVATE_PATHS = ("/etc/cni/net.d", "/opt/cni/bin", "/run/flannel", "/var/lib/cni", "/var/log/pods")
CREATED = "created-dirs"
MARKER = ".nodeagent-node-mounts"  # keeps a host mount-point directory non-empty


def ns_file(netns: str) -> Path:
    return NS_DIR / netns


def uts_file(netns: str) -> Path:
    return NS_DIR / f"{netns}.uts"


def private_dir(node_dir: Path, path: str) -> Path:
    """Where the node's `path` lives on the host: `<node dir>/fs/etc/cni/net.d`, ..."""
    return node_dir / "fs" / path.lstrip("/")


def _is_mountpoint(path: Path) -> bool:
    target = str(path.resolve())
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        if line.split()[4] == target:
            return True
    return False


def _ensure_ns_dir() -> None:
    NS_DIR.mkdir(parents=True, exist_ok=True)
    if not _is_mountpoint(NS_DIR):
        subprocess.run(["mount", "--bind", str(NS_DIR), str(NS_DIR)], check=True)
    subprocess.run(["mount", "--make-private", str(NS_DIR)], check=True)


def _run(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")


def create(netns: str, node_dir: Path, *, hostname: str) -> Path:
    """Make the node's mount and UTS namespaces (the latter named `hostname`); returns the
    mount namespace's nsfs file (for `nsenter --mount=`)."""
    remove(netns)
    _ensure_ns_dir()
    created: list[str] = []
    for path in PRIVATE_PATHS:
        private_dir(node_dir, path).mkdir(parents=True, exist_ok=True)
        target = Path(path)
        if not target.exists():
            missing = [p for p in (target, *target.parents) if not p.exists()]
            target.mkdir(parents=True)
            created += [str(p) for p in missing]
        (target / MARKER).write_text("bind-mounted in the nodes of a multi-node test cluster\n")
    (node_dir / CREATED).write_text(json.dumps(created) + "\n")
    handle, uts = ns_file(netns), uts_file(netns)
    handle.touch()
    uts.touch()
    binds = " && ".join(
        [f"hostname {hostname}"]
        + [f"mount --bind {private_dir(node_dir, p)} {p}" for p in PRIVATE_PATHS]
    )
    try:
        _run(["unshare", f"--mount={handle}", f"--uts={uts}", "--propagation", "slave",
              "sh", "-ec", binds])  # fmt: skip
    except BaseException:
        remove(netns)
        raise
    return handle


def remove(netns: str) -> None:
    """Release the namespaces (its mounts go once no process of the node is left)."""
    for handle in (ns_file(netns), uts_file(netns)):
        subprocess.run(["umount", str(handle)], capture_output=True, check=False)
        with contextlib.suppress(FileNotFoundError):
            handle.unlink()


def remove_created_dirs(node_dir: Path, *, others_alive: bool) -> None:
    """Remove the empty host directories `create` made, unless another node still uses them
    (an rmdir would detach its bind mounts)."""
    try:
        created = json.loads((node_dir / CREATED).read_text())
    except (FileNotFoundError, ValueError):
        return
    if others_alive:
        return
    for path in PRIVATE_PATHS:
        (Path(path) / MARKER).unlink(missing_ok=True)
    for path in sorted(created, key=lambda p: p.count("/"), reverse=True):
        with contextlib.suppress(OSError):
            os.rmdir(path)


def any_alive() -> bool:
    """Whether any node mount namespace of any cluster is still held."""
    return NS_DIR.is_dir() and any(NS_DIR.iterdir())


def enter_argv(netns: str) -> list[str]:
    """The prefix that runs a command inside the node: its network, mount and UTS
    namespaces."""
    return [
        "nsenter",
        f"--net=/run/netns/{netns}",
        f"--mount={ns_file(netns)}",
        f"--uts={uts_file(netns)}",
        "--",
    ]


def release_ns_dir() -> None:
    """Unmount and remove `NS_DIR` once no node namespace is held in it."""
    if NS_DIR.is_dir() and not any(NS_DIR.iterdir()):
        subprocess.run(["umount", str(NS_DIR)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            NS_DIR.rmdir()

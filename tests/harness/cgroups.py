"""Removing a cgroup tree a test or benchmark made (in every v1 hierarchy, or the v2 one)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def _rmdir(path: Path, attempts: int) -> bool:
    """rmdir, retrying 0.1 s apart while the last processes exit; True once it is gone."""
    for _ in range(attempts):
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            time.sleep(0.1)
    return False


def _kill_leftovers(path: Path) -> list[int]:
    """SIGKILL what is still in ``path`` (the tree is the caller's own); the pids killed."""
    try:
        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except OSError:
        return []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def remove_cgroup_tree(name: str, *, attempts: int = 50) -> list[str]:
    """rmdir ``/<name>`` and everything under it in every hierarchy, deepest first, retrying
    (0.1 s apart) while the last processes exit; returns what could not be removed.

    A process still in a cgroup after the retries is killed (and said on stderr): the tree is
    the caller's, and containerd 1.6 can leave a task behind that CRI cannot stop, e.g. when
    the agent is killed during ``StartContainer`` ("failed to get task pid: context
    canceled": the container is EXITED for CRI, its task still exists)."""
    left = []
    for top in [
        *CGROUP_FS.glob(f"*/{name}"),
        *([CGROUP_FS / name] if (CGROUP_FS / name).is_dir() else []),
    ]:
        # Bottom-up, ``top`` last. runc and containerd may remove directories of the tree
        # while it is walked: os.walk skips one that vanished (rglob raised for it).
        for path in (Path(d) for d, _, _ in os.walk(top, topdown=False)):
            if _rmdir(path, attempts):
                continue
            if killed := _kill_leftovers(path):
                print(f"remove_cgroup_tree: killed {killed} left in {path}", file=sys.stderr)
            if not _rmdir(path, attempts):
                left.append(str(path))
    return left


def kill_tree(name: str) -> list[int]:
    """SIGKILL every process in ``/<name>`` and below, in every hierarchy; the pids killed."""
    killed: list[int] = []
    for top in [*CGROUP_FS.glob(f"*/{name}"), CGROUP_FS / name]:
        if top.is_dir():
            for directory, _, _ in os.walk(top):
                killed += _kill_leftovers(Path(directory))
    return sorted(set(killed))

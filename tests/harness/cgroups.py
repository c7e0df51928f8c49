"""Removing a cgroup tree a test or benchmark made (in every v1 hierarchy, or the v2 one)."""

from __future__ import annotations

import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def remove_cgroup_tree(name: str, *, attempts: int = 50) -> list[str]:
    """rmdir ``/<name>`` and everything under it in every hierarchy, deepest first, retrying
    (0.1 s apart) while the last processes exit; returns what could not be removed."""
    left = []
    for top in [
        *CGROUP_FS.glob(f"*/{name}"),
        *([CGROUP_FS / name] if (CGROUP_FS / name).is_dir() else []),
    ]:
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            for _ in range(attempts):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)
            else:
                left.append(str(path))
    return left

"""The host facts the container manager reads: swap capacity, the swap controller, swap on.

Blocking reads of small /proc files, done once at start.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

from nodeagent.cm.policy import own_swap_max_path, swap_on_refusal

PROC_SWAPS: Final = Path("/proc/swaps")
PROC_MEMINFO: Final = Path("/proc/meminfo")
PROC_SELF_CGROUP: Final = Path("/proc/self/cgroup")


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def swap_capacity(meminfo: Path = PROC_MEMINFO) -> int:
    """``SwapTotal`` in bytes (cAdvisor's ``SwapCapacity``)."""
    for line in _read(meminfo).splitlines():
        if line.startswith("SwapTotal:"):
            parts = line.split()
            return int(parts[1]) * (1024 if parts[2:] == ["kB"] else 1)
    return 0


def swap_controller_present(self_cgroup: Path = PROC_SELF_CGROUP) -> bool:
    path = own_swap_max_path(_read(self_cgroup))
    return path is not None and os.path.exists(path)


def fail_swap_on_refusal(fail_swap_on: bool, proc_swaps: Path = PROC_SWAPS) -> str | None:
    """The kubelet's start-up error when swap is on and ``failSwapOn`` is true."""
    if not fail_swap_on:
        return None
    return swap_on_refusal(_read(proc_swaps))

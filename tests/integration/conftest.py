"""Integration-tier fixtures shared by every test file."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.containerd import mounts_under


@pytest.fixture(autouse=True)
def _no_mounts_left_below_tmp_path(tmp_path: Path) -> Iterator[None]:
    """A test whose agent dies or fails mid-pod leaves its volumes (a projected token's tmpfs,
    an emptyDir with ``medium: Memory``) mounted below its ``tmp_path``; that broke pytest's own
    clean-up of the shared basetemp for the next session. Unmount whatever is left, deepest
    first, even when the test failed."""
    yield
    for point in mounts_under(tmp_path):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)

"""Integration-tier fixtures shared by every test file."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.containerd import mounts_under
from harness.fixtures_runtime import RuntimeEnv


@pytest.fixture(autouse=True)
def _no_mounts_left_below_tmp_path(tmp_path: Path) -> Iterator[None]:
    """A test whose agent dies or fails mid-pod leaves its volumes (a projected token's tmpfs,
    an emptyDir with ``medium: Memory``) mounted below its ``tmp_path``; that broke pytest's own
    clean-up of the shared basetemp for the next session. Unmount whatever is left, deepest
    first, even when the test failed."""
    yield
    for point in mounts_under(tmp_path):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)


@pytest.fixture
def removes_pulled_images(containerd: RuntimeEnv) -> Iterator[None]:
    """The image names a test pulls into the session's containerd (a deployed driver's images,
    a StatefulSet's busybox) are removed at its end, even when it failed: the image GC and
    node-status tests count what is unused in that containerd."""
    before = _image_names(containerd)
    yield
    pulled = sorted(_image_names(containerd) - before)
    if pulled:
        containerd.ctr("images", "remove", *pulled)


def _image_names(containerd: RuntimeEnv) -> set[str]:
    return set(containerd.ctr("images", "list", "--quiet").stdout.split())

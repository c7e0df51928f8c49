"""The workload's `unready` exec, run by the busybox the pods' image is made from, with only
that image's applets on PATH: the ready file goes at once and comes back after the exec's shell
has exited (as `kubectl exec` ends it)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from harness.images.recipes import BUSYBOX, busybox_applets
from soak.workload import unready_command

pytestmark = pytest.mark.skipif(
    not BUSYBOX.exists(), reason="needs Debian's busybox-static (make host-deps installs it)"
)


def test_the_ready_file_comes_back_after_the_exec_ended(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for applet in busybox_applets():  # the image's PATH, flattened: bin/sh, usr/bin/sleep, ...
        link = bin_dir / Path(applet).name
        if not link.exists():
            link.symlink_to(BUSYBOX)
    ready = tmp_path / "ready"
    ready.touch()
    done = subprocess.run(
        [str(bin_dir / "sh"), "-c", unready_command(1, ready=str(ready))],
        env={"PATH": str(bin_dir)},
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert not ready.exists()  # unready as soon as the exec returned
    deadline = time.monotonic() + 10
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready.exists(), "the process left behind did not put the ready file back"

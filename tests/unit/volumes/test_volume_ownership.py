"""fsGroup ownership as the kubelet's SetVolumeOwnership (the tests run as root)."""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

import pytest
from racing import exchanging

from nodeagent.log import get_logger
from nodeagent.volumemanager.ownership import root_matches, set_volume_ownership

GROUP = 2345

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="changing a group needs root")


def tree(tmp_path: Path) -> Path:
    root = tmp_path / "vol"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "file").write_text("x")
    os.chmod(root / "sub" / "file", 0o600)
    os.chmod(root, 0o755)
    os.chmod(root / "sub", 0o700)
    outside = tmp_path / "outside"
    outside.write_text("host")
    os.chmod(outside, 0o600)
    (root / "link").symlink_to(outside)
    return root


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_read_write_volume_gets_the_group_setgid_and_group_rw(tmp_path: Path) -> None:
    root = tree(tmp_path)
    assert set_volume_ownership(str(root), GROUP, read_only=False, policy=None, log=get_logger("t"))
    for path in (root, root / "sub", root / "sub" / "file"):
        assert path.stat().st_gid == GROUP
    assert mode(root) == 0o2775
    assert mode(root / "sub") == 0o2770
    assert mode(root / "sub" / "file") == 0o660
    assert (root / "link").lstat().st_gid == GROUP  # the link itself, never its target
    assert (tmp_path / "outside").stat().st_gid != GROUP
    assert mode(tmp_path / "outside") == 0o600


def test_read_only_volume_gets_group_read_only(tmp_path: Path) -> None:
    root = tree(tmp_path)
    set_volume_ownership(str(root), GROUP, read_only=True, policy=None, log=get_logger("t"))
    assert mode(root / "sub" / "file") == 0o640
    assert mode(root / "sub") == 0o2750


def test_on_root_mismatch_skips_the_walk_when_the_root_matches(tmp_path: Path) -> None:
    root = tree(tmp_path)
    os.chown(root, -1, GROUP)
    os.chmod(root, 0o2770)
    assert root_matches(str(root), GROUP, read_only=False)
    changed = set_volume_ownership(
        str(root), GROUP, read_only=False, policy="OnRootMismatch", log=get_logger("t")
    )
    assert not changed
    assert (root / "sub" / "file").stat().st_gid != GROUP  # not walked


def test_on_root_mismatch_walks_when_the_root_differs(tmp_path: Path) -> None:
    root = tree(tmp_path)
    changed = set_volume_ownership(
        str(root), GROUP, read_only=False, policy="OnRootMismatch", log=get_logger("t")
    )
    assert changed
    assert (root / "sub" / "file").stat().st_gid == GROUP


SWAPPED = 8


def test_a_directory_swapped_for_a_symlink_changes_nothing_outside(tmp_path: Path) -> None:
    """A container (here another process) exchanges directories of its volume with symlinks to
    a host directory in a loop while the walk runs again and again (at least 300 walks and
    2000 rounds of exchanges): the host directory and its root-owned 0600 files keep their
    group and mode. (The path-based walk this replaced changed them within 7 to 107 walks.)"""
    volume = tmp_path / "vol"
    outside = tmp_path / "host"
    outside.mkdir(mode=0o700)
    os.chmod(outside, 0o700)
    for i in range(3):
        (outside / f"secret{i}").write_text("host")
        os.chmod(outside / f"secret{i}", 0o600)
    for i in range(SWAPPED):
        (volume / f"d{i}").mkdir(parents=True)
        (volume / f"d{i}" / "f").write_text("x")
        (volume / f"l{i}").symlink_to(outside)

    def host() -> dict[str, tuple[int, int]]:
        return {p.name: (p.stat().st_gid, mode(p)) for p in [outside, *outside.iterdir()]}

    before = host()
    walks = 0
    deadline = time.monotonic() + 120  # a watchdog against a hang, not a measurement
    pairs = [(volume / f"d{i}", volume / f"l{i}") for i in range(SWAPPED)]
    with exchanging(pairs) as rounds:
        while (rounds() < 2000 or walks < 300) and time.monotonic() < deadline:
            set_volume_ownership(str(volume), GROUP, read_only=False, policy=None,
                                 log=get_logger("t"))  # fmt: skip
            walks += 1
            if host() != before:
                break
        done = rounds()
    assert host() == before, (walks, done)
    assert (walks, done) >= (300, 2000), (walks, done)  # the race went on
    walked = next(volume / n for n in ("d0", "l0") if not (volume / n).is_symlink())
    assert (walked / "f").stat().st_gid == GROUP  # the volume itself was walked

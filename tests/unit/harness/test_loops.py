"""Which loop devices `make down` and the CSI fixture detach: those whose backing file (by
device and inode, as losetup reports them) lies in the directory removed."""

from __future__ import annotations

import os
from pathlib import Path

from harness import loops


def test_losetup_lines_are_read_and_lines_without_a_backing_file_left_out() -> None:
    text = "/dev/loop0 1234 253:1\n/dev/loop1  \n/dev/loop7 99 8:3\n"
    assert loops.parse_list(text) == [("/dev/loop0", 1234, 253, 1), ("/dev/loop7", 99, 8, 3)]


def test_files_below_are_named_by_inode_and_device_without_following_links(
    tmp_path: Path,
) -> None:
    (tmp_path / "volumes").mkdir()
    image = tmp_path / "volumes" / "vol-1"
    image.write_bytes(b"x")
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.write_bytes(b"y")
    try:
        (tmp_path / "volumes" / "link").symlink_to(outside)
        st = os.stat(image)
        assert loops.files_below(tmp_path) == {
            (st.st_ino, os.major(st.st_dev), os.minor(st.st_dev))
        }
    finally:
        outside.unlink()


def test_nothing_is_detached_below_a_directory_that_is_not_there(tmp_path: Path) -> None:
    assert loops.detach_below(tmp_path / "gone") == []

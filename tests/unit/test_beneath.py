"""Opening beneath a directory: the kernel's ``openat2`` and the descriptor walk used where it
is missing refuse the same paths."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.beneath import NotBeneath, has_openat2, open_beneath

WAYS = [pytest.param(True, id="openat2"), pytest.param(False, id="dir-fd walk")]


@pytest.fixture
def root(tmp_path: Path) -> Iterator[int]:
    d = tmp_path / "root"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "file").write_text("inside\n")
    (tmp_path / "outside").write_text("outside\n")
    (d / "abs").symlink_to(tmp_path / "outside")
    (d / "rel").symlink_to("sub")
    (d / "sub" / "up").symlink_to("..")
    fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    yield fd
    os.close(fd)


def read(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


@pytest.mark.parametrize("openat2", WAYS)
def test_plain_paths_open(root: int, openat2: bool) -> None:
    if openat2 and not has_openat2():
        pytest.skip("this kernel has no openat2")
    assert read(open_beneath(root, "sub/file", os.O_RDONLY, use_openat2=openat2)) == b"inside\n"
    assert read(open_beneath(root, "./sub//file", os.O_RDONLY, use_openat2=openat2)) == b"inside\n"
    fd = open_beneath(root, "", os.O_RDONLY | os.O_DIRECTORY, use_openat2=openat2)
    assert sorted(os.listdir(fd)) == ["abs", "rel", "sub"]
    os.close(fd)


@pytest.mark.parametrize("openat2", WAYS)
@pytest.mark.parametrize(
    "path", ["abs", "rel/file", "rel", "sub/up/sub/file", "../outside", "sub/../sub/file"]
)
def test_symlinks_and_dot_dot_are_refused(root: int, openat2: bool, path: str) -> None:
    if openat2 and not has_openat2():
        pytest.skip("this kernel has no openat2")
    with pytest.raises(NotBeneath):
        open_beneath(root, path, os.O_RDONLY, use_openat2=openat2)


@pytest.mark.parametrize("openat2", WAYS)
def test_missing_is_the_open_error(root: int, openat2: bool) -> None:
    with pytest.raises(FileNotFoundError):
        open_beneath(root, "sub/nope", os.O_RDONLY, use_openat2=openat2)
    with pytest.raises(NotADirectoryError):
        open_beneath(root, "sub/file/x", os.O_RDONLY, use_openat2=openat2)

"""hostPath type checks with the kubelet's messages, on a real filesystem in tmp_path."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from nodeagent.volumemanager.hostpath import check_host_path
from nodeagent.volumemanager.source import VolumeSetupError


def refused(path: Path, kind: str) -> str:
    with pytest.raises(VolumeSetupError) as e:
        check_host_path(str(path), kind)
    return e.value.message


def test_directory_or_create_creates_it_0755(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b"
    old = os.umask(0)
    try:
        check_host_path(str(target), "DirectoryOrCreate")
    finally:
        os.umask(old)
    assert target.is_dir()
    assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_file_or_create_creates_an_empty_file(tmp_path: Path) -> None:
    target = tmp_path / "f"
    check_host_path(str(target), "FileOrCreate")
    assert target.is_file()
    assert target.read_text() == ""


def test_no_type_checks_nothing(tmp_path: Path) -> None:
    check_host_path(str(tmp_path / "missing"), None)
    check_host_path(str(tmp_path / "missing"), "")
    assert not (tmp_path / "missing").exists()


def test_each_type_refuses_the_wrong_kind_with_the_kubelet_message(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    a_dir = tmp_path / "dir"
    a_dir.mkdir()
    assert (
        refused(a_file, "Directory") == f"hostPath type check failed: {a_file} is not a directory"
    )
    assert refused(a_file, "DirectoryOrCreate") == (
        f"hostPath type check failed: {a_file} is not a directory"
    )
    assert refused(a_dir, "File") == f"hostPath type check failed: {a_dir} is not a file"
    assert refused(a_dir, "FileOrCreate") == f"hostPath type check failed: {a_dir} is not a file"
    assert refused(a_file, "Socket") == f"hostPath type check failed: {a_file} is not a socket file"
    assert refused(a_file, "CharDevice") == (
        f"hostPath type check failed: {a_file} is not a character device"
    )
    assert refused(a_file, "BlockDevice") == (
        f"hostPath type check failed: {a_file} is not a block device"
    )
    missing = tmp_path / "missing"
    assert refused(missing, "Directory") == (
        f"hostPath type check failed: {missing} is not a directory"
    )
    assert refused(a_file, "Sideways") == "Sideways is an invalid volume type"


def test_the_right_kind_passes(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("x")
    check_host_path(str(a_file), "File")
    check_host_path(str(tmp_path), "Directory")
    check_host_path("/dev/null", "CharDevice")
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        check_host_path(str(sock_path), "Socket")
    link = tmp_path / "link"
    link.symlink_to(a_file)
    check_host_path(str(link), "File")  # followed, as the kubelet's stat

"""The one atomic write every checkpoint, credential and record goes through."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodeagent.atomicfile import temporary_path, write_atomic


def test_the_file_has_its_mode_whatever_the_umask_and_parents_theirs(tmp_path: Path) -> None:
    path = tmp_path / "pki" / "key.pem"
    old = os.umask(0o077)
    try:
        write_atomic(path, b"KEY", mode=0o644, dir_mode=0o700)
    finally:
        os.umask(old)
    assert path.read_bytes() == b"KEY"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_second_write_replaces_the_whole_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "state"
    write_atomic(path, b"a long first content", mode=0o600)
    write_atomic(path, b"short", mode=0o600)
    assert path.read_bytes() == b"short"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]


def test_a_link_planted_at_the_temporary_name_is_removed_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "record"
    target = tmp_path / "elsewhere"
    target.write_bytes(b"theirs")
    temporary_path(path).symlink_to(target)
    write_atomic(path, b"ours", mode=0o600)
    assert path.read_bytes() == b"ours"
    assert target.read_bytes() == b"theirs"
    assert not temporary_path(path).exists()


def test_a_failed_write_keeps_the_old_contents_and_removes_the_temporary(tmp_path: Path) -> None:
    path = tmp_path / "record"
    write_atomic(path, b"old", mode=0o600)
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes", mode=0o600)  # type: ignore[arg-type]
    assert path.read_bytes() == b"old"
    assert not temporary_path(path).exists()

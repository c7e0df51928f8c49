"""The atomic writer: the kubelet's layout, one rename per update, no write when unchanged,
stale paths removed, bad paths refused with the kubelet's messages."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest

from nodeagent.volumemanager.content.writer import (
    DATA_DIR,
    FileProjection,
    InvalidPath,
    write_payload,
)

NOW = dt.datetime(2026, 3, 4, 5, 6, 7, tzinfo=dt.UTC)


def entries(target: Path) -> set[str]:
    return set(os.listdir(target))


def ts_dirs(target: Path) -> list[str]:
    return sorted(n for n in os.listdir(target) if n.startswith("..") and n != DATA_DIR)


def write(target: Path, payload: dict[str, tuple[bytes, int]]) -> bool:
    files = {k: FileProjection(data, mode) for k, (data, mode) in payload.items()}
    return write_payload(target, files, now=NOW)


def test_first_write_makes_the_kubelet_layout(tmp_path: Path) -> None:
    old_umask = os.umask(0o077)
    try:
        assert write(tmp_path, {"a": (b"1", 0o644), "d/e/f": (b"2", 0o400)})
    finally:
        os.umask(old_umask)
    (ts,) = ts_dirs(tmp_path)
    assert ts.startswith("..2026_03_04_05_06_07.")
    assert os.readlink(tmp_path / DATA_DIR) == ts
    assert entries(tmp_path) == {DATA_DIR, ts, "a", "d"}
    assert os.readlink(tmp_path / "a") == "..data/a"
    assert os.readlink(tmp_path / "d") == "..data/d"
    assert (tmp_path / "a").read_bytes() == b"1"
    assert (tmp_path / "d/e/f").read_bytes() == b"2"
    # the modes asked for, whatever the umask; the timestamped directory traversable
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "d/e/f").stat().st_mode) == 0o400
    assert stat.S_IMODE((tmp_path / ts).stat().st_mode) == 0o755


def test_unchanged_payload_writes_nothing(tmp_path: Path) -> None:
    payload = {"a": (b"1", 0o644), "b/c": (b"2", 0o644)}
    assert write(tmp_path, payload)
    before = ts_dirs(tmp_path)
    inode = (tmp_path / "a").stat().st_ino
    assert not write(tmp_path, payload)
    assert ts_dirs(tmp_path) == before
    assert (tmp_path / "a").stat().st_ino == inode


def test_update_swaps_data_and_removes_the_old_directory(tmp_path: Path) -> None:
    write(tmp_path, {"a": (b"old", 0o644)})
    (old,) = ts_dirs(tmp_path)
    with open(tmp_path / "a", "rb") as held:  # a reader holding the old file keeps it
        assert write(tmp_path, {"a": (b"new", 0o644)})
        (new,) = ts_dirs(tmp_path)
        assert new != old
        assert os.readlink(tmp_path / DATA_DIR) == new
        assert (tmp_path / "a").read_bytes() == b"new"
        assert held.read() == b"old"
    assert not (tmp_path / old).exists()
    assert not (tmp_path / "..data_tmp").exists()


def test_a_mode_change_alone_is_written(tmp_path: Path) -> None:
    write(tmp_path, {"a": (b"1", 0o644)})
    assert write(tmp_path, {"a": (b"1", 0o600)})
    assert stat.S_IMODE((tmp_path / "a").stat().st_mode) == 0o600


def test_stale_user_paths_are_removed(tmp_path: Path) -> None:
    write(tmp_path, {"a": (b"1", 0o644), "b": (b"2", 0o644), "d/x": (b"3", 0o644)})
    assert write(tmp_path, {"a": (b"1", 0o644), "d/y": (b"4", 0o644)})
    (ts,) = ts_dirs(tmp_path)
    assert entries(tmp_path) == {DATA_DIR, ts, "a", "d"}
    assert os.listdir(tmp_path / "d") == ["y"]
    # removing a key alone (content of the rest unchanged) is a write too
    assert write(tmp_path, {"a": (b"1", 0o644)})
    (ts,) = ts_dirs(tmp_path)
    assert entries(tmp_path) == {DATA_DIR, ts, "a"}


def test_empty_payload_makes_an_empty_data_dir(tmp_path: Path) -> None:
    assert write(tmp_path, {})
    (ts,) = ts_dirs(tmp_path)
    assert entries(tmp_path) == {DATA_DIR, ts}
    assert not write(tmp_path, {})


def test_a_missing_user_link_is_recreated(tmp_path: Path) -> None:
    write(tmp_path, {"a": (b"1", 0o644)})
    (tmp_path / "a").unlink()
    assert write(tmp_path, {"a": (b"1", 0o644)})
    assert (tmp_path / "a").read_bytes() == b"1"


def test_paths_are_cleaned(tmp_path: Path) -> None:
    write(tmp_path, {"d//e/./f": (b"1", 0o644)})
    assert (tmp_path / "d/e/f").read_bytes() == b"1"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("", 'invalid path: must not be empty: ""'),
        ("/etc/passwd", "invalid path: must be relative path: /etc/passwd"),
        ("..", "invalid path: must not contain '..': .."),
        ("a/../../b", "invalid path: must not contain '..': a/../../b"),
        ("..data", "invalid path: must not start with '..': ..data"),
        ("..foo/bar", "invalid path: must not start with '..': ..foo/bar"),
        ("a" * 256, "invalid path: filenames must be less than or equal to 255 characters"),
        ("a/" * 2049, "invalid path: must be less than or equal to 4096 characters"),
    ],
)
def test_bad_paths_are_refused_before_anything_is_written(
    tmp_path: Path, path: str, message: str
) -> None:
    with pytest.raises(InvalidPath) as raised:
        write(tmp_path, {"good": (b"1", 0o644), path: (b"x", 0o644)})
    assert str(raised.value) == message
    assert entries(tmp_path) == set()


def test_names_that_merely_contain_dots_are_fine(tmp_path: Path) -> None:
    write(tmp_path, {".hidden": (b"1", 0o644), "a..b": (b"2", 0o644)})
    assert (tmp_path / ".hidden").read_bytes() == b"1"
    assert (tmp_path / "a..b").read_bytes() == b"2"


root_only = pytest.mark.skipif(os.geteuid() != 0, reason="chown to another group needs root")


@root_only
def test_fs_group_owns_everything_and_makes_files_group_readable(tmp_path: Path) -> None:
    files = {"token": FileProjection(b"t", 0o600), "d/x": FileProjection(b"x", 0o400)}
    assert write_payload(tmp_path, files, now=NOW, fs_group=4321)
    (ts,) = ts_dirs(tmp_path)
    for rel, mode in (("token", 0o640), ("d/x", 0o440)):
        st = (tmp_path / rel).stat()
        assert (st.st_gid, oct(stat.S_IMODE(st.st_mode))) == (4321, oct(mode))
    for rel in (ts, f"{ts}/d", "."):
        st = (tmp_path / rel).stat()
        assert st.st_gid == 4321
        assert st.st_mode & stat.S_ISGID
        assert stat.S_IMODE(st.st_mode) & 0o550 == 0o550
    assert os.lstat(tmp_path / "token").st_gid == 4321
    # unchanged with the same group: nothing written; another group: rewritten
    assert not write_payload(tmp_path, files, now=NOW, fs_group=4321)
    assert write_payload(tmp_path, files, now=NOW, fs_group=4322)
    assert (tmp_path / "token").stat().st_gid == 4322


def test_directories_left_by_a_killed_writer_are_removed(tmp_path: Path) -> None:
    write(tmp_path, {"a": (b"1", 0o644)})
    stray = tmp_path / "..2026_03_04_05_06_00.abcdef"
    stray.mkdir()
    (stray / "a").write_bytes(b"half")
    (tmp_path / "..keep").mkdir()  # not a timestamped directory: not ours to remove
    write(tmp_path, {"a": (b"2", 0o644)})
    (ts,) = (n for n in ts_dirs(tmp_path) if n != "..keep")
    assert entries(tmp_path) == {DATA_DIR, ts, "a", "..keep"}


def test_a_data_link_pointing_elsewhere_is_replaced_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "vol"
    target.mkdir()
    outside = tmp_path / "precious"
    outside.mkdir()
    (outside / "keep").write_bytes(b"keep")
    os.symlink(str(outside), target / DATA_DIR)
    os.symlink(f"{DATA_DIR}/keep", target / "keep")
    assert write(target, {"a": (b"1", 0o644)})
    assert (outside / "keep").read_bytes() == b"keep"
    (ts,) = ts_dirs(target)
    assert os.readlink(target / DATA_DIR) == ts
    assert (target / "a").read_bytes() == b"1"

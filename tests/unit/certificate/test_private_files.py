"""Private files are created fresh 0600, never through a symlink; pki/ is 0700."""

from __future__ import annotations

import datetime as dt
import os
import stat
from pathlib import Path

import pytest

from nodeagent.certificate.store import CertStore, write_private


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_leftover_temp_file_mode_is_not_kept(tmp_path: Path) -> None:
    key = tmp_path / "kubelet-client.key.tmp"
    leftover = tmp_path / ".kubelet-client.key.tmp.tmp"
    leftover.write_bytes(b"old")
    leftover.chmod(0o644)
    write_private(key, b"KEY")
    assert key.read_bytes() == b"KEY"
    assert mode(key) == 0o600
    assert not leftover.exists()


def test_symlink_at_the_temp_path_is_not_followed(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"untouched")
    victim.chmod(0o644)
    (tmp_path / ".key.pem.tmp").symlink_to(victim)
    write_private(tmp_path / "key.pem", b"KEY")
    assert victim.read_bytes() == b"untouched"
    assert mode(victim) == 0o644
    assert (tmp_path / "key.pem").read_bytes() == b"KEY"
    assert not (tmp_path / "key.pem").is_symlink()
    assert mode(tmp_path / "key.pem") == 0o600


def test_file_is_0600_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o277)
    try:
        write_private(tmp_path / "key.pem", b"KEY")
    finally:
        os.umask(old)
    assert mode(tmp_path / "key.pem") == 0o600


def test_missing_parent_is_created_private(tmp_path: Path) -> None:
    write_private(tmp_path / "new" / "key.pem", b"KEY")
    assert mode(tmp_path / "new") == 0o700


def test_pki_dir_is_created_0700(tmp_path: Path) -> None:
    store = CertStore(pki_dir=tmp_path / "root" / "pki")
    store.save_pending_key(b"KEY")
    assert mode(tmp_path / "root" / "pki") == 0o700
    assert mode(tmp_path / "root" / "pki" / "kubelet-client.key.tmp") == 0o600


def test_existing_pki_dir_is_tightened(tmp_path: Path) -> None:
    pki = tmp_path / "pki"
    pki.mkdir(mode=0o755)
    pki.chmod(0o755)
    store = CertStore(pki_dir=pki)
    target = store.install(b"CERT\n", b"KEY\n", dt.datetime(2026, 1, 2, tzinfo=dt.UTC))
    assert mode(pki) == 0o700
    assert target.name == "kubelet-client-2026-01-02-00-00-00.pem"
    assert mode(target) == 0o600
    assert store.current_path.read_bytes() == b"CERT\nKEY\n"


def test_failed_write_leaves_no_temp_file(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        # the wrong type on purpose: a failed write must not leave a temp file behind
        write_private(tmp_path / "key.pem", "not bytes")  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []

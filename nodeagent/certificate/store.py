"""Where the node's client credentials live, written as the kubelet writes them.

``<rootDir>/pki/`` (0700) holds ``kubelet-client-<timestamp>.pem``, certificate and key (0600);
``kubelet-client-current.pem`` is a symlink to the newest, swapped atomically (rename), and the
node kubeconfig points both ``client-certificate`` and ``client-key`` at that link, so a
rotation never leaves a half-written identity. A key waiting for its certificate is kept in
``kubelet-client.key.tmp`` so a restart reuses it (and finds its CSR again).
"""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path
from typing import Final

from nodeagent.apiserver import render_kubeconfig
from nodeagent.apiserver.kubeconfig import KEY_BLOCKS, pem_blocks
from nodeagent.atomicfile import write_atomic

CURRENT: Final = "kubelet-client-current.pem"
PENDING_KEY: Final = "kubelet-client.key.tmp"


def write_private(path: Path, data: bytes) -> None:
    """Write atomically; the file is 0600 from the moment it exists, missing parents 0700."""
    write_atomic(path, data, mode=0o600, dir_mode=0o700)


def ensure_private_dir(path: Path) -> None:
    """Create ``path`` 0700, or tighten it to 0700 when it exists readable by others."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if path.stat().st_mode & 0o077:
        path.chmod(0o700)


class CertStore:
    def __init__(self, *, pki_dir: Path) -> None:
        self.pki_dir = pki_dir

    @property
    def current_path(self) -> Path:
        return self.pki_dir / CURRENT

    def current(self) -> tuple[bytes, bytes] | None:
        """(certificate PEM, key PEM) of the current identity, or None."""
        try:
            data = self.current_path.read_bytes()
        except OSError:
            return None
        cert = pem_blocks(data, "CERTIFICATE")
        key = pem_blocks(data, *KEY_BLOCKS)
        return (cert, key) if cert and key else None

    def pending_key(self) -> bytes | None:
        try:
            return (self.pki_dir / PENDING_KEY).read_bytes()
        except OSError:
            return None

    def save_pending_key(self, key_pem: bytes) -> None:
        ensure_private_dir(self.pki_dir)
        write_private(self.pki_dir / PENDING_KEY, key_pem)

    def discard_pending_key(self) -> None:
        (self.pki_dir / PENDING_KEY).unlink(missing_ok=True)

    def install(self, cert_pem: bytes, key_pem: bytes, now: dt.datetime) -> Path:
        """Write cert+key to a new timestamped file and point the current link at it."""
        stamp = now.astimezone(dt.UTC).strftime("%Y-%m-%d-%H-%M-%S")
        target = self.pki_dir / f"kubelet-client-{stamp}.pem"
        ensure_private_dir(self.pki_dir)
        write_private(target, cert_pem.rstrip(b"\n") + b"\n" + key_pem)
        link_tmp = self.pki_dir / f".{CURRENT}.tmp"
        link_tmp.unlink(missing_ok=True)
        link_tmp.symlink_to(target.name)
        os.replace(link_tmp, self.current_path)
        (self.pki_dir / PENDING_KEY).unlink(missing_ok=True)
        return target

    def write_kubeconfig(self, path: Path, *, server: str, ca_pem: bytes | None) -> None:
        text = render_kubeconfig(
            server=server, ca_pem=ca_pem, cert_file=self.current_path, key_file=self.current_path
        )
        write_private(path, text.encode())

"""Configure a debootstrapped Debian root so it boots as the test VM (file writes and symlinks).

Everything here edits files under ``root`` from the host; the only programs run inside it (by
``chroot``) are ``systemctl`` enable/mask, which work offline, and ``update-initramfs``.
The guest gets:

- ``/dev/vda`` as ``/`` (ext4), hostname ``nodeagent-vm``, a static ``eth0`` at
  :data:`GUEST_IP` on qemu's user network (systemd-networkd, no DNS: nothing is reachable),
  and ``kubernetes`` in ``/etc/hosts`` for the forwarded apiserver;
- the control agent (:mod:`harness.vm.guest_agent`) as ``nodeagent-vm-agent.service``;
- no periodic jobs (apt-daily, fstrim, e2scrub...) that could change state mid-test;
- a small initramfs (virtio + ext4 modules only), which boots much faster under TCG.

The swap file is made by ``provision.sh`` inside the guest, not here: ``mkfs.ext4 -d`` stores
all-zero blocks as holes and the kernel refuses a swap file with holes.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

HOSTNAME = "nodeagent-vm"
GUEST_IP = "10.0.2.15"
GATEWAY_IP = "10.0.2.2"
# qemu's guestfwd address for the host's kube-apiserver (harness.vm.machine), under a name the
# test PKI's apiserver certificate carries as a DNS SAN: https://kubernetes:6443 verifies.
APISERVER_IP = "10.0.2.100"
APISERVER_NAME = "kubernetes"
AGENT_DIR = "/usr/local/lib/nodeagent-vm"
AGENT_UNIT = "nodeagent-vm-agent.service"

AGENT_UNIT_TEXT = f"""\
[Unit]
Description=nodeagent test harness: guest control agent on virtio-serial
DefaultDependencies=no
After=systemd-udevd.service local-fs.target
Conflicts=shutdown.target
Before=shutdown.target

[Service]
ExecStart=/usr/bin/python3 {AGENT_DIR}/guest_agent.py
Restart=always
RestartSec=1

[Install]
WantedBy=multi-user.target
"""

NETWORK_TEXT = f"""\
[Match]
Name=eth0

[Network]
Address={GUEST_IP}/24
Gateway={GATEWAY_IP}
LinkLocalAddressing=no
IPv6AcceptRA=no
"""

FSTAB_TEXT = "/dev/vda / ext4 rw,errors=remount-ro 0 1\n"

# Units that would start work on their own during a test run (timers) or are useless in the VM.
MASKED_UNITS = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "apt-daily.service",
    "apt-daily-upgrade.service",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
    "getty@tty1.service",
)
ENABLED_UNITS = ("systemd-networkd.service", AGENT_UNIT)
INITRAMFS_MODULES = ("virtio_pci", "virtio_blk", "ext4")


def _write(root: Path, path: str, text: str, mode: int = 0o644) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    target.chmod(mode)


def _chroot(root: Path, *argv: str) -> None:
    subprocess.run(
        ["chroot", str(root), *argv],
        check=True,
        capture_output=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
    )


def configure(root: Path, *, agent_source: Path) -> None:
    """Turn the debootstrapped tree at ``root`` into the bootable test guest."""
    _write(root, "/etc/hostname", f"{HOSTNAME}\n")
    _write(
        root,
        "/etc/hosts",
        f"127.0.0.1 localhost\n127.0.1.1 {HOSTNAME}\n{APISERVER_IP} {APISERVER_NAME}\n",
    )
    _write(root, "/etc/fstab", FSTAB_TEXT)
    _write(root, "/etc/systemd/network/10-eth0.network", NETWORK_TEXT)
    _write(root, f"{AGENT_DIR}/guest_agent.py", agent_source.read_text())
    _write(root, f"/etc/systemd/system/{AGENT_UNIT}", AGENT_UNIT_TEXT)
    # systemctl works offline in a chroot for enable/disable/mask (it only edits symlinks).
    _chroot(root, "systemctl", "enable", "--quiet", *ENABLED_UNITS)
    _chroot(root, "systemctl", "disable", "--quiet", *MASKED_UNITS)
    _chroot(root, "systemctl", "mask", "--quiet", *MASKED_UNITS)
    # No root password and no login prompt are needed: tests go through the agent.
    _write(root, "/etc/initramfs-tools/conf.d/nodeagent-vm.conf", "MODULES=list\n")
    _write(root, "/etc/initramfs-tools/modules", "\n".join(INITRAMFS_MODULES) + "\n")


def shrink_initramfs(root: Path) -> None:
    """Rebuild the initramfs with only the modules the VM boots from (36 MB -> ~6 MB)."""
    _chroot(root, "update-initramfs", "-u", "-k", "all")


def kernel_and_initrd(root: Path) -> tuple[Path, Path]:
    """The newest installed kernel and its initramfs."""
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if not kernels:
        raise FileNotFoundError(f"no kernel under {root}/boot")
    kernel = kernels[-1]
    initrd = root / "boot" / kernel.name.replace("vmlinuz-", "initrd.img-", 1)
    if not initrd.exists():
        raise FileNotFoundError(f"no initramfs {initrd} for {kernel}")
    return kernel, initrd

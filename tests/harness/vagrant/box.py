"""A local vagrant-libvirt box made from the VM tier's cached base image (no box is downloaded).

The VM tier's image is a bare ext4 filesystem booted with ``-kernel``, driven over virtio-serial,
with a static address on qemu's user network. Vagrant needs a disk that boots on its own, ssh
with the ``vagrant`` user, and DHCP on the management network. :func:`ensure_box`:

1. copies the base image's filesystem into partition 1 of a new raw disk (host side: a DOS
   partition table written here, ``dd``; no loop device, no mount, no partitioning tool);
2. boots the VM tier's :class:`~harness.vm.Machine` on its usual overlay, with that disk as
   ``/dev/vdb``, and in a chroot on ``/dev/vdb1`` installs openssh-server, sudo and GRUB from
   ``.deb`` files downloaded on the host (``apt-get download``, resolved against the guest's own
   dpkg status so only what is missing comes) and put through the control channel; creates the
   ``vagrant`` user with Vagrant's published insecure public key (vagrant replaces it on the
   first ``up``) and passwordless sudo; switches ``eth0`` to DHCP; disables the control agent;
   deletes the ssh host keys (each VM makes its own at first boot); installs GRUB on the disk;
3. converts the disk to qcow2 and packs ``metadata.json``, ``Vagrantfile`` and ``box.img``.

The box is cached as ``~/.cache/nodeagent/vagrant/<base image hash>-<this recipe's hash>/``
``nodeagent-bookworm.box``; the base image is never modified.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import shutil
import struct
import subprocess
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import unquote

from harness.vm import Image, Machine

Progress = Callable[[str], None]

BOX_NAME = "nodeagent/bookworm"
BOX_FILE = "nodeagent-bookworm.box"
KEEP_BOXES = 2
GUEST_PACKAGES = ("openssh-server", "sudo", "grub-pc-bin", "grub2-common")
GUEST_DEB_DIR = "/mnt/box/var/cache/nodeagent-box"
PARTITION_START = 1 << 20  # 1 MiB: room for GRUB's core image before partition 1
# Vagrant ships the public half of its well-known insecure key pair; the box trusts it until the
# first `vagrant up` replaces it with a key generated for that machine.
INSECURE_KEY_GLOB = "/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub"
KERNEL_CMDLINE = "console=ttyS0 net.ifnames=0 systemd.unified_cgroup_hierarchy=1"

BOX_VAGRANTFILE = """\
# The box's defaults (the project's Vagrantfile overrides them).
Vagrant.configure("2") do |config|
  config.vm.provider :libvirt do |lv|
    lv.disk_bus = "virtio"
  end
end
"""

# Runs as root in the booted VM; /dev/vdb1 holds a copy of the base image's filesystem.
GUEST_SCRIPT = r"""#!/bin/bash
set -euo pipefail
mnt=/mnt/box
debs=/var/cache/nodeagent-box
in_root() { chroot "$mnt" env DEBIAN_FRONTEND=noninteractive LC_ALL=C "$@"; }
cleanup() {
    rm -f "$mnt/usr/sbin/policy-rc.d"
    for d in sys proc dev/pts dev; do umount "$mnt/$d" 2>/dev/null || true; done
    umount "$mnt" 2>/dev/null || true
    sync
}
trap cleanup EXIT
for d in dev dev/pts proc sys; do mount --bind "/$d" "$mnt/$d"; done
# Package scripts must not start daemons in the chroot.
printf '#!/bin/sh\nexit 101\n' >"$mnt/usr/sbin/policy-rc.d"
chmod 0755 "$mnt/usr/sbin/policy-rc.d"
in_root sh -c "dpkg -i $debs/*.deb"
rm -rf "${mnt:?}$debs"

# ssh: no host keys in the box; each VM makes its own before sshd's config test.
rm -f "$mnt"/etc/ssh/ssh_host_*
install -d "$mnt/etc/systemd/system/ssh.service.d"
cat >"$mnt/etc/systemd/system/ssh.service.d/10-host-keys.conf" <<'EOF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
EOF
in_root systemctl enable --quiet ssh.service

# The vagrant user: Vagrant's insecure public key, passwordless sudo.
in_root useradd --create-home --shell /bin/bash --user-group vagrant
install -d -m 0700 -o "$(in_root id -u vagrant)" -g "$(in_root id -g vagrant)" \
    "$mnt/home/vagrant/.ssh"
install -m 0600 -o "$(in_root id -u vagrant)" -g "$(in_root id -g vagrant)" \
    /root/vagrant.pub "$mnt/home/vagrant/.ssh/authorized_keys"
echo 'vagrant ALL=(ALL) NOPASSWD:ALL' >"$mnt/etc/sudoers.d/vagrant"
chmod 0440 "$mnt/etc/sudoers.d/vagrant"

# The management NIC takes its address from libvirt's DHCP; the VM tier's agent has no port here.
cat >"$mnt/etc/systemd/network/10-eth0.network" <<'EOF'
[Match]
Name=eth0

[Network]
DHCP=ipv4
LinkLocalAddressing=no
IPv6AcceptRA=no
EOF
in_root systemctl disable --quiet nodeagent-vm-agent.service
echo '/dev/vda1 / ext4 rw,errors=remount-ro 0 1' >"$mnt/etc/fstab"

# Boot loader: GRUB on the disk's MBR, the image's small initramfs, a serial console.
cat >"$mnt/etc/default/grub" <<EOF
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="@CMDLINE@"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --unit=0 --speed=115200"
GRUB_DISABLE_OS_PROBER=true
EOF
in_root grub-install --target=i386-pc /dev/vdb
in_root grub-mkconfig -o /boot/grub/grub.cfg
grep -q "linux.*root=" "$mnt/boot/grub/grub.cfg"
echo "box: done"
"""


def _digest() -> str:
    """What shapes the box's content (not this module's other code, so a refactor keeps the
    cached box): the guest script, the packages, the partition layout, the box's Vagrantfile."""
    recipe = json.dumps(
        [GUEST_SCRIPT, GUEST_PACKAGES, PARTITION_START, KERNEL_CMDLINE, BOX_VAGRANTFILE]
    )
    return hashlib.sha256(recipe.encode()).hexdigest()[:12]


def box_dir(cache: Path, image: Image) -> Path:
    return cache / "vagrant" / f"{image.disk.parent.name}-{_digest()}"


def box_name(image: Image) -> str:
    """The name the test adds the box under: changes whenever the box's content may."""
    return f"{BOX_NAME}-{image.disk.parent.name}-{_digest()}"


def insecure_public_key() -> Path:
    found = sorted(Path("/").glob(INSECURE_KEY_GLOB.lstrip("/")))
    if not found:
        raise FileNotFoundError(f"no Vagrant insecure public key at {INSECURE_KEY_GLOB}")
    return found[-1]


def ensure_box(image: Image, *, cache: Path, progress: Progress = print) -> Path:
    """The cached box file for `image`, built first if missing."""
    out = box_dir(cache, image)
    box = out / BOX_FILE
    if box.exists():
        os.utime(out)  # most recently used: kept by _prune
        return box
    out.parent.mkdir(parents=True, exist_ok=True)
    with _locked(out.parent / ".build.lock"):
        if box.exists():
            return box
        work = out.parent / f".{out.name}.tmp-{os.getpid()}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        try:
            started = time.monotonic()
            _build(image, work, cache=cache, progress=progress)
            progress(f"box built in {time.monotonic() - started:.0f}s")
            shutil.rmtree(out, ignore_errors=True)
            work.rename(out)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        _prune(out.parent, keep=KEEP_BOXES)
    return box


def _prune(directory: Path, *, keep: int) -> None:
    """Keep the `keep` most recently used boxes (a box is ~1 GB; one per VM image recipe)."""
    boxes = [d for d in directory.iterdir() if d.is_dir() and (d / BOX_FILE).exists()]
    boxes.sort(key=lambda d: d.stat().st_mtime, reverse=True)
    for old in boxes[keep:]:
        shutil.rmtree(old, ignore_errors=True)


def _build(image: Image, work: Path, *, cache: Path, progress: Progress) -> None:
    disk = work / "disk.raw"
    progress("box: copying the base filesystem into a partitioned disk")
    fs = work / "fs.raw"
    _run("qemu-img", "convert", "-O", "raw", str(image.disk), str(fs))
    size = PARTITION_START + fs.stat().st_size
    with open(disk, "wb") as f:
        f.truncate(size)
    with open(disk, "r+b") as f:
        f.write(mbr(PARTITION_START, size - PARTITION_START))
    _run(
        "dd", f"if={fs}", f"of={disk}", "bs=1M", f"seek={PARTITION_START >> 20}",
        "conv=notrunc,sparse", "status=none",
    )  # fmt: skip
    fs.unlink()

    vm = Machine(image=image, run_dir=work / "vm", extra_disks=(disk,))
    try:
        vm.start()
        progress(f"box: guest up in {vm.wait_for_boot():.0f}s; installing ssh, sudo and GRUB")
        status = work / "dpkg-status"
        status.write_bytes(vm.get("/var/lib/dpkg/status"))
        debs = download_missing(status, GUEST_PACKAGES, cache / "vagrant" / "debs")
        vm.check("mkdir -p /mnt/box && mount /dev/vdb1 /mnt/box", timeout=60)
        for deb in debs:
            vm.put(f"{GUEST_DEB_DIR}/{deb.name}", deb.read_bytes())
        vm.put("/root/vagrant.pub", insecure_public_key().read_bytes())
        script = GUEST_SCRIPT.replace("@CMDLINE@", KERNEL_CMDLINE)
        vm.put("/root/make-box.sh", script.encode(), mode=0o755)
        out = vm.check("/root/make-box.sh 2>&1", timeout=600)
        if "box: done" not in out:
            raise RuntimeError(f"box build script did not finish:\n{out}")
    finally:
        vm.close()

    progress("box: converting and packing")
    _run("qemu-img", "convert", "-O", "qcow2", str(disk), str(work / "box.img"))
    disk.unlink()
    metadata = {
        "provider": "libvirt",
        "format": "qcow2",
        "virtual_size": math.ceil(size / (1 << 30)),
    }
    (work / "metadata.json").write_text(json.dumps(metadata) + "\n")
    (work / "Vagrantfile").write_text(BOX_VAGRANTFILE)
    tmp = work / f"{BOX_FILE}.tmp"
    with tarfile.open(tmp, "w") as tar:
        for name in ("metadata.json", "Vagrantfile", "box.img"):
            tar.add(work / name, arcname=name)
    (work / "box.img").unlink()
    tmp.rename(work / BOX_FILE)


def mbr(start: int, length: int) -> bytes:
    """A DOS partition table with one bootable Linux partition (LBA only; CHS fields saturated,
    as for any disk past 8 GB). GRUB's boot code goes into the first 446 bytes later."""
    entry = struct.pack(
        "<B3sB3sII", 0x80, b"\xfe\xff\xff", 0x83, b"\xfe\xff\xff", start // 512, length // 512
    )
    return bytes(446) + entry + bytes(48) + b"\x55\xaa"


def download_missing(status: Path, packages: tuple[str, ...], into: Path) -> list[Path]:
    """Download the .debs `packages` need on a system whose dpkg status is `status`: apt resolves
    against that status file (not the host's), so only what the guest lacks is fetched."""
    into.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["apt-get", "install", "--print-uris", "-qq", "--no-install-recommends",
         "-o", f"Dir::State::status={status}", "-o", "Debug::NoLocking=1", *packages],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    wanted: list[tuple[str, str]] = []  # (package=version, file name)
    for line in done.stdout.splitlines():
        if not line.startswith("'"):
            continue
        filename = unquote(line.split()[1])
        name, version, _ = filename.split("_", 2)
        wanted.append((f"{name}={version}", filename))
    missing = [spec for spec, filename in wanted if not (into / filename).exists()]
    if missing:
        subprocess.run(["apt-get", "download", "-q", *missing], cwd=into, check=True)
    debs = []
    for _, filename in wanted:
        path = into / filename
        if not path.exists():  # apt-get download may keep the epoch's colon %-encoded
            path = into / filename.replace(":", "%3a")
        debs.append(path)
    return debs


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)

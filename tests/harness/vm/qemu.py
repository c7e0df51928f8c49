"""The qemu command line of the test VM (a pure function of :class:`QemuSpec`).

- TCG only (``-accel tcg``): KVM is not usable on the CI machine (it hangs early in the kernel).
- Direct kernel boot (``-kernel/-initrd/-append``) from files extracted from the image.
- The disk is a qcow2 overlay on the cached base; ``cache=unsafe`` because it is thrown away.
- Network: user mode with ``restrict=on``: the guest reaches nothing on the host or beyond,
  except each explicit ``guestfwd`` (a guest address:port whose connections run a host command,
  :mod:`harness.vm.relay`). There is no host-to-guest forward: control goes over virtio-serial.
- A guest that is a node of a multi-node test cluster also gets a tap NIC per :class:`TapNic`
  (the host end made by ``harness.nodenet.add_vm_link``): a routed link to the host as the
  netns nodes have, the only way its pods reach the other nodes.
- Control: a virtio-serial port named ``org.nodeagent.ctl`` backed by a host unix socket.
- Console: the guest's ttyS0 goes to a file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONTROL_PORT_NAME = "org.nodeagent.ctl"
KERNEL_CMDLINE = (
    "root=/dev/vda rw console=ttyS0 net.ifnames=0 panic=-1 "
    "systemd.unified_cgroup_hierarchy=1 systemd.show_status=1"
)


@dataclass(frozen=True, kw_only=True)
class GuestForward:
    """Each guest connection to ``guest_ip:guest_port`` runs ``command`` on the host."""

    guest_ip: str
    guest_port: int
    command: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class TapNic:
    """A second NIC on an existing host tap device (qemu opens it; no up/down scripts)."""

    ifname: str
    mac: str


@dataclass(frozen=True, kw_only=True)
class QemuSpec:
    disk: Path
    kernel: Path
    initrd: Path
    control_socket: Path
    console_log: Path
    cmdline: str = KERNEL_CMDLINE
    memory_mb: int = 2048
    cpus: int = 2
    forwards: tuple[GuestForward, ...] = ()
    # Raw disks attached after the root disk (/dev/vdb, ...), written in place: the Vagrant box
    # build prepares one from inside the guest.
    extra_disks: tuple[Path, ...] = ()
    taps: tuple[TapNic, ...] = ()
    binary: str = "qemu-system-x86_64"


def _no_commas(value: str, what: str) -> str:
    # qemu option values are comma-separated; a comma in a path or command would be re-parsed.
    if "," in value:
        raise ValueError(f"{what} must not contain ',': {value!r}")
    return value


def netdev_option(forwards: tuple[GuestForward, ...]) -> str:
    parts = ["user", "id=net0", "restrict=on"]
    for fwd in forwards:
        command = " ".join(_no_commas(arg, "guestfwd command") for arg in fwd.command)
        parts.append(f"guestfwd=tcp:{fwd.guest_ip}:{fwd.guest_port}-cmd:{command}")
    return ",".join(parts)


def _extra_disk_args(disks: tuple[Path, ...]) -> list[str]:
    args: list[str] = []
    for i, path in enumerate(disks, start=1):
        disk = _no_commas(str(path), "disk path")
        args += ["-drive", f"file={disk},if=none,id=disk{i},format=raw,cache=writeback"]
        args += ["-device", f"virtio-blk-pci,drive=disk{i}"]
    return args


def _tap_args(taps: tuple[TapNic, ...]) -> list[str]:
    args: list[str] = []
    for i, tap in enumerate(taps, start=1):
        name = _no_commas(tap.ifname, "tap device")
        args += ["-netdev", f"tap,id=tap{i},ifname={name},script=no,downscript=no"]
        args += ["-device", f"virtio-net-pci,netdev=tap{i},mac={_no_commas(tap.mac, 'MAC')}"]
    return args


def qemu_argv(spec: QemuSpec) -> list[str]:
    disk = _no_commas(str(spec.disk), "disk path")
    sock = _no_commas(str(spec.control_socket), "control socket path")
    console = _no_commas(str(spec.console_log), "console log path")
    return [
        spec.binary,
        "-name", "nodeagent-vm",
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-machine", "q35", "-accel", "tcg", "-cpu", "max",
        "-m", str(spec.memory_mb), "-smp", str(spec.cpus),
        "-kernel", str(spec.kernel), "-initrd", str(spec.initrd), "-append", spec.cmdline,
        "-drive", f"file={disk},if=none,id=disk0,format=qcow2,cache=unsafe,discard=unmap",
        "-device", "virtio-blk-pci,drive=disk0",
        *_extra_disk_args(spec.extra_disks),
        "-chardev", f"file,id=console,path={console}",
        "-serial", "chardev:console",
        "-netdev", netdev_option(spec.forwards),
        "-device", "virtio-net-pci,netdev=net0",
        *_tap_args(spec.taps),
        "-chardev", f"socket,id=ctl,path={sock},server=on,wait=off",
        "-device", "virtio-serial-pci",
        "-device", f"virtserialport,chardev=ctl,name={CONTROL_PORT_NAME}",
        "-device", "virtio-rng-pci",
        "-monitor", "none",
    ]  # fmt: skip

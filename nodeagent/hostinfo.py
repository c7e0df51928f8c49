"""Facts about the host, read from ``/proc``, ``/sys`` and ``/etc`` under an injectable root.

Each reader is a plain blocking function over small files; managers call them through
``asyncio.to_thread`` (or once at startup) and pass the resulting frozen values to pure
policy functions, so tests build facts directly instead of faking files.
"""

from __future__ import annotations

import ipaddress
import os
import platform
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

GOARCH = {
    "x86_64": "amd64",
    "aarch64": "arm64",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
    "i686": "386",
}


@dataclass(frozen=True, kw_only=True)
class HostInfo:
    hostname: str
    machine_id: str = ""
    system_uuid: str = ""
    boot_id: str = ""
    kernel_version: str = ""
    os_image: str = ""
    operating_system: str = "linux"
    architecture: str = "amd64"
    num_cpus: int = 0
    memory_bytes: int = 0
    swap_bytes: int = 0
    hugepages: Mapping[int, int] = field(default_factory=dict)
    """Huge page size in bytes -> number of pages configured."""


@dataclass(frozen=True, kw_only=True)
class HostNetwork:
    addresses: Mapping[str, tuple[IPAddress, ...]]
    """Interface name -> its addresses (link-local IPv6 without the %scope)."""
    default_route_interfaces: tuple[str, ...] = ()
    """Interfaces holding a default route, IPv4 routes first."""

    def all_addresses(self) -> set[IPAddress]:
        return {ip for ips in self.addresses.values() for ip in ips}


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def hostname() -> str:
    """The host name as the kubelet uses it for the node name: lowercase, trimmed."""
    return socket.gethostname().strip().lower()


def read_host_info(*, root: Path = Path("/"), host_name: str | None = None) -> HostInfo:
    etc, proc, sys = root / "etc", root / "proc", root / "sys"
    meminfo = _meminfo(_read(proc / "meminfo"))
    return HostInfo(
        hostname=host_name if host_name is not None else hostname(),
        machine_id=_read(etc / "machine-id") or _read(root / "var/lib/dbus/machine-id"),
        system_uuid=_read(sys / "class/dmi/id/product_uuid"),
        boot_id=_read(proc / "sys/kernel/random/boot_id"),
        kernel_version=_read(proc / "sys/kernel/osrelease") or platform.release(),
        os_image=_os_image(_read(etc / "os-release") or _read(root / "usr/lib/os-release")),
        architecture=GOARCH.get(platform.machine(), platform.machine()),
        num_cpus=_online_cpus(_read(sys / "devices/system/cpu/online")) or (os.cpu_count() or 0),
        memory_bytes=meminfo.get("MemTotal", 0),
        swap_bytes=meminfo.get("SwapTotal", 0),
        hugepages=_hugepages(sys / "kernel/mm/hugepages"),
    )


def _meminfo(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            out[key] = int(parts[0]) * (1024 if parts[1:] == ["kB"] else 1)
    return out


def _os_image(text: str) -> str:
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "PRETTY_NAME":
            return value.strip().strip('"').strip("'")
    return "Linux"


def _online_cpus(text: str) -> int:
    """Count CPUs in a kernel list such as ``0-3,6``."""
    count = 0
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        try:
            count += int(hi or lo) - int(lo) + 1
        except ValueError:
            return 0
    return count


def _hugepages(base: Path) -> dict[int, int]:
    out: dict[int, int] = {}
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return out
    for entry in entries:
        name = entry.name  # hugepages-2048kB
        if name.startswith("hugepages-") and name.endswith("kB"):
            try:
                size = int(name[len("hugepages-") : -2]) * 1024
                out[size] = int(_read(entry / "nr_hugepages") or 0)
            except ValueError:
                continue
    return out


def filesystem_capacity(path: Path) -> int:
    """Total bytes of the filesystem holding ``path`` (the kubelet's ephemeral-storage)."""
    st = os.statvfs(path)
    return st.f_blocks * st.f_frsize


def read_host_network(*, root: Path = Path("/")) -> HostNetwork:
    import psutil  # type: ignore[import-untyped]  # only this reader needs it

    addresses: dict[str, tuple[IPAddress, ...]] = {}
    for iface, addrs in psutil.net_if_addrs().items():
        ips: list[IPAddress] = []
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                try:
                    ips.append(ipaddress.ip_address(a.address.split("%", 1)[0]))
                except ValueError:
                    continue
        addresses[iface] = tuple(ips)
    return HostNetwork(
        addresses=addresses,
        default_route_interfaces=default_route_interfaces(root / "proc/net"),
    )


def default_route_interfaces(proc_net: Path) -> tuple[str, ...]:
    out: list[str] = []
    for line in _read(proc_net / "route").splitlines()[1:]:
        cols = line.split()
        if len(cols) >= 8 and cols[1] == "00000000" and cols[7] == "00000000":
            out.append(cols[0])
    for line in _read(proc_net / "ipv6_route").splitlines():
        cols = line.split()
        if len(cols) >= 10 and cols[0] == "0" * 32 and cols[1] == "00" and cols[9] != "lo":
            out.append(cols[9])
    return tuple(dict.fromkeys(out))

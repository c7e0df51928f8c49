"""Host facts read from a fake root: ids, kernel, OS image, CPUs, memory, hugepages, routes."""

from __future__ import annotations

import os
from pathlib import Path

from nodeagent.hostinfo import default_route_interfaces, filesystem_capacity, read_host_info


def put(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_host_facts_come_from_the_kubelets_sources(tmp_path: Path) -> None:
    put(tmp_path, "etc/machine-id", "0123456789abcdef\n")
    put(tmp_path, "sys/class/dmi/id/product_uuid", "EC2A0000-1111-2222-3333-444455556666\n")
    put(tmp_path, "proc/sys/kernel/random/boot_id", "b0b0-b0b0\n")
    put(tmp_path, "proc/sys/kernel/osrelease", "6.1.0-28-amd64\n")
    put(
        tmp_path,
        "etc/os-release",
        'NAME="Debian GNU/Linux"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n',
    )
    put(tmp_path, "sys/devices/system/cpu/online", "0-3,6\n")
    put(tmp_path, "proc/meminfo", "MemTotal:       16384000 kB\nSwapTotal:       1024 kB\n")
    put(tmp_path, "sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages", "16\n")
    put(tmp_path, "sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages", "0\n")

    info = read_host_info(root=tmp_path, host_name="n1")

    assert info.machine_id == "0123456789abcdef"
    assert info.system_uuid == "EC2A0000-1111-2222-3333-444455556666"
    assert info.boot_id == "b0b0-b0b0"
    assert info.kernel_version == "6.1.0-28-amd64"
    assert info.os_image == "Debian GNU/Linux 12 (bookworm)"
    assert info.num_cpus == 5
    assert (info.memory_bytes, info.swap_bytes) == (16384000 * 1024, 1024 * 1024)
    assert info.hugepages == {2 * 2**20: 16, 2**30: 0}


def test_missing_files_leave_facts_empty_rather_than_failing(tmp_path: Path) -> None:
    info = read_host_info(root=tmp_path, host_name="n1")
    assert (info.machine_id, info.boot_id, info.os_image, info.hugepages) == ("", "", "Linux", {})
    assert info.num_cpus == os.cpu_count()


def test_default_route_interfaces_ipv4_first(tmp_path: Path) -> None:
    put(
        tmp_path,
        "route",
        "Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\n"
        "eth0\t0000A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\n"
        "eth1\t00000000\t0101A8C0\t0003\t0\t0\t100\t00000000\n",
    )
    put(
        tmp_path,
        "ipv6_route",
        f"{'0' * 32} 00 {'0' * 32} 00 fe800000000000000000000000000001 00000400 00000001 "
        "00000000 00000003 eth2\n"
        f"{'0' * 32} 00 {'0' * 32} 00 {'0' * 32} ffffffff 00000001 00000000 00200200 lo\n",
    )

    assert default_route_interfaces(tmp_path) == ("eth1", "eth2")


def test_ephemeral_storage_is_the_root_dir_filesystem_size(tmp_path: Path) -> None:
    st = os.statvfs(tmp_path)
    assert filesystem_capacity(tmp_path) == st.f_blocks * st.f_frsize > 0

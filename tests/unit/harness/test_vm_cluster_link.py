"""A VM guest as a node of a multi-node test cluster: qemu's NIC on the host's tap device and
the guest's side of the link (the pure parts of `harness.vm.qemu` and `harness.vm.clusternode`)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from harness import nodenet
from harness.vm import qemu
from harness.vm.clusternode import link_script


def _spec(**extra: object) -> qemu.QemuSpec:
    return qemu.QemuSpec(
        disk=Path("/d.qcow2"),
        kernel=Path("/k"),
        initrd=Path("/i"),
        control_socket=Path("/c.sock"),
        console_log=Path("/console.log"),
        **extra,  # type: ignore[arg-type]  # each test passes fields of QemuSpec
    )


def test_a_tap_nic_follows_the_user_network_nic() -> None:
    tap = qemu.TapNic(ifname="na-m3n2", mac="52:54:00:6e:61:02")
    argv = qemu.qemu_argv(_spec(taps=(tap,)))
    user = argv.index("virtio-net-pci,netdev=net0")
    at = argv.index("tap,id=tap1,ifname=na-m3n2,script=no,downscript=no")
    assert user < at
    assert argv[at + 2] == "virtio-net-pci,netdev=tap1,mac=52:54:00:6e:61:02"
    assert "tap" not in " ".join(qemu.qemu_argv(_spec()))


def test_a_tap_name_with_a_comma_is_refused() -> None:
    with pytest.raises(ValueError, match="tap device"):
        qemu.qemu_argv(_spec(taps=(qemu.TapNic(ifname="a,b", mac="52:54:00:00:00:01"),)))


def test_the_guest_link_is_a_point_to_point_address_with_the_default_route() -> None:
    script = link_script(nodenet.NodeAddr(3, 2), mac="52:54:00:6e:61:02")
    assert 'ip addr replace 198.18.19.12/32 peer 198.18.19.1/32 dev "$dev"' in script
    assert 'ip route replace default via 198.18.19.1 dev "$dev"' in script
    # qemu's user-mode gateway stops being the default route
    assert "ip route del default via 10.0.2.2" in script
    assert subprocess.run(["bash", "-n", "-c", script], check=False).returncode == 0

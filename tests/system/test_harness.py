"""The VM harness's own pieces, without a VM: qemu command line, recipe, control protocol."""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from harness.vm import qemu
from harness.vm.control import ControlChannel, VmError, VmTimeout
from harness.vm.image import Recipe, parse_depends, recipe_for

AGENT = Path(qemu.__file__).with_name("guest_agent.py")


def spec(tmp_path: Path, **kw: object) -> qemu.QemuSpec:
    return qemu.QemuSpec(
        disk=tmp_path / "overlay.qcow2",
        kernel=tmp_path / "vmlinuz",
        initrd=tmp_path / "initrd.img",
        control_socket=tmp_path / "control.sock",
        console_log=tmp_path / "console.log",
        **kw,  # type: ignore[arg-type]  # (the overrides are QemuSpec fields)
    )


def option(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


def test_the_vm_runs_under_tcg_with_a_restricted_user_network(tmp_path: Path) -> None:
    argv = qemu.qemu_argv(spec(tmp_path))
    assert option(argv, "-accel") == ["tcg"]
    assert "-enable-kvm" not in argv
    assert option(argv, "-netdev") == ["user,id=net0,restrict=on"]
    assert "-nodefaults" in argv


def test_each_guest_forward_is_an_explicit_guestfwd(tmp_path: Path) -> None:
    fwd = qemu.GuestForward(guest_ip="10.0.2.100", guest_port=6443, command=("/py", "/relay.py"))
    (netdev,) = option(qemu.qemu_argv(spec(tmp_path, forwards=(fwd,))), "-netdev")
    assert netdev == "user,id=net0,restrict=on,guestfwd=tcp:10.0.2.100:6443-cmd:/py /relay.py"


def test_a_comma_in_a_path_is_refused_rather_than_reparsed_by_qemu(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must not contain ','"):
        qemu.qemu_argv(spec(tmp_path / "a,b"))


def test_an_extra_disk_is_a_raw_virtio_drive_after_the_root_disk(tmp_path: Path) -> None:
    argv = qemu.qemu_argv(spec(tmp_path, extra_disks=(tmp_path / "box.raw",)))
    drives = option(argv, "-drive")
    assert drives[0].startswith(f"file={tmp_path}/overlay.qcow2,")  # still /dev/vda
    assert drives[1] == f"file={tmp_path}/box.raw,if=none,id=disk1,format=raw,cache=writeback"
    assert "virtio-blk-pci,drive=disk1" in option(argv, "-device")


def test_the_kernel_boots_the_overlay_with_cgroup_v2_on_the_serial_console(tmp_path: Path) -> None:
    argv = qemu.qemu_argv(spec(tmp_path))
    (cmdline,) = option(argv, "-append")
    assert {"root=/dev/vda", "console=ttyS0", "systemd.unified_cgroup_hierarchy=1"} <= set(
        cmdline.split()
    )
    assert option(argv, "-drive")[0].startswith(f"file={tmp_path}/overlay.qcow2,")


@pytest.mark.parametrize(
    ("field", "names"),
    [
        pytest.param("python3.11, nftables", ["python3.11", "nftables"], id="plain names"),
        pytest.param("python3 (>= 3.11), libc6:any", ["python3", "libc6"], id="versions, arch"),
        pytest.param("containerd | containerd.io", ["containerd"], id="first alternative"),
        pytest.param("", [], id="no dependencies"),
    ],
)
def test_the_image_gets_the_debs_dependencies(field: str, names: list[str]) -> None:
    assert parse_depends(field) == names


def test_the_recipe_hash_changes_with_the_package_list_only_when_it_changes() -> None:
    assert recipe_for(["b", "a"]).digest() == recipe_for(["a", "b", "a"]).digest()
    assert recipe_for(["a"]).digest() != recipe_for(["a", "c"]).digest()


def test_the_recipe_hash_covers_the_code_that_shapes_the_image(tmp_path: Path) -> None:
    source = tmp_path / "rootfs.py"
    source.write_text("x = 1\n")
    before = Recipe(packages=("a",), sources=(source,)).digest()
    source.write_text("x = 2\n")
    assert Recipe(packages=("a",), sources=(source,)).digest() != before


# --- the control protocol against the real guest agent over a socketpair ---------------------


@pytest.fixture
def channel(tmp_path: Path) -> Iterator[ControlChannel]:
    host, guest = socket.socketpair()
    agent = subprocess.Popen(
        [sys.executable, str(AGENT), "--fd", str(guest.fileno())], pass_fds=[guest.fileno()]
    )
    guest.close()
    chan = ControlChannel(socket_path=tmp_path / "unused.sock")
    chan.attach(host)
    try:
        yield chan
    finally:
        chan.close()
        agent.kill()
        agent.wait()


def test_run_returns_exit_code_and_both_streams(channel: ControlChannel) -> None:
    reply = channel.request(
        "run", timeout=30, argv=["bash", "-c", "echo out; echo err >&2; exit 3"], timeout_s=10
    )
    assert (reply["rc"], reply["stdout"], reply["stderr"]) == (3, "b3V0Cg==", "ZXJyCg==")
    assert reply["timed_out"] is False


def test_a_command_past_its_timeout_is_killed_with_its_children(
    channel: ControlChannel, tmp_path: Path
) -> None:
    marker = tmp_path / "child-survived"
    reply = channel.request(
        "run", timeout=30, timeout_s=0.5,
        argv=["bash", "-c", f"(sleep 2; touch {marker}) & sleep 30"],
    )  # fmt: skip
    assert reply["timed_out"] is True
    # The whole process group got SIGKILL before the reply: the background child is gone too.
    assert subprocess.run(["pgrep", "-f", str(marker)], check=False).returncode == 1


def test_put_then_get_round_trips_binary_data_with_its_mode(
    channel: ControlChannel, tmp_path: Path
) -> None:
    target = tmp_path / "deep" / "file.bin"
    data = bytes(range(256)) * 4000
    channel.request("put", timeout=30, path=str(target), data=base64.b64encode(data).decode(),
                    mode=0o600)  # fmt: skip
    assert target.read_bytes() == data
    assert target.stat().st_mode & 0o777 == 0o600
    got = channel.request("get", timeout=30, path=str(target))
    assert base64.b64decode(got["data"]) == data


def test_a_guest_side_failure_is_raised_on_the_host(
    channel: ControlChannel, tmp_path: Path
) -> None:
    with pytest.raises(VmError, match="FileNotFoundError"):
        channel.request("get", timeout=30, path=str(tmp_path / "missing"))


def test_a_reply_that_never_comes_is_a_timeout_and_a_late_one_is_ignored(
    channel: ControlChannel,
) -> None:
    with pytest.raises(VmTimeout):
        channel.request("run", timeout=0.3, argv=["sleep", "1"], timeout_s=10)
    # The late reply to the abandoned request must not be taken for the next one's.
    reply = channel.request("run", timeout=30, argv=["echo", "next"], timeout_s=10)
    assert reply["stdout"] == "bmV4dAo="

"""The project's Vagrantfile, run for real: vagrant-libvirt, qemu without KVM, the local box.

What the README's "Try it in a Vagrant VM" section tells a user to run is what this test runs:
``vagrant up`` (the Vagrantfile's provisioner is ``provision.sh`` with the project's .deb and the
join command the control plane printed: ``nodeagent join`` in the box, TLS bootstrap), the node
joins the host's control plane and turns Ready (read from the apiserver), ``vagrant ssh`` sees
the service active with join's flags and an issued certificate, and ``vagrant destroy -f`` leaves
no domain
and no volume behind. libvirt is started by the test when no daemon runs (the CI host has no
systemd), and everything libvirt holds that appeared during the test is removed at the end, so
the host is as before: no domain, volume, network or pool, no qemu, dnsmasq or libvirtd process.

The guest reaches the apiserver at 198.18.0.1 (the harness's /32 on the host's ``lo``, the
address in the join command, in ``cluster-info`` and in the apiserver's certificate) through its
default route, the host's address on libvirt's NAT bridge: traffic never leaves this machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from harness.controlplane import ControlPlane
from harness.vagrant.box import BOX_NAME, box_name
from harness.vagrant.libvirt import Inventory, is_alive, libvirt_host, processes_matching
from harness.versions import cache_dir
from harness.vm import Image

pytestmark = pytest.mark.vagrant

REPO = Path(__file__).resolve().parents[2]
NODE = "nodeagent-vagrant"
# vagrant-libvirt names the domain <directory of the Vagrantfile>_<machine>.
DOMAIN = f"{REPO.name}_default"
LIBVIRT_DEFINITIONS = (
    Path("/etc/libvirt/qemu/networks/vagrant-libvirt.xml"),
    Path("/etc/libvirt/storage/default.xml"),
)
UP_TIMEOUT_S = 1200.0
READY_TIMEOUT_S = 240.0


def vagrant_env(tmp_path: Path, deb: Path, box: str, join_command: str) -> dict[str, str]:
    """The environment the README's instructions set, plus where vagrant keeps its state."""
    return {
        **os.environ,
        "VAGRANT_CWD": str(REPO),
        "VAGRANT_HOME": str(cache_dir() / "vagrant" / "home"),  # the added box stays cached
        "VAGRANT_DOTFILE_PATH": str(tmp_path / "dot-vagrant"),  # not in the worktree
        "VAGRANT_DEFAULT_PROVIDER": "libvirt",
        "VAGRANT_CHECKPOINT_DISABLE": "1",  # no version check over the network
        "VAGRANT_NO_COLOR": "1",
        "NODEAGENT_VAGRANT_BOX": box,
        "NODEAGENT_LIBVIRT_DRIVER": "qemu",
        "NODEAGENT_DEB": str(deb),
        "NODEAGENT_JOIN": join_command,
        "NODEAGENT_NODE_NAME": NODE,
    }


class Vagrant:
    def __init__(self, env: dict[str, str], log: Path, say: Callable[[str], None]) -> None:
        self.env = env
        self.log = log
        self.say = say

    def __call__(self, *args: str, timeout: float = 300.0, check: bool = True) -> str:
        started = time.monotonic()
        with open(self.log, "a") as log:
            log.write(f"\n$ vagrant {' '.join(args)}\n")
            log.flush()
            done = subprocess.run(
                ["vagrant", *args], env=self.env, cwd=REPO, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, timeout=timeout, check=False,
            )  # fmt: skip
            log.write(done.stdout)
        self.say(f"vagrant {args[0]}: exit {done.returncode} in {time.monotonic() - started:.0f}s")
        if check and done.returncode != 0:
            raise AssertionError(
                f"vagrant {' '.join(args)} exited {done.returncode}:\n{done.stdout[-6000:]}"
            )
        return done.stdout

    def ensure_box(self, name: str, box: Path) -> None:
        """Add the local box under `name` once; drop boxes of older builds from VAGRANT_HOME."""
        listed = self("box", "list", "--machine-readable")
        names = {line.split(",")[3] for line in listed.splitlines() if ",box-name," in line}
        for old in sorted(names):
            if old.startswith(f"{BOX_NAME}-") and old != name:
                self("box", "remove", "--force", "--all", old, timeout=120)
        if name not in names:
            self("box", "add", "--name", name, str(box), timeout=600)


def node(control_plane: ControlPlane) -> dict[str, Any] | None:
    done = control_plane.kubectl("get", "node", NODE, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def ready_condition(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    if obj is None:
        return None
    conditions = obj.get("status", {}).get("conditions", [])
    return next((c for c in conditions if c["type"] == "Ready"), None)


def wait_ready(control_plane: ControlPlane, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    last: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        last = node(control_plane)
        cond = ready_condition(last)
        if cond is not None and cond["status"] == "True":
            assert last is not None
            return last
        time.sleep(2)
    raise AssertionError(f"node {NODE} not Ready after {timeout:.0f}s: {ready_condition(last)}")


def assert_joined(ready: dict[str, Any]) -> None:
    """The Node the VM's agent registered, as the apiserver holds it."""
    assert ready["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    info = ready["status"]["nodeInfo"]
    assert info["osImage"].startswith("Debian GNU/Linux 12")
    assert info["containerRuntimeVersion"].startswith("containerd://")
    condition = ready_condition(ready)
    assert condition is not None and condition["reason"] == "KubeletReady"


def assert_joined_in_the_box(vagrant: Vagrant) -> None:
    """Joined, not handed credentials: join's flags, the certificate TLS bootstrap got."""
    flags = vagrant("ssh", "-c", "sudo cat /var/lib/nodeagent/join-flags.env")
    assert f"--hostname-override={NODE}" in flags, flags
    issued = vagrant(
        "ssh", "-c", "sudo test -s /var/lib/nodeagent/pki/kubelet-client-current.pem"
        " && echo issued", check=False,
    )  # fmt: skip
    assert "issued" in issued.split(), issued


def test_vagrant_up_joins_a_ready_node_and_destroy_leaves_nothing(
    *,
    control_plane: ControlPlane,
    nodeagent_deb: Path,
    vm_image: Image,
    vagrant_box: Path,
    tmp_path: Path,
    say: Callable[[str], None],
    timings: dict[str, float],
) -> None:
    definitions_before = {path: path.exists() for path in LIBVIRT_DEFINITIONS}
    libvirt_chains_before = "LIBVIRT_" in _ruleset()
    env = vagrant_env(tmp_path, nodeagent_deb, box_name(vm_image), control_plane.join_command())
    vagrant = Vagrant(env, tmp_path / "vagrant.log", say)
    vagrant.ensure_box(box_name(vm_image), vagrant_box)

    destroyed = False
    with libvirt_host(tmp_path / "libvirt") as host:
        assert host.before is not None
        try:
            started = time.monotonic()
            vagrant("up", "--provider=libvirt", timeout=UP_TIMEOUT_S)
            timings["up"] = time.monotonic() - started
            assert DOMAIN in host.new_since_start().domains

            # The node registered from the VM and the host's apiserver sees it Ready.
            try:
                ready = wait_ready(control_plane, READY_TIMEOUT_S)
            except AssertionError as e:
                journal = vagrant(
                    "ssh", "-c", "sudo journalctl -u nodeagent --no-pager -n 40", check=False
                )
                raise AssertionError(f"{e}\nnodeagent journal in the VM:\n{journal}") from None
            assert_joined(ready)
            timings["ready"] = time.monotonic() - started

            # The README's check: the service is active inside the VM.
            out = vagrant("ssh", "-c", "systemctl is-active nodeagent", timeout=120)
            assert "active" in out.split(), out  # ssh adds its "Connection ... closed." line
            assert_joined_in_the_box(vagrant)

            domain_volumes = {
                (pool, vol) for pool, vol in host.new_since_start().volumes if DOMAIN in vol
            }
            assert domain_volumes, "no volume of the domain in libvirt's pool"
            started = time.monotonic()
            vagrant("destroy", "-f", timeout=300)
            destroyed = True
            timings["destroy"] = time.monotonic() - started

            left = host.new_since_start()
            assert DOMAIN not in left.domains
            assert not (left.volumes & domain_volumes), f"volumes left: {left.volumes}"
            assert not processes_matching(f"guest={DOMAIN}")
        finally:
            if not destroyed:
                vagrant("destroy", "-f", timeout=300, check=False)
            control_plane.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)
        before = host.before
        started_daemons = dict(host.started)

    # The host's libvirt holds nothing the test made: definitions, daemons, helpers.
    if started_daemons:
        alive = [pid for pid in started_daemons.values() if is_alive(pid)]
        assert not alive, f"daemons the test started still run: {started_daemons}"
    else:
        assert Inventory.take() == before
    for path, existed in definitions_before.items():
        assert path.exists() == existed, f"{path} left behind"
    if not libvirt_chains_before:
        assert "LIBVIRT_" not in _ruleset(), "libvirt's firewall chains left behind"
    assert not processes_matching(f"guest={DOMAIN}", "/var/lib/libvirt/dnsmasq/vagrant-libvirt")
    say(
        "box {box:.0f}s, up {up:.0f}s, Ready {ready:.0f}s after up began, destroy {destroy:.0f}s"
        .format(**{"box": 0.0, **timings})
    )  # fmt: skip


def _ruleset() -> str:
    return subprocess.run(
        ["nft", "list", "ruleset"], capture_output=True, text=True, check=True
    ).stdout

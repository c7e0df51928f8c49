"""What system tests do to and ask of a provisioned guest: install, unit state, journal, waits."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from harness.vm.machine import Machine

GUEST_DIR = "/root/provision"
PROVISION_SCRIPT = Path(__file__).with_name("provision.sh")
DEFAULT_ARGS_LINE = 'NODEAGENT_ARGS=""'
TEST_DROPINS = "/etc/systemd/system/nodeagent.service.d/test-*.conf"
# What a join or a copied kubeconfig leaves: without them the packaged agent runs standalone.
NODE_STATE = (
    "/etc/nodeagent/kubeconfig /etc/nodeagent/bootstrap-kubeconfig "
    "/var/lib/nodeagent/join-flags.env /var/lib/nodeagent/pki"
)


def deb_version(deb: Path) -> str:
    return subprocess.run(
        ["dpkg-deb", "--field", str(deb), "Version"], check=True, capture_output=True, text=True
    ).stdout.strip()


# The package's postinst compiles the venv's bytecode (832 files): 4-8 s on this host, but
# 1-2 min in a TCG guest while the 2-core host is loaded (load ~17), where the agent's own
# start to READY also took 60 s. Provisioning then needs more than the 300 s it used to.
PROVISION_TIMEOUT_S = 600


def provision(vm: Machine, deb: Path, *args: str, timeout: float = PROVISION_TIMEOUT_S) -> str:
    """Copy provision.sh and ``deb`` into the guest, run it with ``args``; return its output."""
    vm.put(f"{GUEST_DIR}/provision.sh", PROVISION_SCRIPT.read_bytes(), mode=0o755)
    guest_deb = f"{GUEST_DIR}/{deb.name}"
    vm.put(guest_deb, deb.read_bytes())
    return vm.check([f"{GUEST_DIR}/provision.sh", "--deb", guest_deb, *args], timeout=timeout)


def installed_version(vm: Machine) -> str:
    """The nodeagent version dpkg has fully installed in the guest, or "" if none."""
    rc, out, _ = vm.run("dpkg-query -W -f='${db:Status-Abbrev} ${Version}' nodeagent")
    status, _, version = out.partition(" ")
    return version.strip() if rc == 0 and status.startswith("ii") else ""


def is_active(vm: Machine) -> bool:
    return vm.run("systemctl is-active nodeagent").stdout.strip() == "active"


def ensure_installed(vm: Machine, deb: Path) -> None:
    """Bring the guest back to "``deb`` installed with default settings, service active"."""
    defaults = vm.run(f"grep -qx '{DEFAULT_ARGS_LINE}' /etc/default/nodeagent").rc == 0
    dropins = vm.run(f"ls {TEST_DROPINS}").rc == 0
    unjoined = vm.run("test ! -e /var/lib/nodeagent/join-flags.env").rc == 0
    current = installed_version(vm) == deb_version(deb)
    if current and defaults and not dropins and unjoined and is_active(vm):
        return
    vm.check(f"rm -rf {NODE_STATE} {TEST_DROPINS}")
    provision(vm, deb)


def main_pid(vm: Machine) -> int:
    return int(vm.check("systemctl show -p MainPID --value nodeagent").strip())


def unit_properties(vm: Machine, *names: str) -> dict[str, str]:
    out = vm.check(["systemctl", "show", "nodeagent", *(f"--property={n}" for n in names)])
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(vm: Machine, *args: str) -> list[dict[str, str]]:
    """``journalctl -u nodeagent -o json`` entries (plus ``args``: matches, cursors...)."""
    out = vm.check(["journalctl", "-u", "nodeagent", "-o", "json", "--no-pager", *args])
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def journal_cursor(vm: Machine) -> str:
    """A cursor at the end of the journal; ``--after-cursor=<it>`` shows only newer entries."""
    out = vm.check("journalctl -n 0 --show-cursor --quiet --no-pager")
    return out.rsplit("cursor: ", 1)[1].strip()


def wait_until(vm: Machine, predicate: str, *, timeout: float, what: str) -> None:
    """Poll a guest shell predicate inside the guest (no round trip per try) until it holds."""
    tries = int(timeout * 2)
    result = vm.run(
        f"for i in $(seq {tries}); do ({predicate}) && exit 0; sleep 0.5; done; exit 1",
        timeout=timeout + 30,
    )
    if result.rc != 0:
        raise AssertionError(
            f"timed out after {timeout}s waiting for {what}: {predicate}\n"
            f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
        )

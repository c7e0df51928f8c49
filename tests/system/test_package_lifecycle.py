"""The .deb's life on a real systemd host: remove, purge, reinstall, upgrade, as operators do."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness.vm import Machine
from harness.vm.guest import (
    GUEST_DIR,
    deb_version,
    installed_version,
    is_active,
    journal,
    journal_cursor,
    main_pid,
    provision,
)

pytestmark = pytest.mark.system

ADMIN_EDIT = "# edited by the admin"
APT_TIMEOUT = 300


def exists(vm: Machine, path: str) -> bool:
    return vm.run(["test", "-e", path]).rc == 0


def dpkg_status(vm: Machine) -> str:
    """dpkg's two-letter state: ii installed, rc removed with config left, un/pn gone."""
    rc, out, _ = vm.run("dpkg-query -W -f='${db:Status-Abbrev}' nodeagent")
    return out.strip() if rc == 0 else "un"


def test_remove_stops_the_service_and_keeps_the_configuration(agent: Machine) -> None:
    agent.check(f"echo '{ADMIN_EDIT}' >> /etc/nodeagent/config.yaml")
    pid = main_pid(agent)

    agent.check("apt-get remove -y nodeagent", timeout=APT_TIMEOUT)

    assert dpkg_status(agent) == "rc"
    assert agent.run("systemctl is-active nodeagent").stdout.strip() == "inactive"
    assert agent.run(f"kill -0 {pid}").rc != 0, "the daemon survived the removal"
    assert not exists(agent, "/etc/systemd/system/multi-user.target.wants/nodeagent.service")
    assert not exists(agent, "/opt/nodeagent")
    assert ADMIN_EDIT in agent.check("cat /etc/nodeagent/config.yaml")
    assert exists(agent, "/etc/default/nodeagent")
    assert exists(agent, "/var/lib/nodeagent")


def test_reinstall_after_remove_runs_again_with_the_admins_configuration(
    agent: Machine, nodeagent_deb: Path
) -> None:
    agent.check(f"echo '{ADMIN_EDIT}' >> /etc/nodeagent/config.yaml")
    agent.check("apt-get remove -y nodeagent", timeout=APT_TIMEOUT)

    provision(agent, nodeagent_deb)

    assert installed_version(agent) == deb_version(nodeagent_deb)
    assert is_active(agent)
    assert agent.check("systemctl is-enabled nodeagent").strip() == "enabled"
    assert ADMIN_EDIT in agent.check("cat /etc/nodeagent/config.yaml")


def test_purge_removes_configuration_and_state(agent: Machine) -> None:
    pid = main_pid(agent)

    agent.check("apt-get purge -y nodeagent", timeout=APT_TIMEOUT)

    assert dpkg_status(agent) in {"un", "pn"}
    assert agent.run(f"kill -0 {pid}").rc != 0, "the daemon survived the purge"
    for path in (
        "/etc/nodeagent",
        "/etc/default/nodeagent",
        "/var/lib/nodeagent",
        "/opt/nodeagent",
        "/lib/systemd/system/nodeagent.service",
    ):
        assert not exists(agent, path), f"{path} survived the purge"


def test_reinstall_after_purge_starts_from_the_packaged_defaults(
    agent: Machine, nodeagent_deb: Path
) -> None:
    agent.check(f"echo '{ADMIN_EDIT}' >> /etc/nodeagent/config.yaml")
    agent.check("apt-get purge -y nodeagent", timeout=APT_TIMEOUT)

    provision(agent, nodeagent_deb)

    assert is_active(agent)
    assert ADMIN_EDIT not in agent.check("cat /etc/nodeagent/config.yaml")
    assert agent.check("stat -c %a /var/lib/nodeagent").strip() == "700"


def test_upgrade_from_the_previous_build_restarts_the_service(
    agent: Machine, nodeagent_deb: Path, previous_deb: Path
) -> None:
    agent.check("apt-get purge -y nodeagent", timeout=APT_TIMEOUT)
    provision(agent, previous_deb)
    assert installed_version(agent) == deb_version(previous_deb)
    old_pid = main_pid(agent)
    cursor = journal_cursor(agent)
    guest_deb = f"{GUEST_DIR}/{nodeagent_deb.name}"
    agent.put(guest_deb, nodeagent_deb.read_bytes())

    agent.check(["apt-get", "install", "-y", guest_deb], timeout=APT_TIMEOUT)

    assert installed_version(agent) == deb_version(nodeagent_deb)
    assert is_active(agent)
    new_pid = main_pid(agent)
    assert new_pid not in {0, old_pid}
    assert agent.run(f"kill -0 {old_pid}").rc != 0, "the old daemon is still running"
    messages = [e.get("MESSAGE", "") for e in journal(agent, f"--after-cursor={cursor}")]
    assert any(m.startswith("Stopping nodeagent.service") for m in messages), messages
    assert any(m.startswith("Started nodeagent.service") for m in messages), messages

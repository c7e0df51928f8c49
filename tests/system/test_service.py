"""nodeagent under a real systemd in the VM: readiness, watchdog, journald fields, host setup."""

from __future__ import annotations

import pytest
from harness.vm import Machine
from harness.vm.guest import journal, journal_cursor, main_pid, unit_properties, wait_until

pytestmark = pytest.mark.system

# The watchdog test shortens the shipped 30s/10s with a drop-in so it costs seconds, not a minute;
# the shipped values are asserted separately.
FAST_WATCHDOG_DROPIN = "/etc/systemd/system/nodeagent.service.d/test-fast-watchdog.conf"


def test_service_is_active_once_the_daemon_notified_ready(agent: Machine) -> None:
    props = unit_properties(agent, "Type", "ActiveState", "SubState", "StatusText", "NotifyAccess")
    assert props["Type"] == "notify"
    assert (props["ActiveState"], props["SubState"]) == ("active", "running")
    # STATUS= came over the notify socket: systemd only knows it from the daemon.
    assert props["StatusText"], props
    assert agent.run("systemctl is-active nodeagent").stdout.strip() == "active"


def test_watchdog_is_configured_in_the_shipped_unit(agent: Machine) -> None:
    props = unit_properties(agent, "WatchdogUSec", "Restart", "FragmentPath", "DropInPaths")
    assert props["WatchdogUSec"] == "30s"
    assert props["Restart"] == "always"
    assert props["FragmentPath"] == "/lib/systemd/system/nodeagent.service"
    assert props["DropInPaths"] == ""


def test_a_stopped_event_loop_is_killed_by_the_watchdog_and_restarted(agent: Machine) -> None:
    agent.put(FAST_WATCHDOG_DROPIN, b"[Service]\nWatchdogSec=6s\nRestartSec=1s\n")
    try:
        agent.check("systemctl daemon-reload && systemctl restart nodeagent")
        assert unit_properties(agent, "WatchdogUSec")["WatchdogUSec"] == "6s"
        stopped = main_pid(agent)
        cursor = journal_cursor(agent)
        agent.check(f"kill -STOP {stopped}")

        wait_until(
            agent,
            f"pid=$(systemctl show -p MainPID --value nodeagent); "
            f"[ $pid != 0 ] && [ $pid != {stopped} ] && systemctl is-active --quiet nodeagent",
            timeout=60,
            what="systemd to replace the stopped daemon",
        )
        messages = [e.get("MESSAGE", "") for e in journal(agent, f"--after-cursor={cursor}")]
        assert any("Watchdog timeout" in m for m in messages), messages
        assert any("with result 'watchdog'" in m for m in messages), messages
        assert agent.run(f"kill -0 {stopped}").rc != 0, "the stopped daemon is still there"
    finally:
        agent.run(f"rm -f {FAST_WATCHDOG_DROPIN} && systemctl daemon-reload")
        agent.run("systemctl restart nodeagent")


def test_journal_entries_carry_the_structured_fields(agent: Machine) -> None:
    pid = str(main_pid(agent))
    entries = [e for e in journal(agent) if e.get("_PID") == pid]
    assert entries, "no journal entries from the running daemon"
    for entry in entries:
        assert entry["SYSLOG_IDENTIFIER"] == "nodeagent", entry
        assert entry["PRIORITY"].isdigit(), entry
    starting = [e for e in entries if e.get("MESSAGE", "").startswith("Starting nodeagent")]
    assert starting, [e.get("MESSAGE") for e in entries]
    entry = starting[0]
    assert entry["PRIORITY"] == "6", entry  # info
    assert entry.get("CODE_FILE", "").endswith(".py"), entry
    assert entry.get("CODE_LINE", "").isdigit(), entry
    assert entry.get("CODE_FUNC"), entry
    # Keyword fields are journal fields: the version it logged is the one dpkg installed.
    installed = agent.check("dpkg-query -W -f='${Version}' nodeagent")
    assert entry.get("VERSION") == installed.rsplit("-", 1)[0], entry
    # ...and journalctl can filter on them.
    assert journal(agent, f"_PID={pid}", "SYSLOG_IDENTIFIER=nodeagent", "PRIORITY=6")


def test_the_guest_runs_cgroup_v2_and_the_agent_has_its_own_cgroup(agent: Machine) -> None:
    assert agent.check("stat -fc %T /sys/fs/cgroup").strip() == "cgroup2fs"
    controllers = agent.check("cat /sys/fs/cgroup/cgroup.controllers").split()
    assert {"cpu", "cpuset", "io", "memory", "pids"} <= set(controllers)
    own = agent.check(f"cat /proc/{main_pid(agent)}/cgroup").strip()
    assert own == "0::/system.slice/nodeagent.service"


def test_the_swap_file_is_active_and_in_fstab(agent: Machine) -> None:
    name, kind, size = agent.check("swapon --show=NAME,TYPE,SIZE --noheadings --bytes").split()
    assert (name, kind) == ("/swapfile", "file")
    assert int(size) == 256 * 1024 * 1024 - 4096  # the first page is the swap header
    assert "/swapfile none swap sw 0 0" in agent.check("cat /etc/fstab").splitlines()
    assert int(agent.check("awk '/^SwapTotal/ {print $2}' /proc/meminfo")) > 0

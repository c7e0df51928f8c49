"""Graceful node shutdown in the guest: logind's drop-in, the delay lock, a cancelled shutdown,
and a real ``systemctl reboot`` with pods in three priority groups."""

from __future__ import annotations

import time

import pytest
from harness.vm import Machine
from harness.vm.guest import journal_cursor, wait_until

pytestmark = pytest.mark.system

DROPIN = "/etc/systemd/logind.conf.d/99-kubelet.conf"
WHY = "Kubelet needs time to handle node shutdown"
REFUSE_POWEROFF = "/run/systemd/system/poweroff.target.d/test-refuse-manual-start.conf"


def inhibit_delay_max_usec(vm: Machine) -> int:
    out = vm.check(
        "busctl get-property org.freedesktop.login1 /org/freedesktop/login1 "
        "org.freedesktop.login1.Manager InhibitDelayMaxUSec"
    )
    kind, value = out.split()
    assert kind == "t", out
    return int(value)


def kubelet_locks(vm: Machine) -> list[str]:
    out = vm.check("systemd-inhibit --list --no-legend --no-pager")
    return [line for line in out.splitlines() if WHY in line]


def test_the_logind_dropin_is_written_and_read_back_and_a_delay_lock_is_held(
    agent: Machine,
) -> None:
    # The shipped config asks for 20 s + 10 s; the guest's logind allows 5 s by default.
    wait_until(agent, f"test -f {DROPIN}", timeout=60, what="the logind drop-in")
    assert agent.check(f"cat {DROPIN}") == (
        "# Kubelet logind override\n[Login]\nInhibitDelayMaxSec=30\n"
    )
    assert agent.check(f"stat -c %a {DROPIN}").strip() == "644"
    wait_until(
        agent,
        "busctl get-property org.freedesktop.login1 /org/freedesktop/login1"
        " org.freedesktop.login1.Manager InhibitDelayMaxUSec | grep -qx 't 30000000'",
        timeout=30,
        what="logind's InhibitDelayMaxUSec raised to 30 s",
    )
    assert inhibit_delay_max_usec(agent) == 30_000_000
    wait_until(
        agent,
        f"systemd-inhibit --list --no-legend --no-pager | grep -q '{WHY}'",
        timeout=30,
        what="the agent's inhibitor lock",
    )
    [lock] = kubelet_locks(agent)
    # WHO UID USER PID COMM WHAT WHY MODE
    assert lock.split()[0] == "kubelet"
    assert "shutdown" in lock.split()
    assert lock.split()[-1] == "delay"
    pid = agent.check("systemctl show -p MainPID --value nodeagent").strip()
    assert pid in lock.split(), (pid, lock)


def test_with_the_agent_stopped_no_lock_holds_shutdown_back(agent: Machine) -> None:
    wait_until(
        agent,
        f"systemd-inhibit --list --no-legend --no-pager | grep -q '{WHY}'",
        timeout=60,
        what="the agent's inhibitor lock",
    )
    agent.check("systemctl stop nodeagent")
    try:
        assert kubelet_locks(agent) == []
        out = agent.check("systemd-inhibit --list --no-legend --no-pager --mode=delay")
        assert "shutdown" not in out, out
    finally:
        agent.check("systemctl start nodeagent")


def test_a_cancelled_shutdown_takes_a_new_lock(agent: Machine) -> None:
    """logind says PrepareForShutdown(false) when the shutdown it delayed cannot start: here
    poweroff.target refuses a manual start (a runtime drop-in; masking it makes logind refuse
    the PowerOff call itself), so once the agent released its lock logind's StartUnit fails
    and it tells everyone the shutdown is off."""
    wait_until(
        agent,
        f"systemd-inhibit --list --no-legend --no-pager | grep -q '{WHY}'",
        timeout=60,
        what="the agent's inhibitor lock",
    )
    [before] = kubelet_locks(agent)
    cursor = journal_cursor(agent)
    agent.put(REFUSE_POWEROFF, b"[Unit]\nRefuseManualStart=yes\n")
    agent.check("systemctl daemon-reload")
    try:
        started = time.monotonic()
        agent.check(
            "busctl call org.freedesktop.login1 /org/freedesktop/login1 "
            "org.freedesktop.login1.Manager PowerOff b false",
            timeout=60,
        )
        wait_until(
            agent,
            f"journalctl -u nodeagent --after-cursor='{cursor}' -o cat"
            " | grep -q 'Shutdown manager detected shutdown cancellation'",
            timeout=60,
            what="the agent seeing the cancellation",
        )
        took = time.monotonic() - started
    finally:
        agent.check(f"rm -f {REFUSE_POWEROFF} && systemctl daemon-reload")
    wait_until(
        agent,
        f"systemd-inhibit --list --no-legend --no-pager | grep -q '{WHY}'",
        timeout=30,
        what="a new inhibitor lock",
    )
    log = agent.check(f"journalctl -u nodeagent --after-cursor='{cursor}' -o cat")
    assert "Shutdown manager detected new shutdown event" in log
    assert log.index("Released the delay inhibitor lock") < log.index(
        "Shutdown manager detected shutdown cancellation"
    )
    [after] = kubelet_locks(agent)
    assert after.split()[-1] == "delay"
    assert took < 30
    del before

"""The real daemon (`nodeagent run` in a subprocess) talking to a NOTIFY_SOCKET, as under
systemd with Type=notify and WatchdogSec. Real time, bounded: about a second per test."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sd_listener import NotifyListener

from nodeagent import cgroups

REPO = Path(__file__).resolve().parents[3]
KLOG_LINE = re.compile(
    r"^(?P<level>[IWE])\d{4} \d\d:\d\d:\d\d\.\d{6} +(?P<pid>\d+) (?P<src>\S+:\d+)\] (?P<rest>.*)$"
)


@pytest.fixture
def daemon(tmp_path: Path, notify_listener: NotifyListener) -> Iterator[subprocess.Popen[bytes]]:
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "LANG": "C.UTF-8",
        "NOTIFY_SOCKET": notify_listener.env_value,
        "WATCHDOG_USEC": "400000",
    }
    with (tmp_path / "stderr.log").open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", "run", *_hermetic_flags(tmp_path)],
            env=environ, cwd=REPO, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
        )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _hermetic_flags(tmp_path: Path) -> list[str]:
    """Keep the daemon off the host's /etc/nodeagent and /var/lib/nodeagent: no kubeconfig,
    so it runs standalone (the kubelet's mode without an API server). Runs on a cgroup v1
    host too (the unit tier's machine may be one)."""
    return [
        *("--root-dir", str(tmp_path / "root"), "--kubeconfig", str(tmp_path / "none")),
        "--fail-cgroupv1=false",
    ]


EMPTY = '""'


def _cgroup_warnings() -> list[str]:
    """What the daemon says on this host's cgroup version: nothing on v2; on v1 (allowed by
    --fail-cgroupv1=false) one warning, logged before anything else."""
    fs_type = cgroups.host_cgroup_fs()
    if fs_type == "cgroup2":
        return []
    return [
        '"cgroup v1 host: running in maintenance mode (kubelet.failCgroupV1 is false); swap is'
        f' NoSwap and per-container PSI is unavailable" cgroup_fs={fs_type or EMPTY}'
    ]


def _standalone_warning(tmp_path: Path) -> str:
    return (
        '"No kubeconfig and no bootstrap kubeconfig: running standalone, the node will not'
        f' register with an API server" kubeconfig={tmp_path / "none"}'
    )


def _receive_until(listener: NotifyListener, wanted: str, deadline: float) -> list[str]:
    seen: list[str] = []
    while not any(m.startswith(wanted) for m in seen):
        seen.append(listener.receive(timeout=max(0.01, deadline - time.monotonic())))
    return seen


def test_daemon_is_ready_pings_the_watchdog_and_stops_on_sigterm(
    daemon: subprocess.Popen[bytes], notify_listener: NotifyListener, tmp_path: Path
) -> None:
    start = time.monotonic()
    before_ready = _receive_until(notify_listener, "READY=1", start + 10)
    assert before_ready[0] == "STATUS=starting"
    assert before_ready[-1] == "READY=1\nSTATUS=running 2 managers"  # standalone + nodeshutdown

    pings: list[float] = []
    while len(pings) < 3:
        assert notify_listener.receive(timeout=2) == "WATCHDOG=1"
        pings.append(time.monotonic())
    assert pings[-1] - pings[0] >= 0.3  # a 0.2 s cadence, not a burst

    daemon.send_signal(signal.SIGTERM)
    sigterm = time.monotonic()
    after = _receive_until(notify_listener, "STOPPING=1", sigterm + 5)
    assert after[-1] == "STOPPING=1\nSTATUS=stopping: signal SIGTERM"
    assert set(after[:-1]) <= {"WATCHDOG=1"}
    assert daemon.wait(timeout=5) == 0
    assert time.monotonic() - sigterm < 5

    lines = (tmp_path / "stderr.log").read_text().splitlines()
    parsed = [m.groupdict() for m in map(KLOG_LINE.match, lines) if m]
    assert len(parsed) == len(lines), lines
    cgroup = _cgroup_warnings()
    rests = [p["rest"] for p in parsed]
    assert [p["level"] for p in parsed if p["level"] != "I"] == ["W"] * (1 + len(cgroup))
    assert rests[: len(cgroup)] == cgroup
    rests = rests[len(cgroup) :]
    assert rests[0] == _standalone_warning(tmp_path)
    assert rests[1].startswith('"Starting nodeagent" version=')
    assert rests[1].endswith(" managers=standalone,nodeshutdown")
    assert '"Started" managers=2' in rests
    assert '"Stopping" reason="signal SIGTERM"' in rests
    assert rests[-1] == '"Stopped" exit_code=0'
    assert {p["pid"] for p in parsed} == {str(daemon.pid)}
    # the agent's lines, and the shutdown manager saying there is nothing to configure
    assert all(
        p["src"].startswith(("agent.py:", "supervisor.py:", "manager.py:"))
        for p in parsed[len(cgroup) :]
    )
    assert '"No graceful configuration specified, node shutdown will be immediate"' in rests


def test_daemon_survives_a_missing_notify_socket(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-dir" / "notify.sock")
    environ = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "NOTIFY_SOCKET": missing,
               "WATCHDOG_USEC": "400000"}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "nodeagent", "run", *_hermetic_flags(tmp_path)],
        env=environ, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not lines or '"Started"' not in lines[-1]:
            line = proc.stderr.readline()
            assert line, f"daemon exited early: {lines}"
            lines.append(line.rstrip("\n"))
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=5)
        lines += proc.stderr.read().splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()

    assert proc.returncode == 0
    cgroup = _cgroup_warnings()
    warnings = [line for line in lines if line.startswith("W")]
    assert [w.split("] ", 1)[1] for w in warnings[: len(cgroup)]] == cgroup
    warnings = warnings[len(cgroup) :]
    assert len(warnings) == 2, lines
    assert warnings[0].endswith("] " + _standalone_warning(tmp_path))
    assert warnings[1].endswith(
        '] "Cannot notify systemd; further notify errors are not logged" '
        f'notify_socket={missing} error="No such file or directory"'
    )
    assert lines[-1].endswith('] "Stopped" exit_code=0')

"""nodeagent.service: the settings operators rely on, and systemd's own parser accepts it (and the
documented example drop-in) without a single warning."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from packaging_tools import REPO, run

UNIT_FILE = REPO / "systemd/nodeagent.service"
EXAMPLE_DROP_IN = REPO / "systemd/examples/10-example.conf"


def _settings(text: str) -> dict[tuple[str, str], list[str]]:
    """(section, key) -> values in order; systemd unit syntax allows repeated keys."""
    settings: dict[tuple[str, str], list[str]] = {}
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        settings.setdefault((section, key.strip()), []).append(value.strip())
    return settings


@pytest.fixture(scope="module")
def unit() -> dict[tuple[str, str], list[str]]:
    return _settings(UNIT_FILE.read_text())


def test_unit_is_a_notify_service_with_a_watchdog(unit: dict[tuple[str, str], list[str]]) -> None:
    assert unit["Service", "Type"] == ["notify"]
    assert unit["Service", "NotifyAccess"] == ["main"]
    assert unit["Service", "WatchdogSec"] == ["30s"]


def test_unit_restarts_forever(unit: dict[tuple[str, str], list[str]]) -> None:
    assert unit["Service", "Restart"] == ["always"]
    assert unit["Service", "RestartSec"] == ["10s"]
    assert unit["Unit", "StartLimitIntervalSec"] == ["0"]


def test_unit_starts_after_network_and_containerd_without_requiring_containerd(
    unit: dict[tuple[str, str], list[str]],
) -> None:
    assert unit["Unit", "After"] == ["network-online.target containerd.service"]
    assert unit["Unit", "Wants"] == ["network-online.target containerd.service"]
    assert ("Unit", "Requires") not in unit
    assert ("Unit", "BindsTo") not in unit


def test_unit_reads_the_environment_files_and_passes_join_flags_then_nodeagent_args(
    unit: dict[tuple[str, str], list[str]],
) -> None:
    assert unit["Service", "EnvironmentFile"] == [
        "-/etc/default/nodeagent",
        "-/etc/sysconfig/nodeagent",
        "-/var/lib/nodeagent/join-flags.env",
    ]
    # The admin's flags come after the ones `nodeagent join` wrote: the last one wins.
    assert unit["Service", "ExecStart"] == [
        "/usr/bin/nodeagent run --config /etc/nodeagent/config.yaml"
        " $NODEAGENT_JOIN_ARGS $NODEAGENT_ARGS"
    ]


def test_unit_stops_the_main_process_first_then_kills_leftover_helpers(
    unit: dict[tuple[str, str], list[str]],
) -> None:
    assert unit["Service", "KillMode"] == ["mixed"]
    assert unit["Service", "TimeoutStopSec"] == ["15s"]
    assert ("Service", "Delegate") not in unit
    assert unit["Install", "WantedBy"] == ["multi-user.target"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("with_drop_in", [False, True], ids=["unit", "unit+example-drop-in"])
def test_systemd_analyze_verify_reports_nothing(
    deb_tree: Path, scratch_dir: Path, with_drop_in: bool
) -> None:
    # A root holding the host's stock units (so targets resolve) with the package on top, so
    # ExecStart's /usr/bin/nodeagent symlink resolves to the packaged venv script.
    shutil.copytree("/lib/systemd/system", scratch_dir / "lib/systemd/system", symlinks=True)
    shutil.copytree(deb_tree, scratch_dir, symlinks=True, dirs_exist_ok=True)
    if with_drop_in:
        drop_ins = scratch_dir / "etc/systemd/system/nodeagent.service.d"
        drop_ins.mkdir(parents=True)
        shutil.copy(EXAMPLE_DROP_IN, drop_ins)

    result = run(
        "systemd-analyze", "verify", "--man=no", f"--root={scratch_dir}", "nodeagent.service"
    )

    assert (result.stdout, result.stderr) == ("", "")

"""What the VM-based pytest tiers (``tests/system``, ``tests/vagrant``) share: the .deb under
test, a per-tier timeout marker, and progress lines printed past pytest's capture."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def newest_deb(dist: Path) -> Path | None:
    """The newest ``nodeagent_*_amd64.deb`` `make packages` put in ``dist``, if any."""
    debs = sorted(dist.glob("nodeagent_*_amd64.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs else None


def deb_under_test(repo: Path, *, make_target: str) -> Path:
    """$NODEAGENT_DEB, or the newest .deb in ``repo``/dist; fails the session if none."""
    if override := os.environ.get("NODEAGENT_DEB"):
        return Path(override).resolve()
    deb = newest_deb(repo / "dist")
    if deb is None:
        pytest.fail(f"no dist/nodeagent_*_amd64.deb: run `make packages` (or `make {make_target}`)")
    return deb


def mark_timeout(items: list[pytest.Item], here: Path, seconds: float) -> None:
    """Give every test collected below ``here`` a timeout of ``seconds``."""
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.timeout(seconds))


def progress(config: pytest.Config, prefix: str, line: str) -> None:
    """Print past pytest's capture: image builds, boots and `vagrant up` take minutes."""
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    capture = config.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(f"[{prefix}] {line}")

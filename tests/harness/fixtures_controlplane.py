"""Pytest fixtures for the real control plane (load with ``pytest_plugins`` or ``-p``).

- ``control_plane_binaries``: builds (or finds cached) etcd and the Kubernetes binaries.
- ``control_plane``: one running control plane per session (per xdist worker).
- ``kubectl``: ``control_plane.kubectl``, run as cluster admin.

When a test that used the control plane fails, the tail of every component's log is attached to
its report as a "control plane logs" section, so the failure output shows what the apiserver,
the controller-manager and the scheduler were saying.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Generator, Iterator
from subprocess import CompletedProcess

import pytest
from harness.build import Binaries, ensure_built
from harness.controlplane import (
    ControlPlane,
    new_run_dir,
    start_control_plane,
    sweep_stale_run_dirs,
)

LOG_TAIL_LINES = 30


@pytest.fixture(scope="session")
def control_plane_binaries() -> Binaries:
    return ensure_built(quiet=True)


@pytest.fixture(scope="session")
def control_plane(
    control_plane_binaries: Binaries, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ControlPlane]:
    sweep_stale_run_dirs()
    root = new_run_dir()
    log_dir = tmp_path_factory.mktemp("control-plane-logs")
    try:
        plane = start_control_plane(binaries=control_plane_binaries, root=root, log_dir=log_dir)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise
    try:
        yield plane
    finally:
        plane.stop()


@pytest.fixture
def kubectl(control_plane: ControlPlane) -> Callable[..., CompletedProcess[str]]:
    return control_plane.kubectl


def log_tails(plane: ControlPlane, lines: int = LOG_TAIL_LINES) -> str:
    parts = [f"--- {proc.name} ({proc.log}) ---\n{proc.tail(lines)}" for proc in plane.procs]
    return "\n".join(parts)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    plane = funcargs.get("control_plane")
    if report.failed and isinstance(plane, ControlPlane):
        report.sections.append(("control plane logs", log_tails(plane)))
    del call
    return report

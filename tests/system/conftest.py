"""Fixtures of the VM tier: the .deb under test, the cached image, one booted and provisioned VM.

The VM is shared by the whole session (a TCG boot costs ~30 s). Tests that change the install
(remove, purge, upgrade) or the service's configuration put it back through
:func:`ensure_installed`, so every test starts from "current .deb installed, service active".
On a failing test the guest console tail and the nodeagent journal are attached to the report.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from harness.controlplane import ControlPlane
from harness.versions import cache_dir
from harness.vm import Image, Machine, deb_depends, ensure_image, recipe_for, tier
from harness.vm.guest import deb_version, ensure_installed, provision
from harness.vm.pods import join_node

REPO = Path(__file__).resolve().parents[2]
TIMINGS: dict[str, float] = {}
# Per test, including the session fixtures the first test pays for: a cold image build (~5 min)
# plus boot and provisioning. Every guest call has its own, tighter timeout.
TEST_TIMEOUT_S = 1200


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tier.mark_timeout(items, Path(__file__).parent, TEST_TIMEOUT_S)
    items[:] = standalone_first(items)


def standalone_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The tests on the standalone agent (the ``agent`` fixture) before every other, each group
    in collection order. Going from a joined node back to a standalone one restarts the agent,
    and back again is a join (TLS bootstrap, a serving certificate): in file order the guest
    went back and forth five times. Module-scoped fixtures are only used by modules without a
    standalone test, so none is set up twice."""
    return sorted(items, key=lambda item: "agent" not in getattr(item, "fixturenames", ()))


def _terminal(config: pytest.Config, line: str) -> None:
    tier.progress(config, "vm", line)


@pytest.fixture(scope="session")
def nodeagent_deb() -> Path:
    """The .deb under test: $NODEAGENT_DEB, or the newest one `make packages` put in dist/."""
    return tier.deb_under_test(REPO, make_target="vm-test")


@pytest.fixture(scope="session")
def previous_deb(nodeagent_deb: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An older package to upgrade from: $NODEAGENT_PREVIOUS_DEB (say, the last release), or
    this tree packaged as release 0 (``0.1.0-0`` before the ``0.1.0-1`` under test)."""
    if override := os.environ.get("NODEAGENT_PREVIOUS_DEB"):
        deb = Path(override).resolve()
    else:
        out = tmp_path_factory.mktemp("previous-deb")
        env = {**os.environ, "NODEAGENT_RELEASE": "0"}
        build = REPO / "packaging" / "build.sh"
        subprocess.run([str(build), str(out)], check=True, capture_output=True, env=env)
        (deb,) = out.glob("nodeagent_*_amd64.deb")
    older, newer = deb_version(deb), deb_version(nodeagent_deb)
    compare = ["dpkg", "--compare-versions", older, "lt", newer]
    if subprocess.run(compare, check=False).returncode != 0:
        pytest.fail(
            f"the previous package {deb.name} ({older}) is not older than {newer}: "
            "packaging/build.sh must honour NODEAGENT_RELEASE (RELEASE=${NODEAGENT_RELEASE:-1})"
        )
    return deb


@pytest.fixture(scope="session")
def vm_image(nodeagent_deb: Path, pytestconfig: pytest.Config) -> Image:
    started = time.monotonic()
    image = ensure_image(
        recipe_for(deb_depends(nodeagent_deb)),
        cache=cache_dir(),
        progress=lambda line: _terminal(pytestconfig, line),
    )
    TIMINGS["image"] = time.monotonic() - started
    return image


@pytest.fixture(scope="session")
def vm(
    vm_image: Image,
    nodeagent_deb: Path,
    tmp_path_factory: pytest.TempPathFactory,
    pytestconfig: pytest.Config,
) -> Iterator[Machine]:
    machine = Machine(image=vm_image, run_dir=tmp_path_factory.mktemp("vm"))
    try:
        machine.start()
        TIMINGS["boot"] = machine.wait_for_boot()
        started = time.monotonic()
        provision(machine, nodeagent_deb)
        TIMINGS["provision"] = time.monotonic() - started
        _terminal(
            pytestconfig,
            "image {image:.0f}s, boot to control-ready {boot:.0f}s, provision {provision:.0f}s"
            .format(**TIMINGS),
        )  # fmt: skip
        yield machine
    finally:
        machine.close()


@pytest.fixture
def agent(vm: Machine, nodeagent_deb: Path) -> Machine:
    """The shared VM, with the .deb under test installed and nodeagent.service active."""
    ensure_installed(vm, nodeagent_deb)
    return vm


@pytest.fixture
def guest_node(vm: Machine, nodeagent_deb: Path, control_plane: ControlPlane) -> Iterator[str]:
    """The guest's agent joined to the host's control plane, its Node Ready, the locally built
    busybox and pause images in its containerd (see ``harness.vm.pods``). Yields the node name;
    afterwards every pod the test left in the ``default`` namespace is deleted at once."""
    node = join_node(vm, nodeagent_deb, control_plane)
    try:
        yield node
    finally:
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", "default", "--grace-period=0", "--force",
            "--wait=false", check=False,
        )  # fmt: skip


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    args = getattr(item, "funcargs", {})
    machine = args.get("vm") or args.get("agent")
    if report.failed and isinstance(machine, Machine):
        report.sections.append(("guest console tail", machine.console_tail(40)))
        try:
            journal = machine.run("journalctl -u nodeagent --no-pager -n 40", timeout=30).stdout
        except Exception as e:  # the VM may be what failed
            journal = f"(journal unavailable: {e})"
        report.sections.append(("guest nodeagent journal", journal))
    del call
    return report

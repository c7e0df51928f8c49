"""Fixtures of the Vagrant tier: the .deb under test and the local box built from the VM image."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from harness.vagrant.box import ensure_box
from harness.versions import cache_dir
from harness.vm import Image, deb_depends, ensure_image, recipe_for, tier

REPO = Path(__file__).resolve().parents[2]
TIMINGS: dict[str, float] = {}
# A cold run builds the VM image (~5 min under load) and the box (a TCG boot plus installs),
# then boots the box under libvirt: the whole test gets 30 min; every step has its own timeout.
TEST_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tier.mark_timeout(items, Path(__file__).parent, TEST_TIMEOUT_S)


def progress(config: pytest.Config, line: str) -> None:
    tier.progress(config, "vagrant", line)


@pytest.fixture(scope="session")
def timings() -> dict[str, float]:
    """Seconds per step (image, box, up, ready, destroy), printed at the end of the test."""
    return TIMINGS


@pytest.fixture(scope="session")
def say(pytestconfig: pytest.Config) -> Callable[[str], None]:
    return lambda line: progress(pytestconfig, line)


@pytest.fixture(scope="session")
def nodeagent_deb() -> Path:
    """The .deb under test: $NODEAGENT_DEB, or the newest one `make packages` put in dist/."""
    return tier.deb_under_test(REPO, make_target="vagrant-test")


@pytest.fixture(scope="session")
def vm_image(nodeagent_deb: Path, pytestconfig: pytest.Config) -> Image:
    started = time.monotonic()
    image = ensure_image(
        recipe_for(deb_depends(nodeagent_deb)),
        cache=cache_dir(),
        progress=lambda line: progress(pytestconfig, line),
    )
    TIMINGS["image"] = time.monotonic() - started
    return image


@pytest.fixture(scope="session")
def vagrant_box(vm_image: Image, pytestconfig: pytest.Config) -> Path:
    started = time.monotonic()
    box = ensure_box(
        vm_image, cache=cache_dir(), progress=lambda line: progress(pytestconfig, line)
    )
    TIMINGS["box"] = time.monotonic() - started
    return box

"""subPath checks against a symlink farm in tmp_path: nothing may leave the volume."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.log import get_logger
from nodeagent.volumemanager import subpath


@pytest.fixture
def farm(tmp_path: Path) -> Path:
    """A volume with links inside and out, and an outside directory with a secret."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")
    volume = tmp_path / "volume"
    volume.mkdir(mode=0o777)
    os.chmod(volume, 0o777)
    (volume / "data").mkdir()
    (volume / "data" / "file").write_text("inside")
    (volume / "to-root").symlink_to("/")
    (volume / "to-outside").symlink_to(outside)
    (volume / "relative-out").symlink_to("../outside")
    (volume / "to-data").symlink_to("data")
    (volume / "data" / "up").symlink_to("../../outside")
    (volume / "dangling").symlink_to("/nonexistent/place")
    return volume


def prepare(volume: Path, sub: str) -> str:
    return subpath.prepare(str(volume), sub, mount_name="v", container="app", log=get_logger("t"))


PREPARE_FAILED = 'failed to prepare subPath for volumeMount "v" of container "app"'
CREATE_FAILED = 'failed to create subPath directory for volumeMount "v" of container "app"'


@pytest.mark.parametrize(
    ("sub", "message"),
    [
        ("to-root", PREPARE_FAILED),
        ("to-outside", PREPARE_FAILED),
        ("relative-out", PREPARE_FAILED),
        ("data/up", PREPARE_FAILED),
        ("to-outside/secret", PREPARE_FAILED),
        ("dangling", PREPARE_FAILED),
        ("to-outside/new-dir", CREATE_FAILED),
        ("data/up/new-dir", CREATE_FAILED),
    ],
)
def test_a_path_leaving_the_volume_is_refused(farm: Path, sub: str, message: str) -> None:
    with pytest.raises(ContainerConfigError) as e:
        prepare(farm, sub)
    assert str(e.value) == message
    assert not (farm.parent / "outside" / "new-dir").exists()


def test_links_that_stay_inside_resolve_to_the_real_path(farm: Path) -> None:
    assert prepare(farm, "to-data") == str((farm / "data").resolve())
    assert prepare(farm, "to-data/file") == str((farm / "data" / "file").resolve())
    assert prepare(farm, "data/./file") == str((farm / "data" / "file").resolve())


def test_a_missing_directory_is_created_with_the_volume_mode(farm: Path) -> None:
    old = os.umask(0o022)
    try:
        host = prepare(farm, "new/deeper")
    finally:
        os.umask(old)
    assert host == str((farm / "new" / "deeper").resolve())
    assert stat.S_IMODE((farm / "new").stat().st_mode) == 0o777
    assert stat.S_IMODE((farm / "new" / "deeper").stat().st_mode) == 0o777


def test_absolute_and_backstep_paths_are_refused_with_the_kubelet_messages() -> None:
    with pytest.raises(ContainerConfigError, match=r"error SubPath `/etc` must not be an absolute"):
        subpath.check_relative("/etc")
    with pytest.raises(
        ContainerConfigError, match=r"unable to provision SubPath `a/../b`: must not contain '..'"
    ):
        subpath.check_relative("a/../b")
    subpath.check_relative("a/..b/c")  # a name that only starts with two dots is fine


def test_sub_path_expr_expands_from_the_environment() -> None:
    env = {"POD_NAME": "web-0", "EMPTY": ""}
    assert subpath.expand_expr("logs/$(POD_NAME)", env) == "logs/web-0"
    assert subpath.expand_expr("$$(POD_NAME)", env) == "$(POD_NAME)"
    with pytest.raises(ContainerConfigError, match="missing value for EMPTY, NOPE"):
        subpath.expand_expr("$(NOPE)/$(EMPTY)", env)


def test_open_within_refuses_a_symlink_swapped_in_after_the_check(farm: Path) -> None:
    resolved = prepare(farm, "data")
    (farm / "data").rename(farm / "data-moved")
    (farm / "data").symlink_to("/")  # the race the bind mount from a descriptor closes
    with pytest.raises(subpath.SubPathEscape):
        subpath.open_within(str(farm), resolved)


def test_open_within_opens_the_checked_path(farm: Path) -> None:
    fd = subpath.open_within(str(farm), str((farm / "data" / "file").resolve()))
    try:
        assert subpath.same_file(str(farm / "data" / "file"), fd)
    finally:
        os.close(fd)

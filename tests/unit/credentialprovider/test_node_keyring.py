"""The node's own credential file, found where the kubelet looks (root dir, working
directory, ``$HOME/.docker``, ``/.docker``; then ``.dockercfg``) and read every 5 minutes."""

from __future__ import annotations

import base64
import json
import logging
from pathlib import Path

import pytest

from nodeagent.credentialprovider.nodekeyring import NodeKeyring, search_paths
from nodeagent.log.facade import settings as log_settings

IMAGE = "registry.example.com/team/app"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def config_json(password: str, registry: str = "registry.example.com") -> str:
    auth = base64.b64encode(f"node:{password}".encode()).decode()
    return json.dumps({"auths": {registry: {"auth": auth}}})


@pytest.fixture
def dirs(tmp_path: Path) -> dict[str, Path]:
    made = {name: tmp_path / name for name in ("root", "cwd", "home")}
    for path in made.values():
        path.mkdir()
    (made["home"] / ".docker").mkdir()
    return made


def keyring(dirs: dict[str, Path], clock: Clock | None = None) -> NodeKeyring:
    return NodeKeyring(
        root_dir=str(dirs["root"]),
        monotonic=clock or Clock(),
        environ={"HOME": str(dirs["home"])},
        cwd=lambda: str(dirs["cwd"]),
    )


async def passwords(ring: NodeKeyring, image: str = IMAGE) -> list[str]:
    return [c.auth.password for c in await ring.lookup(image)]


def test_the_kubelets_search_order() -> None:
    json_paths, cfg_paths = search_paths("/var/lib/kubelet", cwd="/", home="/root")
    assert json_paths == [
        "/var/lib/kubelet/config.json",
        "/config.json",
        "/root/.docker/config.json",
        "/.docker/config.json",
    ]
    assert cfg_paths == [
        "/var/lib/kubelet/.dockercfg",
        "/.dockercfg",
        "/root/.dockercfg",
        "/.dockercfg",
    ]


async def test_the_root_dirs_config_json_comes_first(dirs: dict[str, Path]) -> None:
    (dirs["root"] / "config.json").write_text(config_json("from-root"))
    (dirs["home"] / ".docker" / "config.json").write_text(config_json("from-home"))
    [found] = await keyring(dirs).lookup(IMAGE)
    assert (found.auth.username, found.auth.password) == ("node", "from-root")
    assert found.source is None  # node-wide: an image pulled with it serves every pod


async def test_a_file_that_does_not_decode_is_passed_over(dirs: dict[str, Path]) -> None:
    (dirs["root"] / "config.json").write_text("{not json")
    (dirs["cwd"] / "config.json").write_text(json.dumps({"auths": {"r": {"auth": "%%"}}}))
    (dirs["home"] / ".docker" / "config.json").write_text(config_json("from-home"))
    assert await passwords(keyring(dirs)) == ["from-home"]


async def test_dockercfg_only_when_no_config_json_reads(dirs: dict[str, Path]) -> None:
    legacy = {"registry.example.com": {"username": "node", "password": "legacy"}}
    (dirs["home"] / ".dockercfg").write_text(json.dumps(legacy))
    ring = keyring(dirs)
    assert await passwords(ring) == ["legacy"]
    (dirs["home"] / ".docker" / "config.json").write_text(config_json("json"))
    ring = keyring(dirs)
    assert await passwords(ring) == ["json"]


async def test_a_config_json_without_auths_ends_the_search(dirs: dict[str, Path]) -> None:
    """As the kubelet: it decodes (as an empty keyring), so ``.dockercfg`` is not read."""
    (dirs["root"] / "config.json").write_text(json.dumps({"credsStore": "desktop"}))
    (dirs["home"] / ".dockercfg").write_text(json.dumps({"registry.example.com": {}}))
    assert await keyring(dirs).lookup(IMAGE) == []


async def test_other_registries_get_nothing(dirs: dict[str, Path]) -> None:
    (dirs["root"] / "config.json").write_text(config_json("pw", registry="other.example.com"))
    assert await keyring(dirs).lookup(IMAGE) == []


async def test_the_files_are_read_again_after_five_minutes(dirs: dict[str, Path]) -> None:
    clock = Clock()
    ring = keyring(dirs, clock)
    assert await ring.lookup(IMAGE) == []  # nothing yet: remembered too
    (dirs["root"] / "config.json").write_text(config_json("new"))
    clock.now = 299.0
    assert await ring.lookup(IMAGE) == []
    assert ring.reads == 1
    clock.now = 300.0
    assert await passwords(ring) == ["new"]
    assert ring.reads == 2


async def test_no_credential_reaches_the_log_at_v10(
    dirs: dict[str, Path], caplog: pytest.LogCaptureFixture
) -> None:
    (dirs["root"] / "config.json").write_text("{broken " + config_json("s3cret-pw"))
    (dirs["cwd"] / "config.json").write_text(config_json("s3cret-pw"))
    caplog.set_level(logging.DEBUG)
    log_settings.verbosity = 10
    try:
        await keyring(dirs).lookup(IMAGE)
    finally:
        log_settings.verbosity = 0
    text = caplog.text + " ".join(str(getattr(r, "__dict__", "")) for r in caplog.records)
    assert "found valid config.json" in caplog.text
    assert "s3cret-pw" not in text
    assert base64.b64encode(b"node:s3cret-pw").decode() not in text

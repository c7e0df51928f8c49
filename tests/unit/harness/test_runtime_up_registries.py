"""`make up`'s runtime wiring of its two registries, over recording stand-ins for the harness
modules: the mirror registry without a login, the README's private registry with
``PRIVATE_LOGIN`` holding ``private/busybox:latest``, both plain HTTP for containerd, both in
the record `make down` reads, both stopped by it (also when the start fails half-way)."""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harness import runtime_up
from harness.runtime_up import PRIVATE_LOGIN


@dataclass
class FakeRegistry:
    base_dir: Path
    port: int
    login: tuple[str, str] | None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def image(self, name: str) -> str:
        return f"{self.host}/{name}"


@dataclass
class Calls:
    started: list[FakeRegistry] = field(default_factory=list)
    stopped: list[Path] = field(default_factory=list)
    pushed: list[tuple[str, str, tuple[str, str] | None]] = field(default_factory=list)
    containerd: list[dict[str, Any]] = field(default_factory=list)
    fail_containerd: bool = False


def fake_modules(calls: Calls) -> dict[str, Any]:
    def start_registry(
        base: Path,
        *,
        log_path: Path,
        detached: bool,
        login: tuple[str, str] | None = None,
    ) -> FakeRegistry:
        assert detached
        registry = FakeRegistry(base_dir=base, port=5000 + len(calls.started), login=login)
        calls.started.append(registry)
        return registry

    def push_image(
        host: str, layout: Path, ref: str, *, login: tuple[str, str] | None = None
    ) -> str:
        calls.pushed.append((host, ref, login))
        return "sha256:x"

    def start_containerd(config: types.SimpleNamespace, *, detached: bool) -> Any:
        if calls.fail_containerd:
            raise RuntimeError("containerd did not start")
        calls.containerd.append(vars(config))
        return types.SimpleNamespace(
            pid=42, endpoint="unix:///c.sock", log_path="c.log", import_image=lambda t: None
        )

    image = types.SimpleNamespace(layout=Path("/layout"), tarball=Path("/t.tar"), names=["b"])
    return {
        "netsafety": types.SimpleNamespace(
            hold_unreachable=lambda cidr, holder: False, release_unreachable=lambda c, holder: None
        ),
        "cni": types.SimpleNamespace(
            CniNetwork=lambda conf_dir, ipam_dir: types.SimpleNamespace(
                conf_dir=conf_dir, ipam_dir=ipam_dir
            ),
            read_ip_forward=lambda: "1",
            check_subnet_free=lambda net: None,
            write_conflist=lambda net: None,
            remove_network=lambda net, ip_forward_before: None,
        ),
        "registry": types.SimpleNamespace(
            start_registry=start_registry,
            push_image=push_image,
            stop_registry=calls.stopped.append,
        ),
        "containerd": types.SimpleNamespace(
            ContainerdConfig=types.SimpleNamespace,
            start_containerd=start_containerd,
            stop_containerd=lambda base: None,
        ),
        "images.build": types.SimpleNamespace(build_images=lambda: {"busybox": image}),
        "mirrors": types.SimpleNamespace(
            push_stock=lambda host, layouts: ["docker.io/library/busybox"],
            MIRRORED_REGISTRIES=("docker.io",),
        ),
    }


def test_make_up_runs_a_private_registry_with_the_readme_login_and_image(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    calls = Calls()
    mods = fake_modules(calls)

    record = runtime_up._start(mods, directory=tmp_path, holder=1)

    mirror, private = calls.started
    assert mirror.login is None
    assert private.login == PRIVATE_LOGIN == ("demo", "demo-password")
    assert private.base_dir == tmp_path / "runtime" / "registry-private"
    [config] = calls.containerd
    assert set(config["plain_http_registries"]) == {mirror.host, private.host}
    assert config["mirror_registry"] == mirror.host  # the private one mirrors nothing
    assert (private.host, "private/busybox:latest", PRIVATE_LOGIN) in calls.pushed
    assert all(login is None for host, _, login in calls.pushed if host == mirror.host)
    assert record["private_registry"] == private.host
    assert record["private_registry_dir"] == str(private.base_dir)
    # The README's "private registry on ..." line, where the user finds $REG.
    assert f">>> private registry on {private.url} (login demo / demo-password)" in (
        capsys.readouterr().out
    )

    runtime_up.stop(record, mods=mods)
    assert calls.stopped == [private.base_dir, mirror.base_dir]


def test_a_failed_start_stops_the_registries_it_started(tmp_path: Path) -> None:
    calls = Calls(fail_containerd=True)
    with pytest.raises(RuntimeError, match="containerd did not start"):
        runtime_up._start(fake_modules(calls), directory=tmp_path, holder=1)
    assert sorted(calls.stopped) == sorted(r.base_dir for r in calls.started)
    assert len(calls.stopped) == 2

"""The harness's registry mirrors: which name a pull asks the local registry for."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from harness import mirrors


@pytest.mark.parametrize(
    ("name", "full"),
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("library/busybox", "docker.io/library/busybox:latest"),
        ("foo/bar:1", "docker.io/foo/bar:1"),
        ("registry.k8s.io/pause:3.10.2", "registry.k8s.io/pause:3.10.2"),
        (
            "registry.k8s.io/e2e-test-images/agnhost",
            "registry.k8s.io/e2e-test-images/agnhost:latest",
        ),
        ("127.0.0.1:5000/busybox", "127.0.0.1:5000/busybox:latest"),
        ("localhost/pause", "localhost/pause:latest"),
        ("busybox@sha256:" + "0" * 64, "docker.io/library/busybox@sha256:" + "0" * 64),
    ],
)
def test_normalize_as_the_cri_does(name: str, full: str) -> None:
    assert mirrors.normalize(name) == full


def test_a_name_of_a_registry_not_mirrored_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"'example\.org' is not mirrored"):
        mirrors.mirror_reference("example.org/x:1")


def test_hosts_toml_sends_every_request_to_the_local_registry_under_the_upstream_prefix(
    tmp_path: Path,
) -> None:
    written = mirrors.write_mirrors(tmp_path, "127.0.0.1:5000", ["docker.io", "registry.k8s.io"])
    assert [p.relative_to(tmp_path).as_posix() for p in written] == [
        "docker.io/hosts.toml",
        "registry.k8s.io/hosts.toml",
    ]
    parsed = tomllib.loads(written[0].read_text())
    local = "http://127.0.0.1:5000/v2/docker.io"
    assert parsed["server"] == local  # the fallback is local too: never the upstream
    assert parsed["override_path"] is True
    # containerd 1.6 ignores a file without a [host] table (and then pulls from upstream)
    assert parsed["host"] == {local: {"capabilities": ["pull", "resolve"], "override_path": True}}


def test_stock_names_are_all_mirrored() -> None:
    for names in mirrors.STOCK_NAMES.values():
        for name in names:
            assert mirrors.mirror_reference(name) == name

"""The kubelet's failCgroupV1 gate: a v1 host is refused by default, naming the field and the
fix; with the gate off the daemon starts and warns."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent import cgroups
from nodeagent.__main__ import main

V1_MOUNTS = """\
sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0
tmpfs /sys/fs/cgroup tmpfs ro,nosuid,nodev,noexec,mode=755 0 0
cgroup2 /sys/fs/cgroup/unified cgroup2 rw,nosuid,nodev,noexec,relatime 0 0
cgroup /sys/fs/cgroup/memory cgroup rw,nosuid,nodev,noexec,relatime,memory 0 0
"""
V2_MOUNTS = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate 0 0\n"


def test_the_type_mounted_at_sys_fs_cgroup_tells_the_version() -> None:
    assert cgroups.mounted_type(V1_MOUNTS) == "tmpfs"  # hybrid: the unified mount is below it
    assert cgroups.mounted_type(V2_MOUNTS) == "cgroup2"
    assert cgroups.mounted_type("") is None


def test_only_a_v1_host_with_the_gate_on_is_refused() -> None:
    assert cgroups.cgroup_v1_refusal(cgroup_v2=True, fail_cgroup_v1=True, fs_type="cgroup2") is None
    assert cgroups.cgroup_v1_refusal(cgroup_v2=False, fail_cgroup_v1=False, fs_type="tmpfs") is None
    refusal = cgroups.cgroup_v1_refusal(cgroup_v2=False, fail_cgroup_v1=True, fs_type="tmpfs")
    assert refusal is not None
    assert refusal.startswith("kubelet.failCgroupV1 (true): this host uses cgroup v1")
    assert cgroups.CGROUP_V1_REFUSED in refusal
    assert "kubelet.failCgroupV1: false" in refusal


def test_run_on_a_v1_host_exits_1_before_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(V1_MOUNTS)
    monkeypatch.setattr(cgroups, "MOUNTS", mounts)

    code = main(["run", "--root-dir", str(tmp_path / "root"), "--kubeconfig", str(tmp_path / "x")])

    err = capsys.readouterr().err
    assert code == 1
    assert (
        "nodeagent: kubelet.failCgroupV1 (true): this host uses cgroup v1 (/sys/fs/cgroup is tmpfs"
        in err
    )
    assert "Starting" not in err

"""The cgroup driver with the real containerd of this machine (Debian 12's 1.6.20, runc with
``SystemdCgroup = false``, as the harness configures it where systemd is not PID 1).

containerd 1.6 does not implement CRI ``RuntimeConfig``, which the kubelet 1.34+ asks; the
kubelet then trusts its own ``cgroupDriver``. The agent reads containerd's configuration from a
verbose ``Status`` instead and follows it, so even a node configured with the wrong driver
puts its pods where containerd expects them: the pod's cgroup is the cgroupfs one, in the
host's cgroup filesystem, with the container's processes in it. (A runtime that answers
``RuntimeConfig`` is covered by the unit tests over a real gRPC server: no runtime on this
machine answers it.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import agent_node, create_pods, pods_in, wait_ready
from harness.cgroups import CGROUP_FS
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until

from nodeagent.kuberuntime.cgroupdriver import FROM_CONFIG_MESSAGE, MISMATCH_MESSAGE

pytestmark = pytest.mark.integration

SETTING = "containerd.runtimes.runc.options.SystemdCgroup=false"


def pod_cgroup_dirs(cgroup_root: str, uid: str) -> list[Path]:
    """The pod's cgroupfs-driver directory in every hierarchy it exists in (v1 or v2)."""
    relative = f"{cgroup_root}/kubepods/besteffort/pod{uid}"
    candidates = [CGROUP_FS / relative, *CGROUP_FS.glob(f"*/{relative}")]
    return [p for p in candidates if p.is_dir()]


def lines_with(text: str, message: str) -> list[str]:
    return [line for line in text.splitlines() if message in line]


@pytest.mark.parametrize(
    "configured", ["cgroupfs", "systemd"], ids=["configured to match", "configured wrong"]
)
async def test_the_pod_cgroup_follows_containerds_configured_driver(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, configured: str
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        settings: dict[str, Any] = yaml.safe_load(node.config.read_text())
        settings["kubelet"]["cgroupDriver"] = configured
        node.config.write_text(yaml.safe_dump(settings))
        node.start()
        await wait_ready(control_plane, node, status="True", within=60)

        log = node.log_text()
        [line] = lines_with(log, FROM_CONFIG_MESSAGE) or [node.log_tail()]
        assert SETTING in line and "cgroup_driver=cgroupfs" in line, line
        mismatch = lines_with(log, MISMATCH_MESSAGE)
        if configured == "cgroupfs":
            assert mismatch == []
        else:
            [warning] = mismatch
            assert "configured=systemd" in warning and "runtime=cgroupfs" in warning, warning

        create_pods(control_plane, node, ["web"])

        def running_uid() -> str | None:
            [pod] = pods_in(control_plane, node.namespace) or [{}]
            if pod.get("status", {}).get("phase") != "Running":
                return None
            return str(pod["metadata"]["uid"])

        uid = await until("the pod Running", running_uid, within=60, every=0.5)
        dirs = pod_cgroup_dirs(node.cgroup_root, uid)
        assert dirs, f"no {node.cgroup_root}/kubepods/besteffort/pod{uid} under {CGROUP_FS}"
        # The container's processes are in it: a child cgroup's cgroup.procs names a pid.
        pids = [
            pid
            for d in dirs
            for child in d.iterdir()
            if child.is_dir() and (child / "cgroup.procs").exists()
            for pid in (child / "cgroup.procs").read_text().split()
        ]
        assert pids, [str(d) for d in dirs]

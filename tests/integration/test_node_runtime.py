"""The node becomes Ready once its container runtime answers over CRI (real containerd).

`nodeagent run` as a process with only a bootstrap token (TLS bootstrap gets its client
certificate) and the test containerd as its runtime: the Node turns Ready with the kubelet's
reason and message,
reports ``containerRuntimeVersion`` as ``containerd://<version>``, and `kubectl get nodes`
shows it Ready.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.controlplane_args import free_port
from harness.fixtures_runtime import RuntimeEnv

pytestmark = pytest.mark.integration


def _ready(control_plane: ControlPlane, name: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    got = control_plane.kubectl("get", "node", name, "-o", "json", check=False)
    if got.returncode != 0:
        return None, {}
    node: dict[str, Any] = json.loads(got.stdout)
    conditions = {c["type"]: c for c in node["status"].get("conditions", [])}
    return node, conditions.get("Ready", {})


def test_from_a_bootstrap_token_the_node_is_ready_when_containerd_answers(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    name = "runtime-ready"
    bootstrap = control_plane.bootstrap_kubeconfig(
        control_plane.bootstrap_token(), name="bootstrap-runtime-ready"
    )
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": str(tmp_path / "root" / "kubeconfig"),
                    "bootstrapKubeconfig": str(bootstrap),
                    "hostnameOverride": name,
                    "rootDir": str(tmp_path / "root"),
                },
                # failCgroupV1: this host may be cgroup v1
                "kubelet": {
                    "containerRuntimeEndpoint": containerd.endpoint,
                    "failCgroupV1": False,
                    "port": free_port(),  # a `make up` node may hold 10250
                    "healthzPort": free_port(),
                },
                "proxy": {"enabled": False},  # the host's root netns is not this test's
            }
        )
    )
    log = tmp_path / "nodeagent.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "nodeagent", "run", "--config", str(config)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        node, ready = _ready(control_plane, name)
        while ready.get("status") != "True":
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"not Ready: {ready}\n{log.read_text()[-3000:]}"
            time.sleep(1)
            node, ready = _ready(control_plane, name)
        listing = control_plane.kubectl("get", "nodes", name, "--no-headers").stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=20)
        control_plane.kubectl("delete", "node", name, "--ignore-not-found", check=False)

    assert code == 0, log.read_text()[-3000:]
    assert node is not None
    assert ready["reason"] == "KubeletReady"
    assert ready["message"] == "kubelet is posting ready status"
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.")
    assert listing.split()[:2] == [name, "Ready"]
    assert "Container runtime is ready" in log.read_text()
    # The credentials came from TLS bootstrap, written 0600 under the root dir.
    issued = tmp_path / "root" / "pki" / "kubelet-client-current.pem"
    assert issued.exists() and issued.stat().st_mode & 0o777 == 0o600

"""The node half of `make up`: nodeagent itself, registered with the node's client certificate.

nodeagent runs detached from the project's venv with a config written under ``<up dir>/node/``
(root dir, kubeconfig, the `up` containerd's endpoint, the cluster DNS) and its log in
``<up dir>/logs/nodeagent.log``. ``ensure`` waits until the Node object exists, so `up` never
reports a node that is not there; ``stop`` sends SIGTERM (the agent stops in order).
"""

from __future__ import annotations

import json
import socket
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from harness import processes
from harness.controlplane import ControlPlane
from harness.versions import load_versions

REGISTER_TIMEOUT = 60.0


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def node_name() -> str:
    """The kubelet's default: the host name, lower-cased."""
    return socket.gethostname().split(".")[0].lower()


def _config(directory: Path, *, kubeconfig: Path, runtime_endpoint: str | None) -> Path:
    versions = load_versions()
    kubelet: dict[str, Any] = {
        "clusterDNS": [versions.cluster_dns_ip],
        "clusterDomain": "cluster.local",
        # This machine may be a cgroup v1 host without systemd as PID 1 (see the CRI issue).
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
    }
    if runtime_endpoint:
        kubelet["containerRuntimeEndpoint"] = runtime_endpoint
    config = {
        "apiVersion": "nodeagent.io/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "node": {"kubeconfig": str(kubeconfig), "rootDir": str(directory / "root")},
        "kubelet": kubelet,
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _alive(record: dict[str, Any] | None) -> bool:
    if not record:
        return False
    return processes.is_running(record["pid"], binary=record["argv0"])


def ensure(
    record: dict[str, Any] | None,
    *,
    plane: ControlPlane,
    directory: Path,
    runtime_endpoint: str | None,
) -> dict[str, Any]:
    if record and _alive(record):
        say(f"nodeagent already running as node {record['name']} (pid {record['pid']})")
        return record
    stop(record)
    name = node_name()
    node_dir = directory / "node"
    node_dir.mkdir(parents=True, exist_ok=True)
    config = _config(
        node_dir, kubeconfig=plane.node_kubeconfig(name), runtime_endpoint=runtime_endpoint
    )
    argv = [sys.executable, "-m", "nodeagent", "run", "--config", str(config)]
    proc = processes.start(
        name="nodeagent", argv=argv, log=directory / "logs" / "nodeagent.log", detached=True
    )
    record = {"name": name, "pid": proc.pid, "argv0": argv[0], "config": str(config)}
    say(f"nodeagent started as node {name} (pid {proc.pid}, log {proc.log})")
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while True:
        got = plane.kubectl("get", "node", name, "-o", "json", check=False)
        if got.returncode == 0:
            break
        if not proc.alive() or time.monotonic() > deadline:
            stop(record)
            raise RuntimeError(f"nodeagent did not register node {name}:\n{proc.tail()}")
        time.sleep(0.5)
    ready = {c["type"]: c for c in json.loads(got.stdout)["status"].get("conditions", [])}.get(
        "Ready", {}
    )
    say(
        f"node {name} registered; Ready={ready.get('status', 'Unknown')}"
        + (f" ({ready.get('message')})" if ready.get("status") != "True" else "")
    )
    return record


def stop(record: dict[str, Any] | None) -> None:
    if record:
        processes.stop_pid(record["pid"], binary=record["argv0"], timeout=10.0)

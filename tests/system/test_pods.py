"""Pods on the guest's node, created on the host's control plane: the VM tier runs real pods.

The images come from the host (``harness.vm.pods.load_images``); the pod network is the bridge
network provisioning writes. What a user sees: the pod's phase and exit code from the apiserver,
its log file on the node, its address from the pod network, and nothing left after deletion.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.pods import pod_manifest, wait_pod

pytestmark = pytest.mark.system


def _apply(control_plane: ControlPlane, manifest: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def _phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def test_a_pod_runs_to_completion_on_the_guest_node(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    word = secrets.token_hex(4)
    name = f"once-{word}"
    manifest = pod_manifest(name, command=["sh", "-c", f"echo hello {word}; exit 3"])
    _apply(control_plane, manifest)

    pod = wait_pod(control_plane, name, lambda p: _phase(p) == "Failed", what="phase Failed")
    (status,) = pod["status"]["containerStatuses"]
    assert status["state"]["terminated"]["exitCode"] == 3
    assert status["state"]["terminated"]["reason"] == "Error"
    assert pod["spec"]["nodeName"] == guest_node

    # The container's output is in the node's log file for it, in the CRI log format.
    uid = pod["metadata"]["uid"]
    log = vm.check(f"cat /var/log/pods/default_{name}_{uid}/app/0.log")
    assert f"stdout F hello {word}" in log


def _pod_container_ids(vm: Machine, name: str) -> list[str]:
    """IDs of the sandbox and containers containerd holds for pod ``name``."""
    selector = f'labels."io.kubernetes.pod.name"=={name}'
    out = vm.check(["ctr", "-n", "k8s.io", "containers", "list", "--quiet", selector])
    return out.split()


def _running_tasks(vm: Machine) -> set[str]:
    out = vm.check(["ctr", "-n", "k8s.io", "tasks", "list"])
    return {line.split()[0] for line in out.splitlines()[1:] if line.split()[-1:] == ["RUNNING"]}


def test_a_long_running_pod_gets_an_address_and_stops_when_deleted(
    vm: Machine, control_plane: ControlPlane, guest_node: str
) -> None:
    del guest_node
    name = f"sleeper-{secrets.token_hex(4)}"
    _apply(control_plane, pod_manifest(name))
    pod = wait_pod(control_plane, name, lambda p: _phase(p) == "Running", what="phase Running")
    assert pod["status"]["podIP"].startswith("10.244.0."), pod["status"]
    ids = _pod_container_ids(vm, name)
    assert len(ids) == 2, ids  # the sandbox and the app container
    assert set(ids) <= _running_tasks(vm)

    control_plane.kubectl("delete", "pod", name, "--wait=true", "--timeout=60s")
    pods = json.loads(control_plane.kubectl("get", "pods", "-o", "json").stdout)["items"]
    assert name not in {p["metadata"]["name"] for p in pods}
    # The API object goes only after the node confirmed the containers stopped.
    assert not set(ids) & _running_tasks(vm)

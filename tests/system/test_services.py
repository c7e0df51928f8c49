"""The packaged daemon's service proxy on a real systemd host: a Service created on the host's
control plane is programmed into the guest's nftables and a connection to its ClusterIP from
the guest reaches the endpoint; deleting it removes it from the table."""

from __future__ import annotations

import json
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harness.controlplane import ControlPlane
from harness.vm import Machine
from harness.vm.guest import GUEST_DIR, wait_until
from harness.vm.rootfs import GUEST_IP
from test_registration import NODE, _provision_node, node_kubeconfig  # noqa: F401 - fixture

pytestmark = pytest.mark.system

BACKEND_PORT = 18080
BACKEND_UNIT = "na-test-backend"

# Stdlib only: connect, send a request, print the answer's body or the error's name.
FETCH = textwrap.dedent("""\
    import socket, sys
    try:
        s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3)
        s.sendall(b"GET /answer.txt HTTP/1.0\\r\\n\\r\\n")
        data = b""
        while chunk := s.recv(4096):
            data += chunk
        print(data.split(b"\\r\\n\\r\\n", 1)[-1].decode().strip())
    except OSError as e:
        print(type(e).__name__)
""")


@pytest.fixture
def backend(vm: Machine) -> Iterator[str]:
    """An HTTP server in the guest on its own address, serving one file with a random word."""
    word = secrets.token_hex(4)
    vm.check(["mkdir", "-p", f"{GUEST_DIR}/www"])
    vm.put(f"{GUEST_DIR}/www/answer.txt", f"{word}\n".encode())
    vm.put(f"{GUEST_DIR}/fetch.py", FETCH.encode())
    vm.check(
        ["systemd-run", f"--unit={BACKEND_UNIT}", "python3", "-m", "http.server",
         str(BACKEND_PORT), "--directory", f"{GUEST_DIR}/www"]
    )  # fmt: skip
    try:
        wait_until(
            vm,
            f"python3 {GUEST_DIR}/fetch.py {GUEST_IP} {BACKEND_PORT} | grep -qx {word}",
            timeout=30,
            what="the backend to answer on its own address",
        )
        yield word
    finally:
        vm.run(f"systemctl stop {BACKEND_UNIT}; systemctl reset-failed {BACKEND_UNIT}", timeout=30)


def _service_objects(namespace: str) -> list[dict[str, Any]]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": BACKEND_PORT}]},
    }
    endpoints = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "web-guest",
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": "web"},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": BACKEND_PORT, "protocol": "TCP"}],
        "endpoints": [{"addresses": [GUEST_IP], "nodeName": NODE, "conditions": {"ready": True}}],
    }
    return [service, endpoints]


def test_a_service_created_in_the_cluster_is_reachable_through_its_cluster_ip_in_the_guest(
    vm: Machine,
    nodeagent_deb: Path,
    control_plane: ControlPlane,
    node_kubeconfig: dict[str, Any],  # noqa: F811 - the fixture imported above
    backend: str,
) -> None:
    _provision_node(vm, nodeagent_deb, control_plane)
    namespace = f"svc-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", namespace)
    try:
        for obj in _service_objects(namespace):
            control_plane.apply(obj)
        got = control_plane.kubectl("-n", namespace, "get", "service", "web", "-o", "json")
        cluster_ip = json.loads(got.stdout)["spec"]["clusterIP"]

        wait_until(
            vm,
            f"python3 {GUEST_DIR}/fetch.py {cluster_ip} 80 | grep -qx {backend}",
            timeout=90,
            what=f"the ClusterIP {cluster_ip}:80 to reach the backend",
        )
        table = vm.check(["nft", "list", "table", "ip", "nodeagent"])
        assert f"{cluster_ip} . tcp . 80" in table
        listing = vm.check(["nodeagent", "proxy", "services"])
        assert f"{namespace}/web:http" in listing and f"{GUEST_IP}:{BACKEND_PORT}" in listing

        control_plane.kubectl("-n", namespace, "delete", "service", "web")
        wait_until(
            vm,
            f"! nft list table ip nodeagent | grep -q '{cluster_ip}'",
            timeout=60,
            what=f"every trace of {cluster_ip} to leave the guest's table",
        )
        answer = vm.check(["python3", f"{GUEST_DIR}/fetch.py", cluster_ip, "80"]).strip()
        assert answer != backend
    finally:
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)

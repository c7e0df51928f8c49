"""The test control plane is the real thing: scheduling, Node authorizer, NodeRestriction, TLS
bootstrap auto-approval."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from harness import kubeconfig
from harness.controlplane import ControlPlane
from harness.pki import CertPair

pytestmark = pytest.mark.integration

WAIT_SECONDS = 60.0


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def wait_until(probe: Callable[[], Any], *, what: str, timeout: float = WAIT_SECONDS) -> Any:
    """Poll the real cluster (it runs in other processes) until `probe` is truthy."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


def ready_node(name: str, *, labels: dict[str, str]) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    resources = {"cpu": "4", "memory": "8Gi", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {
            "capacity": resources,
            "allocatable": resources,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "created by the test",
                    "lastHeartbeatTime": now,
                    "lastTransitionTime": now,
                }
            ],
        },
    }


@pytest.fixture
def make_node(control_plane: ControlPlane) -> Iterator[Callable[..., str]]:
    created: list[str] = []

    def make(prefix: str = "node", *, labels: dict[str, str] | None = None) -> str:
        name = unique(prefix)
        control_plane.kubectl(
            "create", "-f", "-", input=json.dumps(ready_node(name, labels=labels or {}))
        )
        created.append(name)
        return name

    yield make
    for name in created:
        control_plane.kubectl("delete", "node", name, "--ignore-not-found", "--wait=false")


def test_apiserver_reports_ready(control_plane: ControlPlane) -> None:
    done = control_plane.kubectl("get", "--raw", "/readyz")
    assert done.stdout.strip() == "ok"


def test_scheduler_binds_a_pod_to_the_ready_node_the_test_created(
    control_plane: ControlPlane, make_node: Callable[..., str]
) -> None:
    marker = unique("sched")
    node = make_node("sched", labels={"nodeagent.test/marker": marker})
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": marker, "namespace": "default"},
        "spec": {
            "nodeSelector": {"nodeagent.test/marker": marker},
            "containers": [{"name": "c", "image": "localhost/pause:latest"}],
        },
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(pod))
    try:
        bound = wait_until(
            lambda: control_plane.get_json("-n", "default", "pod", marker)["spec"].get("nodeName"),
            what="the pod to be bound",
        )
        assert bound == node
        events = control_plane.get_json(
            "-n", "default", "events", f"--field-selector=involvedObject.name={marker}"
        )
        scheduled = [e for e in events["items"] if e["reason"] == "Scheduled"]
        assert scheduled, events
        assert scheduled[0]["reportingComponent"] == "default-scheduler"
        assert f"Successfully assigned default/{marker} to {node}" in scheduled[0]["message"]
    finally:
        control_plane.kubectl(
            "-n", "default", "delete", "pod", marker, "--grace-period=0", "--force", check=False
        )


def test_node_client_cert_reads_its_own_node_and_no_other(
    control_plane: ControlPlane, make_node: Callable[..., str]
) -> None:
    own, other = make_node("own"), make_node("other")
    config = control_plane.node_kubeconfig(own)

    whoami = control_plane.kubectl("auth", "whoami", "-o", "json", kubeconfig_path=config)
    user = json.loads(whoami.stdout)["status"]["userInfo"]
    assert user["username"] == f"system:node:{own}"
    assert "system:nodes" in user["groups"]

    got = control_plane.kubectl("get", "node", own, "-o", "json", kubeconfig_path=config)
    assert json.loads(got.stdout)["metadata"]["name"] == own

    denied = control_plane.kubectl("get", "node", other, kubeconfig_path=config, check=False)
    assert denied.returncode == 1
    assert "Error from server (Forbidden)" in denied.stderr
    assert f"node '{own}' cannot read '{other}', only its own Node object" in denied.stderr


def test_node_client_cert_may_patch_its_own_node_but_not_another(
    control_plane: ControlPlane, make_node: Callable[..., str]
) -> None:
    own, other = make_node("own"), make_node("other")
    cert = control_plane.pki.node_client_cert(own)
    patch = {"metadata": {"labels": {"nodeagent.test/patched": "yes"}}}

    status, body = control_plane.api_request(
        "PATCH", f"/api/v1/nodes/{own}", client=cert, body=patch
    )
    assert status == 200, body
    assert body["metadata"]["labels"]["nodeagent.test/patched"] == "yes"

    for path in (f"/api/v1/nodes/{other}", f"/api/v1/nodes/{other}/status"):
        status, body = control_plane.api_request("PATCH", path, client=cert, body=patch)
        assert status == 403, body
        assert body["reason"] == "Forbidden"
        assert body["message"] == (
            f'nodes "{other}" is forbidden: node "{own}" is not allowed to modify node "{other}"'
        )
    labels = control_plane.get_json("node", other)["metadata"]["labels"]
    assert "nodeagent.test/patched" not in labels


def test_node_client_cert_may_not_read_secrets_unrelated_to_its_pods(
    control_plane: ControlPlane, make_node: Callable[..., str]
) -> None:
    node = make_node("nosecret")
    config = control_plane.node_kubeconfig(node)
    secret = unique("secret")
    control_plane.kubectl(
        "-n", "default", "create", "secret", "generic", secret, "--from-literal=a=b"
    )
    try:
        denied = control_plane.kubectl(
            "-n", "default", "get", "secret", secret, kubeconfig_path=config, check=False
        )
        assert denied.returncode != 0
        assert "forbidden" in denied.stderr
        assert f"no relationship found between node '{node}' and this object" in denied.stderr
    finally:
        control_plane.kubectl("-n", "default", "delete", "secret", secret, check=False)


def node_client_csr(node: str) -> tuple[str, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node}"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(name).sign(key, hashes.SHA256())
    return csr.public_bytes(serialization.Encoding.PEM).decode(), key


def test_bootstrap_token_csr_is_auto_approved_and_issued(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    node = unique("joining")
    bootstrap = control_plane.bootstrap_kubeconfig(control_plane.bootstrap_token(), name=node)
    pem, key = node_client_csr(node)
    csr_name = unique("node-csr")
    request = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": csr_name},
        "spec": {
            "request": base64.b64encode(pem.encode()).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(request), kubeconfig_path=bootstrap)
    try:
        issued = wait_until(
            lambda: control_plane.get_json("csr", csr_name).get("status", {}).get("certificate"),
            what="the CSR to be approved and signed",
        )
        status = control_plane.get_json("csr", csr_name)["status"]
        approved = [c for c in status["conditions"] if c["type"] == "Approved"]
        assert approved and approved[0]["reason"] == "AutoApproved"
        cert = x509.load_pem_x509_certificate(base64.b64decode(issued))
        assert cert.subject.rfc4514_string() == f"CN=system:node:{node},O=system:nodes"
        ca = x509.load_pem_x509_certificate(control_plane.ca_path.read_bytes())
        assert cert.issuer == ca.subject

        (tmp_path / "node.crt").write_bytes(base64.b64decode(issued))
        (tmp_path / "node.key").write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        issued_config = kubeconfig.write(
            tmp_path / "issued.conf",
            kubeconfig.render(
                server=control_plane.server,
                ca=control_plane.ca_path,
                user=node,
                client=CertPair(cert=tmp_path / "node.crt", key=tmp_path / "node.key"),
            ),
        )
        whoami = control_plane.kubectl(
            "auth", "whoami", "-o", "json", kubeconfig_path=issued_config
        )
        user = json.loads(whoami.stdout)["status"]["userInfo"]
        assert user["username"] == f"system:node:{node}"
    finally:
        control_plane.kubectl("delete", "csr", csr_name, "--ignore-not-found", check=False)


def test_private_keys_are_readable_by_their_owner_only(control_plane: ControlPlane) -> None:
    control_plane.node_kubeconfig(unique("perm"))
    keys = sorted(control_plane.pki.directory.rglob("*.key"))
    assert {k.name for k in keys} >= {"ca.key", "apiserver.key", "sa.key", "admin.key"}
    assert any(k.parent.name == "nodes" for k in keys)
    assert {oct(k.stat().st_mode & 0o777) for k in keys} == {"0o600"}
    assert oct(control_plane.admin_kubeconfig.stat().st_mode & 0o777) == "0o600"

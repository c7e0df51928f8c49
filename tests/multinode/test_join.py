"""Every node of the cluster joined as a kubeadm node does: `nodeagent join` with the one join
command the control plane printed (a bootstrap token and the CA's hash), then TLS bootstrap by
the agent. What an operator can see of that: each node's client certificate came from a CSR
that the token's identity sent for that node, and the node holds only what the join wrote and
what the CSR returned, no credential made for it by the harness."""

from __future__ import annotations

import base64
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID
from harness.multinode import Cluster

from nodeagent.join.files import read_flags_env

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(300)]

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client-kubelet"


def _names(name: x509.Name, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in name.get_attributes_for_oid(oid)]


def _requested_cn(csr: dict[str, Any]) -> str:
    request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
    return ",".join(_names(request.subject, NameOID.COMMON_NAME))


@pytest.mark.smoke
def test_every_node_joined_with_the_printed_join_command(cluster: Cluster) -> None:
    csrs = [
        c
        for c in cluster.plane.get_json("csr")["items"]
        if c["spec"]["signerName"] == CLIENT_SIGNER
    ]
    requesters = {}
    for node in cluster.nodes:
        mine = [c for c in csrs if _requested_cn(c) == f"system:node:{node.name}"]
        assert len(mine) == 1, [c["metadata"]["name"] for c in mine]
        csr = mine[0]
        # sent with the bootstrap token (TLS bootstrap), approved and signed by the cluster
        assert csr["spec"]["username"].startswith("system:bootstrap:"), csr["spec"]
        assert "system:bootstrappers:kubeadm:default-node-token" in csr["spec"]["groups"]
        assert csr["status"].get("certificate"), csr["status"]
        requesters[node.name] = csr["spec"]["username"]

        # the node's name and IP are the join's flags, not the config's
        flags = read_flags_env(node.root_dir / "join-flags.env")
        assert f"--hostname-override={node.name}" in flags, flags
        assert f"--node-ip={node.ip}" in flags, flags
        config = yaml.safe_load(node.config.read_text())
        assert "hostnameOverride" not in config["node"], config["node"]
        # its kubeconfig names the certificate TLS bootstrap stored in the agent's root dir
        kubeconfig = yaml.safe_load((node.root_dir / "kubeconfig").read_text())
        (user,) = kubeconfig["users"]
        assert user["user"]["client-certificate"].startswith(str(node.root_dir / "pki")), user
        pem = (node.root_dir / "pki" / "kubelet-client-current.pem").read_bytes()
        cert = x509.load_pem_x509_certificate(pem)
        assert _names(cert.subject, NameOID.COMMON_NAME) == [f"system:node:{node.name}"]
        assert _names(cert.subject, NameOID.ORGANIZATION_NAME) == ["system:nodes"]
    # one join command (one token) for every node, as an operator runs kubeadm's on each
    assert len(set(requesters.values())) == 1, requesters

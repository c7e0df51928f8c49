"""The node in the guest joins the control plane on the host with `nodeagent join`.

The guest gets only the join command the control plane prints (token and CA hash); the packaged
agent verifies cluster-info, does TLS bootstrap through the systemd service, registers and
turns Ready. A wrong CA hash is refused in the guest as on the host, with nothing written.
"""

from __future__ import annotations

import base64
import json
import re
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.netsafety import CLUSTER_DNS
from harness.vm import Machine
from harness.vm.guest import GUEST_DIR, journal_cursor, wait_until
from harness.vm.join import join_guest, route_apiserver
from harness.vm.rootfs import GUEST_IP, HOSTNAME

pytestmark = pytest.mark.system

NODE = HOSTNAME
GUEST_KUBECONFIG = f"{GUEST_DIR}/kubeconfig"


@pytest.fixture
def joined_node(control_plane: ControlPlane) -> Iterator[None]:
    try:
        yield
    finally:
        control_plane.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)


@pytest.fixture
def node_kubeconfig(vm: Machine, control_plane: ControlPlane) -> Iterator[dict[str, Any]]:
    """The test PKI's kubeconfig for this node, rewritten for the guest's view of the apiserver."""
    server = urlsplit(control_plane.server)
    assert server.hostname and server.port
    guest_server = vm.forward_apiserver(server.hostname, server.port)
    config = yaml.safe_load(control_plane.node_kubeconfig(NODE).read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = guest_server
    vm.put(GUEST_KUBECONFIG, yaml.safe_dump(config).encode(), mode=0o600)
    try:
        yield config
    finally:
        control_plane.kubectl("delete", "node", NODE, "--ignore-not-found", check=False)


# Stdlib only (the guest's python3 has no YAML): the PEMs are passed as files.
WHOAMI = textwrap.dedent("""\
    import json, ssl, sys, urllib.request
    ctx = ssl.create_default_context(cafile=sys.argv[2])
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    body = json.dumps({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    req = urllib.request.Request(
        sys.argv[1] + "/apis/authentication.k8s.io/v1/selfsubjectreviews", data=body.encode(),
        headers={"Content-Type": "application/json"}, method="POST")
    print(urllib.request.urlopen(req, context=ctx, timeout=30).read().decode())
""")


def test_the_guest_reaches_the_host_apiserver_as_its_node_identity(
    vm: Machine, node_kubeconfig: dict[str, Any]
) -> None:
    cluster = node_kubeconfig["clusters"][0]["cluster"]
    user = node_kubeconfig["users"][0]["user"]
    for name, data in (
        ("ca.crt", cluster["certificate-authority-data"]),
        ("node.crt", user["client-certificate-data"]),
        ("node.key", user["client-key-data"]),
    ):
        vm.put(f"{GUEST_DIR}/pki/{name}", base64.b64decode(data), mode=0o600)
    vm.put(f"{GUEST_DIR}/whoami.py", WHOAMI.encode())

    out = vm.check(
        ["python3", f"{GUEST_DIR}/whoami.py", cluster["server"],
         *(f"{GUEST_DIR}/pki/{n}" for n in ("ca.crt", "node.crt", "node.key"))],
        timeout=90,
    )  # fmt: skip

    # TLS verified the apiserver's name, and the apiserver saw the node's client certificate.
    user_info = json.loads(out)["status"]["userInfo"]
    assert user_info["username"] == f"system:node:{NODE}"
    assert "system:nodes" in user_info["groups"]


def _node(control_plane: ControlPlane) -> dict[str, Any] | None:
    done = control_plane.kubectl("get", "node", NODE, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def _lease_renew_time(control_plane: ControlPlane) -> str | None:
    done = control_plane.kubectl(
        "-n", "kube-node-lease", "get", "lease", NODE, "-o", "jsonpath={.spec.renewTime}",
        check=False,
    )  # fmt: skip
    return done.stdout.strip() or None if done.returncode == 0 else None


def _provision_node(vm: Machine, deb: Path, control_plane: ControlPlane) -> tuple[str, str]:
    """Join the guest; returns a journal cursor from before and the id of the token it used."""
    cursor = journal_cursor(vm)
    out = join_guest(vm, deb, control_plane, node=NODE)
    assert "This node has joined the cluster" in out, out
    signed = re.search(r"signed by token id '([a-z0-9]{6})'", out)
    assert signed, out
    return cursor, signed.group(1)


def test_the_joined_node_registers_from_the_guest_and_renews_its_lease(
    vm: Machine, nodeagent_deb: Path, control_plane: ControlPlane, joined_node: None
) -> None:
    cursor, _ = _provision_node(vm, nodeagent_deb, control_plane)
    wait_until(
        vm,
        f"journalctl -u nodeagent --after-cursor='{cursor}' -o cat"
        " | grep -q 'Successfully registered node'",
        timeout=60,
        what="'Successfully registered node' in the journal",
    )
    node = _node(control_plane)
    assert node is not None, f"node {NODE} was not created"
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == NODE
    assert labels["kubernetes.io/os"] == "linux"
    assert {"type": "InternalIP", "address": GUEST_IP} in node["status"]["addresses"]
    assert node["status"]["nodeInfo"]["kubeletVersion"].startswith("v1.36.3+nodeagent.")
    assert node["status"]["nodeInfo"]["osImage"].startswith("Debian GNU/Linux 12")

    first = None
    deadline = time.monotonic() + 60
    while True:
        renew = _lease_renew_time(control_plane)
        if first is None:
            first = renew
        elif renew and renew != first:
            break  # renewed at least once after we first saw it
        assert time.monotonic() < deadline, f"lease of {NODE} not renewed: {first!r} -> {renew!r}"
        time.sleep(2)


def test_the_joined_node_becomes_ready_with_its_own_certificate(
    vm: Machine, nodeagent_deb: Path, control_plane: ControlPlane, joined_node: None
) -> None:
    _, token_id = _provision_node(vm, nodeagent_deb, control_plane)
    deadline = time.monotonic() + 45
    while True:
        node = _node(control_plane)
        if node is not None:
            conditions = node["status"].get("conditions", [])
            if {c["type"]: c["status"] for c in conditions}.get("Ready") == "True":
                runtime = node["status"]["nodeInfo"]["containerRuntimeVersion"]
                assert runtime.startswith("containerd://"), runtime
                break
        assert time.monotonic() < deadline, f"node {NODE} not Ready: {node}"
        time.sleep(2)

    # Its identity is the one TLS bootstrap gave it: a CSR from the bootstrap token, approved
    # by the controller-manager; the token is gone from the guest once it has its certificate.
    csrs = control_plane.get_json("csr")["items"]
    mine = [
        c
        for c in csrs
        if c["spec"]["username"] == f"system:bootstrap:{token_id}"
        and c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
    ]
    assert len(mine) == 1, csrs
    assert mine[0]["status"].get("certificate"), mine[0]["status"]
    kubeconfig = yaml.safe_load(vm.check("cat /etc/nodeagent/kubeconfig"))
    user = kubeconfig["users"][0]["user"]
    assert user == {
        "client-certificate": "/var/lib/nodeagent/pki/kubelet-client-current.pem",
        "client-key": "/var/lib/nodeagent/pki/kubelet-client-current.pem",
    }
    assert kubeconfig["clusters"][0]["cluster"]["server"] == control_plane.server
    assert vm.run("test -e /etc/nodeagent/bootstrap-kubeconfig").rc == 1
    flags = vm.check("cat /var/lib/nodeagent/join-flags.env")
    assert (
        'NODEAGENT_JOIN_ARGS="--bootstrap-kubeconfig=/etc/nodeagent/bootstrap-kubeconfig'
        " --client-ca-file=/var/lib/nodeagent/pki/ca.crt"
        " --cluster-kubelet-config=/var/lib/nodeagent/kubelet-config.yaml"
        f' --hostname-override={NODE} --node-ip={GUEST_IP}"'
    ) in flags
    # The cluster's kubelet settings (kube-system/kubelet-config) reached the guest.
    cluster_kubelet = yaml.safe_load(vm.check("cat /var/lib/nodeagent/kubelet-config.yaml"))
    assert cluster_kubelet["serverTLSBootstrap"] is True, cluster_kubelet
    assert cluster_kubelet["clusterDNS"] == [CLUSTER_DNS], cluster_kubelet
    # The CA the join verified is the one the node's server trusts for client certificates.
    ca_pem = control_plane.ca_path.read_text()
    assert vm.check("cat /var/lib/nodeagent/pki/ca.crt").strip() == ca_pem.strip(), "pki/ca.crt"


REFUSED_DIR = "/root/join-refused"


def test_a_wrong_ca_hash_is_refused_in_the_guest_and_nothing_is_written(
    agent: Machine, control_plane: ControlPlane
) -> None:
    vm = agent
    route_apiserver(vm, control_plane)
    command = control_plane.join_command().split()
    command[command.index("--discovery-token-ca-cert-hash") + 1] = "sha256:" + "ab" * 32
    vm.check(f"rm -rf {REFUSED_DIR} && mkdir {REFUSED_DIR}")
    vm.put(
        f"{REFUSED_DIR}/config.yaml",
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": f"{REFUSED_DIR}/etc/kubeconfig",
                    "rootDir": f"{REFUSED_DIR}/var",
                },
            }
        ).encode(),
    )
    result = vm.run([*command, "--config", f"{REFUSED_DIR}/config.yaml"], timeout=120)
    assert result.rc == 1, result.stdout
    assert "matches none of the --discovery-token-ca-cert-hash values (sha256:abab" in (
        result.stderr
    )
    assert vm.check(f"find {REFUSED_DIR} -mindepth 1").split() == [f"{REFUSED_DIR}/config.yaml"]

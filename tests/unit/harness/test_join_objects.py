"""The control plane's join objects are kubeadm's: names, subjects, the cluster-info shape."""

from __future__ import annotations

import pytest
from harness import bootstrap
from unit.join.join_vectors import EC_CA, EC_PIN, RSA_CA, RSA_PIN

from nodeagent.join.kubeletconfig import from_configmap
from nodeagent.join.verify import cluster_of


def test_the_ca_hash_is_the_pin_go_and_openssl_compute() -> None:
    assert bootstrap.ca_cert_hash(EC_CA.encode()) == EC_PIN
    assert bootstrap.ca_cert_hash(RSA_CA.encode()) == RSA_PIN


def test_cluster_info_holds_an_unnamed_cluster_with_server_and_ca() -> None:
    cm = bootstrap.cluster_info(server="https://198.18.0.1:6443", ca_pem=EC_CA.encode())
    assert cm["metadata"] == {"name": "cluster-info", "namespace": "kube-public"}
    assert cluster_of(cm["data"]["kubeconfig"]) == ("https://198.18.0.1:6443", EC_CA.encode())


def test_only_anonymous_may_get_only_cluster_info() -> None:
    role, binding = bootstrap.cluster_info_rbac()["items"]
    assert role["metadata"] == {
        "name": "kubeadm:bootstrap-signer-clusterinfo",
        "namespace": "kube-public",
    }
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["cluster-info"],
            "verbs": ["get"],
        }
    ]
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}
    ]


def test_kubeadms_bindings_name_its_node_token_group() -> None:
    items = bootstrap.tls_bootstrap_rbac()["items"]
    bindings = {
        i["metadata"]["name"]: (i["roleRef"]["name"], i["subjects"][0]["name"])
        for i in items
        if i["kind"] == "ClusterRoleBinding"
    }
    group = "system:bootstrappers:kubeadm:default-node-token"
    assert bindings["kubeadm:kubelet-bootstrap"] == ("system:node-bootstrapper", group)
    assert bindings["kubeadm:get-nodes"] == ("kubeadm:get-nodes", group)
    assert bindings["kubeadm:node-autoapprove-bootstrap"] == (
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        group,
    )
    assert bindings["kubeadm:node-autoapprove-certificate-rotation"] == (
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    )


def test_a_token_secret_is_in_kubeadms_group_for_both_usages() -> None:
    import datetime as dt

    token = bootstrap.new_token(
        ttl=dt.timedelta(hours=24), now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    )
    data = bootstrap.token_secret(token)["stringData"]
    assert data["auth-extra-groups"] == "system:bootstrappers:kubeadm:default-node-token"
    assert data["usage-bootstrap-authentication"] == data["usage-bootstrap-signing"] == "true"
    assert data["expiration"] == "2026-01-02T00:00:00Z"


def test_the_join_command_reads_like_kubeadms() -> None:
    assert bootstrap.join_command(endpoint="198.18.0.1:6443", token="a.b", ca_hash="sha256:c") == (
        "nodeagent join 198.18.0.1:6443 --token a.b --discovery-token-ca-cert-hash sha256:c"
    )


class _Plane:
    def __init__(self) -> None:
        self.applied: list[str] = []

    def apply(self, obj: dict[str, object]) -> None:
        self.applied.append(str(obj.get("kind")))

    def publish_cluster_info(self) -> None:
        self.applied.append("cluster-info")

    def publish_kubelet_config(self) -> None:
        self.applied.append("kubelet-config")

    def join_command(self) -> str:
        return "nodeagent join 198.18.0.1:6443 --token a.b --discovery-token-ca-cert-hash sha256:c"


def test_make_up_prints_the_join_command_after_making_sure_of_cluster_info(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from harness import join_up

    plane = _Plane()
    join_up.print_join_command(plane)  # type: ignore[arg-type]  # a fake with only apply()
    assert plane.applied == ["List", "cluster-info", "kubelet-config"]
    out = capsys.readouterr().out.splitlines()
    assert out[-2].strip() == plane.join_command()
    assert "make join-command" in out[-3]
    assert "kubectl certificate approve" in out[-1]


def test_the_kubelet_config_is_kubeadms_configmap_and_nodeagent_reads_it() -> None:
    cm = bootstrap.kubelet_config(cluster_dns="10.96.0.10", cluster_domain="cluster.local")
    assert cm["metadata"] == {"name": "kubelet-config", "namespace": "kube-system"}
    assert list(cm["data"]) == ["kubelet"]
    cluster = from_configmap(cm)
    assert cluster.skipped == ()  # kubeadm's unset values only; nothing nodeagent lacks is set
    assert cluster.data["clusterDNS"] == ["10.96.0.10"]
    assert cluster.data["clusterDomain"] == "cluster.local"
    assert cluster.data["serverTLSBootstrap"] is True
    assert "syncFrequency" not in cluster.data  # 0s: Go's unset, nodeagent's default


def test_bootstrap_tokens_and_nodes_may_get_only_the_kubelet_config() -> None:
    role, binding = bootstrap.kubelet_config_rbac()["items"]
    assert role["metadata"] == {"name": "kubeadm:kubelet-config", "namespace": "kube-system"}
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["kubelet-config"],
            "verbs": ["get"],
        }
    ]
    assert binding["roleRef"]["name"] == "kubeadm:kubelet-config"
    assert [s["name"] for s in binding["subjects"]] == [
        "system:nodes",
        "system:bootstrappers:kubeadm:default-node-token",
    ]

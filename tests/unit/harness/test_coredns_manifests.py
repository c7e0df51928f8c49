"""The cluster DNS objects ``make up`` applies: kubeadm's, with the one documented change."""

from __future__ import annotations

from typing import Any

from harness import coredns


def by_kind(items: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {item["kind"]: item for item in items}


def test_kube_dns_service_at_the_cluster_dns_ip_with_kubeadms_ports() -> None:
    objects = by_kind(
        coredns.manifests(cluster_dns_ip="10.96.0.10", cluster_domain="cluster.local")
    )
    service = objects["Service"]
    assert (service["metadata"]["namespace"], service["metadata"]["name"]) == (
        "kube-system",
        "kube-dns",
    )
    assert service["spec"]["clusterIP"] == "10.96.0.10"
    assert [(p["name"], p["port"], p["protocol"]) for p in service["spec"]["ports"]] == [
        ("dns", 53, "UDP"),
        ("dns-tcp", 53, "TCP"),
        ("metrics", 9153, "TCP"),
    ]
    assert service["spec"]["selector"] == {"k8s-app": "kube-dns"}


def test_deployment_as_kubeadm_runs_it() -> None:
    objects = by_kind(
        coredns.manifests(cluster_dns_ip="10.96.0.10", cluster_domain="cluster.local")
    )
    spec = objects["Deployment"]["spec"]["template"]["spec"]
    assert "nodeName" not in spec  # the scheduler places it
    assert spec["priorityClassName"] == "system-cluster-critical"
    assert spec["serviceAccountName"] == "coredns"
    assert spec["dnsPolicy"] == "Default"
    [container] = spec["containers"]
    assert container["image"].startswith("registry.k8s.io/coredns/coredns:v")
    assert container["livenessProbe"]["httpGet"]["path"] == "/health"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["securityContext"]["capabilities"] == {
        "add": ["NET_BIND_SERVICE"],
        "drop": ["ALL"],
    }
    assert objects["ConfigMap"]["data"]["Corefile"] == coredns.corefile("cluster.local")
    pinned = coredns.manifests(cluster_dns_ip="10.96.0.10", cluster_domain="x.test", node_name="n1")
    assert by_kind(pinned)["Deployment"]["spec"]["template"]["spec"]["nodeName"] == "n1"


def test_corefile_is_kubeadms_but_outside_names_go_nowhere() -> None:
    text = coredns.corefile("cluster.local")
    lines = [line.strip() for line in text.splitlines()]
    assert "kubernetes cluster.local in-addr.arpa ip6.arpa {" in lines
    assert "pods insecure" in lines
    assert "fallthrough in-addr.arpa ip6.arpa" in lines
    assert "prometheus :9153" in lines
    assert f"forward . {coredns.NO_UPSTREAM} {{" in lines
    assert "forward . /etc/resolv.conf {" not in lines
    for plugin in ("errors", "ready", "loop", "reload", "loadbalance"):
        assert plugin in lines
    assert "cache 30 {" in lines

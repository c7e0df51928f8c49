"""Services across nodes, with real packets: every path kube-proxy's nftables mode serves on a
multi-node cluster, each checked by what the backend saw.

The backends answer ``/cgi-bin/who`` with ``<pod name> <client address as the pod saw it>``, so
each test asserts which endpoint answered and whether the client's address was kept or
masqueraded. Clients are pods (``kubectl exec ... wget``), the nodes themselves (``node.run``)
and the host (the cluster's outside world: its address on the node links is the gateway
198.18.<16+k>.1). One namespace of backends and Services serves the whole module:

    node-1: srv-n1 (app=web), client-n1      node-2: srv-n2 (app=web), client-n2
    node-3: srv-n3 (app=web, far=yes)
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from harness.multinode import Cluster, Node
from mnpods import WHO, apply, attempt, fetch, pods, ready, wait, web_pod_spec

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]

SERVER_PORT = 8080


def _pod(name: str, namespace: str, node: Node, labels: dict[str, str], **spec: Any) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": web_pod_spec(script=WHO, nodeName=node.name, **spec),
    }


def _service(name: str, namespace: str, selector: dict[str, str], **spec: Any) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "selector": selector,
            "ports": [{"port": 80, "targetPort": SERVER_PORT}],
            **spec,
        },
    }


@dataclass
class Env:
    cluster: Cluster
    namespace: str
    services: dict[str, dict[str, Any]]
    pod_ips: dict[str, str]
    lb_ips: dict[str, str]

    @property
    def plane(self) -> Any:
        return self.cluster.plane

    def node(self, i: int) -> Node:
        return self.cluster.nodes[i - 1]

    def cluster_ip(self, service: str) -> str:
        return str(self.services[service]["spec"]["clusterIP"])

    def node_port(self, service: str) -> int:
        return int(self.services[service]["spec"]["ports"][0]["nodePort"])

    def who(self, pod: str, url: str) -> tuple[str, str] | None:
        """(answering pod, client address it saw) for a GET from inside `pod`."""
        return _who(fetch(self.plane, self.namespace, pod, url))

    @property
    def outside(self) -> str:
        """The host's address on the node links: a client outside the cluster."""
        return self.node(1).addr.gateway


def _who(body: str | None) -> tuple[str, str] | None:
    if not body or " " not in body:
        return None
    name, addr = body.split(" ", 1)
    return name, addr.strip().removeprefix("[").removesuffix("]").removeprefix("::ffff:")


def _from_host(url: str, *, timeout: float = 3) -> tuple[int, str]:
    """GET `url` from the host: (status, body); (0, error) when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, f"{type(e).__name__}: {e}"


def _in(addr: str, cidr: str) -> bool:
    return ipaddress.ip_address(addr) in ipaddress.ip_network(cidr)


@pytest.fixture(scope="module")
def env(cluster: Cluster) -> Iterator[Env]:
    plane = cluster.plane
    ns = f"svc-{secrets.token_hex(3)}"
    plane.kubectl("create", "namespace", ns)
    n1, n2, n3 = cluster.nodes
    try:
        lb_ips = {
            "lb": str(n1.addr.subnet.network_address + 200),
            "lb-local": str(n1.addr.subnet.network_address + 201),
        }
        far = {"far": "yes"}
        apply(
            plane,
            _pod("srv-n1", ns, n1, {"app": "web"}),
            _pod("srv-n2", ns, n2, {"app": "web"}),
            _pod("srv-n3", ns, n3, {"app": "web", "far": "yes"}),
            _pod("client-n1", ns, n1, {"role": "client"}),
            _pod("client-n2", ns, n2, {"role": "client"}),
            _service("far", ns, far),
            _service("far-np", ns, far, type="NodePort"),
            _service("far-itp", ns, far, internalTrafficPolicy="Local"),
            _service("web", ns, {"app": "web"}),
            _service(
                "web-affinity",
                ns,
                {"app": "web"},
                sessionAffinity="ClientIP",
                sessionAffinityConfig={"clientIP": {"timeoutSeconds": 600}},
            ),
            _service("empty", ns, {"app": "nothing"}, type="NodePort"),
            _service("lb", ns, far, type="LoadBalancer"),
            _service("lb-local", ns, far, type="LoadBalancer", externalTrafficPolicy="Local"),
        )
        for name, ip in lb_ips.items():
            plane.kubectl(
                "patch", "service", name, "-n", ns, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}}),
            )  # fmt: skip
        items = wait(
            "5 ready pods",
            lambda: len(got := pods(plane, ns)) == 5 and all(ready(p) for p in got) and got,
            within=180,
        )
        services = {s["metadata"]["name"]: s for s in plane.get_json("services", "-n", ns)["items"]}
        yield Env(
            cluster=cluster,
            namespace=ns,
            services=services,
            pod_ips={p["metadata"]["name"]: p["status"]["podIP"] for p in items},
            lb_ips=lb_ips,
        )
    finally:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)


def _pod_cidr(env: Env, node: Node) -> str:
    return str(env.plane.get_json("node", node.name)["spec"]["podCIDR"])


@pytest.mark.smoke
def test_a_node_port_on_a_node_without_the_endpoint_reaches_it_masqueraded(env: Env) -> None:
    """From outside the cluster to node-1's NodePort: node-1 DNATs to srv-n3 on node-3 and
    masquerades (externalTrafficPolicy Cluster), so the reply comes back through node-1: the
    backend sees node-1's own address on the pod network, never the client's."""
    n1 = env.node(1)
    url = f"http://{n1.ip}:{env.node_port('far-np')}/cgi-bin/who"
    _, body = wait(
        f"{url} from the host", lambda: (got := _from_host(url))[0] == 200 and got, within=60
    )
    who = _who(body)
    assert who is not None and who[0] == "srv-n3", body
    assert _in(who[1], _pod_cidr(env, n1)), (who, _pod_cidr(env, n1))


def test_a_cluster_ip_keeps_a_pods_address_and_masquerades_a_nodes(env: Env) -> None:
    """ClusterIP to the only endpoint on another node: from a pod the backend sees the pod's
    own address (inside clusterCIDR: no masquerade, kube-proxy's detectLocalMode ClusterCIDR);
    from the node's own network namespace (outside clusterCIDR) it is masqueraded."""
    ip = env.cluster_ip("far")
    url = f"http://{ip}/cgi-bin/who"
    who = wait(f"{url} from client-n1", lambda: env.who("client-n1", url), within=60)
    assert who == ("srv-n3", env.pod_ips["client-n1"])
    n1 = env.node(1)
    done = n1.run("timeout", "3", "busybox", "wget", "-q", "-O", "-", url, check=False)
    who = _who(done.stdout)
    assert who is not None and who[0] == "srv-n3", (done.stdout, done.stderr)
    assert who[1] != n1.ip and _in(who[1], _pod_cidr(env, n1)), who


def test_a_pod_reaches_itself_through_its_service_masqueraded(env: Env) -> None:
    """Hairpin: srv-n3 through the ClusterIP whose only endpoint it is. The connection is
    masqueraded (else the reply would go straight back to the pod and be dropped)."""
    url = f"http://{env.cluster_ip('far')}/cgi-bin/who"
    who = wait("the hairpin connection", lambda: env.who("srv-n3", url), within=60)
    assert who[0] == "srv-n3"
    assert who[1] != env.pod_ips["srv-n3"], who
    assert _in(who[1], _pod_cidr(env, env.node(3))), who


def test_external_traffic_policy_local_keeps_the_client_address_and_only_local_nodes_answer(
    env: Env,
) -> None:
    """externalTrafficPolicy: Local. node-3 (the endpoint's node) answers on the NodePort with
    the client's own address; node-1 (no local endpoint) drops the connection; the
    healthCheckNodePort says so with kube-proxy's JSON: 200 and 1 local endpoint on node-3, 503
    and 0 on node-1."""
    n1, n3 = env.node(1), env.node(3)
    port = env.node_port("lb-local")
    url = f"http://{n3.ip}:{port}/cgi-bin/who"
    status, body = wait(
        f"{url} from the host", lambda: (got := _from_host(url))[0] == 200 and got, within=60
    )
    assert _who(body) == ("srv-n3", env.outside), body
    status, body = _from_host(f"http://{n1.ip}:{port}/cgi-bin/who")
    assert status == 0 and "timed out" in body, (status, body)

    hc = int(env.services["lb-local"]["spec"]["healthCheckNodePort"])
    for node, code, count in ((n3, 200, 1), (n1, 503, 0)):
        status, body = wait(
            f"the health check on {node.name}",
            lambda node=node, code=code: (
                (got := _from_host(f"http://{node.ip}:{hc}/"))[0] == code and got
            ),
            within=30,
        )
        assert json.loads(body) == {
            "service": {"namespace": env.namespace, "name": "lb-local"},
            "localEndpoints": count,
            "serviceProxyHealthy": True,
        }, body
        with urllib.request.urlopen(f"http://{n3.ip}:{hc}/", timeout=3) as response:
            assert response.headers["X-Load-Balancing-Endpoint-Weight"] == "1"


def test_load_balancer_ingress_ips_are_served(env: Env) -> None:
    """status.loadBalancer.ingress IPs (set by the test: there is no cloud) are served like
    external IPs: with externalTrafficPolicy Cluster a pod's connection is masqueraded; with
    Local a pod's connection goes to any endpoint with its address kept (kube-proxy
    short-circuits pod traffic to the cluster endpoints)."""
    url = f"http://{env.lb_ips['lb']}/cgi-bin/who"
    who = wait(f"{url} from client-n1", lambda: env.who("client-n1", url), within=60)
    assert who[0] == "srv-n3"
    assert who[1] != env.pod_ips["client-n1"], who
    url = f"http://{env.lb_ips['lb-local']}/cgi-bin/who"
    who = wait(f"{url} from client-n1", lambda: env.who("client-n1", url), within=60)
    assert who == ("srv-n3", env.pod_ips["client-n1"])


def test_internal_traffic_policy_local_uses_only_the_nodes_own_endpoints(env: Env) -> None:
    """internalTrafficPolicy: Local. srv-n3's node has the endpoint: it answers (hairpin);
    client-n1's node has none: the connection gets nothing (dropped, not refused)."""
    url = f"http://{env.cluster_ip('far-itp')}/cgi-bin/who"
    who = wait("far-itp from srv-n3", lambda: env.who("srv-n3", url), within=60)
    assert who[0] == "srv-n3"
    code, body, err = attempt(env.plane, env.namespace, "client-n1", url)
    assert code != 0 and "refused" not in err, (code, body, err)


def test_a_service_without_endpoints_refuses_connections(env: Env) -> None:
    """No endpoints anywhere: the ClusterIP and the NodePort reject (connection refused) at
    once, from a pod and from outside."""
    url = f"http://{env.cluster_ip('empty')}/"
    code, body, err = attempt(env.plane, env.namespace, "client-n1", url)
    assert code != 0 and "Connection refused" in err, (code, body, err)
    n2 = env.node(2)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((n2.ip, env.node_port("empty")), timeout=3).close()


def test_session_affinity_sticks_to_one_endpoint_across_nodes(env: Env) -> None:
    """ClientIP affinity over endpoints on all three nodes: every request from a client goes to
    the endpoint its first one did; the same Service without affinity spreads."""
    ip, plain = env.cluster_ip("web-affinity"), env.cluster_ip("web")
    url = f"http://{ip}/cgi-bin/who"
    wait("web-affinity answers", lambda: env.who("client-n2", url), within=60)
    sticky = {(env.who("client-n2", url) or ("?",))[0] for _ in range(8)}
    assert len(sticky) == 1 and sticky <= {"srv-n1", "srv-n2", "srv-n3"}, sticky
    spread = {(env.who("client-n2", f"http://{plain}/cgi-bin/who") or ("?",))[0] for _ in range(12)}
    assert len(spread) > 1, spread


def test_a_terminating_endpoint_serves_while_no_other_is_ready(env: Env) -> None:
    """The only endpoint's pod is deleted but keeps running (its server ignores SIGTERM, grace
    period 120 s): its endpoint turns ready=false, serving=true, terminating=true, and
    kube-proxy keeps sending new connections to it, from every node, rather than refusing."""
    plane, ns = env.plane, env.namespace
    apply(
        plane,
        _pod("term", ns, env.node(3), {"app": "term"}, terminationGracePeriodSeconds=120),
        _service("term", ns, {"app": "term"}),
    )
    wait("term ready", lambda: all(ready(p) for p in pods(plane, ns, "app=term")), within=120)
    ip = plane.get_json("service", "term", "-n", ns)["spec"]["clusterIP"]
    url = f"http://{ip}/cgi-bin/who"
    assert wait("term answers", lambda: env.who("client-n1", url), within=60)[0] == "term"
    plane.kubectl("delete", "pod", "term", "-n", ns, "--wait=false")
    try:

        def conditions() -> dict[str, Any] | None:
            slices = plane.get_json(
                "endpointslices", "-n", ns, "-l", "kubernetes.io/service-name=term"
            )["items"]
            eps = [e for s in slices for e in s.get("endpoints") or []]
            return eps[0]["conditions"] if len(eps) == 1 else None

        cond = wait(
            "the endpoint terminating",
            lambda: (c := conditions()) and c.get("terminating") and c,
            within=60,
        )
        assert cond == {"ready": False, "serving": True, "terminating": True}, cond
        for client in ("client-n1", "client-n2"):
            who = wait(f"term from {client}", lambda c=client: env.who(c, url), within=30)
            assert who[0] == "term", who
    finally:
        plane.kubectl("delete", "pod", "term", "-n", ns, "--grace-period=0", "--force",
                      check=False)  # fmt: skip


ZONE = "topology.kubernetes.io/zone"


def test_traffic_distribution_prefers_endpoints_in_the_clients_zone(env: Env) -> None:
    """trafficDistribution PreferClose and PreferSameZone: the EndpointSlice controller hints
    each endpoint for its node's zone (topology.kubernetes.io/zone); every node's proxy then
    sends its traffic only to endpoints hinted for its own zone. PreferSameNode hints for the
    node: a client on node-1 only reaches node-1's endpoint."""
    plane, cluster = env.plane, env.cluster
    zones = {cluster.nodes[0].name: "zone-a", cluster.nodes[1].name: "zone-b",
             cluster.nodes[2].name: "zone-b"}  # fmt: skip
    ns = f"{env.namespace}-zones"
    for node, zone in zones.items():
        plane.kubectl("label", "node", node, f"{ZONE}={zone}", "--overwrite")
    plane.kubectl("create", "namespace", ns)
    try:
        near = {"near": "yes"}
        modes = {"close": "PreferClose", "samezone": "PreferSameZone", "samenode": "PreferSameNode"}
        apply(
            plane,
            _pod("near-a", ns, env.node(1), near),
            _pod("near-b", ns, env.node(3), near),
            *(_service(n, ns, near, trafficDistribution=m) for n, m in modes.items()),
        )
        wait("near pods ready", lambda: len(got := pods(plane, ns)) == 2 and all(map(ready, got)),
             within=120)  # fmt: skip

        def hinted(service: str) -> bool:
            slices = plane.get_json(
                "endpointslices", "-n", ns, "-l", f"kubernetes.io/service-name={service}"
            )["items"]
            eps = [e for s in slices for e in s.get("endpoints") or []]
            return len(eps) == 2 and all((e.get("hints") or {}).get("forZones") for e in eps)

        for service in modes:
            wait(f"{service}'s endpoints hinted", lambda s=service: hinted(s), within=60)
        ips = {n: plane.get_json("service", n, "-n", ns)["spec"]["clusterIP"] for n in modes}
        cases = [
            ("close", "client-n1", "near-a"),
            ("close", "client-n2", "near-b"),
            ("samezone", "client-n1", "near-a"),
            ("samezone", "client-n2", "near-b"),
            ("samenode", "client-n1", "near-a"),
        ]
        for service, client, expected in cases:
            url = f"http://{ips[service]}/cgi-bin/who"
            wait(f"{service} from {client}", lambda c=client, u=url: env.who(c, u), within=60)
            seen = {(env.who(client, url) or ("?",))[0] for _ in range(6)}
            assert seen == {expected}, (service, client, seen)
    finally:
        plane.kubectl("delete", "namespace", ns, "--wait=false", check=False)
        for node in zones:
            plane.kubectl("label", "node", node, f"{ZONE}-", check=False)


TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"


def test_the_proxy_health_and_metrics_servers_answer_as_kube_proxys(env: Env) -> None:
    """:10256 /healthz and /livez on the node's address with kube-proxy's JSON (its ProxyHealth:
    healthy, a status per IP family): 200 while the rules are synced; /healthz 503 with
    nodeEligible false while the node carries the cluster autoscaler's
    ToBeDeletedByClusterAutoscaler taint (load balancers drain it), /livez still 200 and
    without nodeEligible. :10249 /metrics on the node's loopback has kube-proxy's names."""
    plane, n2 = env.plane, env.node(2)
    status, body = _from_host(f"http://{n2.ip}:10256/healthz")
    health = json.loads(body)
    assert status == 200 and health["nodeEligible"] is True and health["healthy"] is True, body
    assert list(health) == ["lastUpdated", "currentTime", "nodeEligible", "healthy", "status"]
    assert health["status"]["IPv4"]["healthy"] is True, body
    plane.kubectl("taint", "node", n2.name, f"{TO_BE_DELETED}=1:NoSchedule")
    try:
        status, body = wait(
            "/healthz 503",
            lambda: (got := _from_host(f"http://{n2.ip}:10256/healthz"))[0] == 503 and got,
            within=30,
        )
        assert json.loads(body)["nodeEligible"] is False, body
        status, body = _from_host(f"http://{n2.ip}:10256/livez")
        assert status == 200 and "nodeEligible" not in json.loads(body), body
    finally:
        plane.kubectl("taint", "node", n2.name, f"{TO_BE_DELETED}-", check=False)
    wait(
        "/healthz 200 again",
        lambda: _from_host(f"http://{n2.ip}:10256/healthz")[0] == 200,
        within=30,
    )
    done = n2.run("timeout", "3", "busybox", "wget", "-q", "-O", "-",
                  "http://127.0.0.1:10249/metrics")  # fmt: skip
    names = {line.split("{")[0].split(" ")[0] for line in done.stdout.splitlines()}
    for name in (
        "kubeproxy_sync_proxy_rules_duration_seconds_bucket",
        "kubeproxy_sync_full_proxy_rules_duration_seconds_count",
        "kubeproxy_sync_proxy_rules_last_timestamp_seconds",
        "kubeproxy_network_programming_duration_seconds_sum",
        "kubeproxy_sync_proxy_rules_endpoint_changes_total",
        "kubeproxy_sync_proxy_rules_service_changes_total",
        "kubeproxy_sync_proxy_rules_nftables_sync_failures_total",
        "kubeproxy_proxy_healthz_total",
    ):
        assert name in names, (name, done.stdout[:2000])
    last = next(
        float(line.rsplit(" ", 1)[1])
        for line in done.stdout.splitlines()
        if line.startswith("kubeproxy_sync_proxy_rules_last_timestamp_seconds{")
    )
    assert last > 1.7e9, last

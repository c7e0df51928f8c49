"""Node failures as the control plane handles them, with nodeagent as every node:

- an agent that stops: after kube-controller-manager's grace period its Node turns Unknown,
  gets the `unreachable` taints, and the Deployment's pods there are evicted after their
  tolerationSeconds and run again on the other nodes; the agent started again finishes the
  evicted pods and leaves no container of theirs behind;
- `kubectl drain` evicts through the Eviction API and stops where a PodDisruptionBudget would
  be broken; `kubectl uncordon` makes the node schedulable again;
- a node that loses power (every process and mount gone, its disk kept) and boots again: the
  agent runs each of its pods once more, one sandbox each, no duplicates;
- a node cut off from the apiserver past the grace period (its agent running): the node
  lifecycle controller marks its pods Ready False, its static pods' mirrors too; once the node
  is back they are Ready again in the same containers, as the kubelet's status reconcile makes
  them (found by the soak).

Each test leaves every node Ready and schedulable."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from harness.multinode import Cluster, Node, wait_ready
from mnpods import (
    apply,
    by_node,
    condition,
    deployment,
    live,
    node_obj,
    pods,
    ready,
    wait,
    web_pod_spec,
)

from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_NAMESPACE

pytestmark = [pytest.mark.multinode, pytest.mark.timeout(900)]

GRACE = 300  # the controller-manager's 50 s node-monitor grace period, then the eviction
TOLERATION = 5  # tolerationSeconds of the test pods for the not-ready/unreachable taints
UNREACHABLE = {"key": "node.kubernetes.io/unreachable"}


@pytest.fixture
def namespace(cluster: Cluster) -> Iterator[str]:
    name = f"mn-{secrets.token_hex(3)}"
    cluster.plane.kubectl("create", "namespace", name)
    try:
        yield name
    finally:
        cluster.plane.kubectl("delete", "namespace", name, "--wait=false", check=False)
        for node in cluster.nodes:  # whatever a failed test left cordoned
            cluster.plane.kubectl("uncordon", node.name, check=False)


def tolerations() -> list[dict[str, object]]:
    return [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": TOLERATION}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]


def ready_pods(cluster: Cluster, namespace: str, count: int) -> list[dict[str, object]]:
    def check() -> list[dict[str, object]] | None:
        got = live(pods(cluster.plane, namespace, "app=web"))
        return got if len(got) == count and all(ready(p) for p in got) else None

    result: list[dict[str, object]] = wait(f"{count} ready pods", check, within=180)
    return result


def container_id(pod: dict[str, Any]) -> str:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return str(statuses[0].get("containerID", ""))


async def sandboxes(node: Node, namespace: str) -> list[cri.PodSandbox]:
    async with CriClient.open(node.endpoint) as client:
        return await client.list_pod_sandbox(
            cri.PodSandboxFilter(label_selector={POD_NAMESPACE: namespace})
        )


async def test_a_stopped_agents_pods_are_evicted_and_run_on_the_other_nodes(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    apply(plane, deployment("web", namespace, 3, tolerations=tolerations()))
    spread = by_node(ready_pods(cluster, namespace, 3))
    victim = cluster.node(max(spread, key=lambda n: len(spread[n])))
    moved = set(spread[victim.name])
    cluster.stop_agent(victim)
    try:
        node = wait(
            f"{victim.name} Unknown and tainted unreachable",
            lambda: (
                (obj := node_obj(plane, victim.name))
                and condition(obj).get("status") == "Unknown"
                and any(
                    t["key"] == UNREACHABLE["key"] and t["effect"] == "NoExecute"
                    for t in obj["spec"].get("taints", [])
                )
                and obj
            ),
            within=GRACE,
        )
        assert condition(node)["reason"] == "NodeStatusUnknown"
        assert condition(node)["message"] == "Kubelet stopped posting node status."
        after = wait(
            "3 ready pods on the other nodes",
            lambda: (
                len(got := [p for p in live(pods(plane, namespace, "app=web")) if ready(p)]) == 3
                and victim.name not in by_node(got)
                and got
            ),
            within=GRACE,
        )
        assert not moved & {p["metadata"]["name"] for p in after}
    finally:
        cluster.start_agent(victim)
        wait_ready(plane, [victim.name])
    # the agent back: the evicted pods are finished and their containers removed
    wait(
        "the evicted pods gone",
        lambda: not moved & {p["metadata"]["name"] for p in pods(plane, namespace, "app=web")},
        within=120,
    )
    left = await sandboxes(victim, namespace)
    assert [s for s in left if s.state == cri.SANDBOX_READY] == [], left
    wait(
        "the unreachable taint lifted",
        lambda: (
            not [
                t
                for t in node_obj(plane, victim.name)["spec"].get("taints", [])
                if t["key"] == UNREACHABLE["key"]
            ]
        ),
        within=60,
    )


def test_drain_honours_a_pod_disruption_budget_and_uncordon_undoes_the_cordon(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    apply(plane, deployment("web", namespace, 2))
    spread = by_node(ready_pods(cluster, namespace, 2))
    target = cluster.node(max(spread, key=lambda n: len(spread[n])))
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}},
    }
    apply(plane, pdb)
    wait(
        "the PDB observed",
        lambda: (
            plane.get_json("pdb", "web", "-n", namespace).get("status", {}).get("currentHealthy")
            == 2
        ),
        within=60,
    )
    drain = ["drain", target.name, "--ignore-daemonsets", "--pod-selector=app=web"]
    refused = plane.kubectl(*drain, "--timeout=15s", check=False)
    assert refused.returncode != 0
    assert "Cannot evict pod as it would violate the pod's disruption budget" in refused.stderr
    assert node_obj(plane, target.name)["spec"].get("unschedulable") is True  # cordoned
    assert {p["metadata"]["name"] for p in live(pods(plane, namespace, "app=web"))} == {
        name for names in spread.values() for name in names
    }  # nothing evicted

    # one at a time may go: the drain goes through, the pods run on the other nodes
    plane.kubectl(
        "patch", "pdb", "web", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"minAvailable": 1}}),
    )  # fmt: skip
    drained = plane.kubectl(*drain, "--timeout=120s", check=False)
    assert drained.returncode == 0, drained.stderr
    assert "evicted" in drained.stdout
    after = ready_pods(cluster, namespace, 2)
    assert target.name not in by_node(after)
    plane.kubectl("uncordon", target.name)
    assert not node_obj(plane, target.name)["spec"].get("unschedulable")


async def test_a_node_that_lost_power_runs_its_pods_again_once_each(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    node = cluster.nodes[2]
    apply(
        plane,
        deployment("web", namespace, 2, nodeSelector={"kubernetes.io/hostname": node.name}),
    )
    before = ready_pods(cluster, namespace, 2)
    old_containers = {container_id(p) for p in before}
    cluster.power_off(node)
    cluster.boot(node)
    wait_ready(plane, [node.name])

    def all_back() -> bool:
        got = live(pods(plane, namespace, "app=web"))
        return {p["metadata"]["uid"] for p in got} == {
            p["metadata"]["uid"] for p in before
        } and all(ready(p) and container_id(p) not in old_containers for p in got)

    wait("the same 2 pods ready again in new containers", all_back, within=240)
    listed = await sandboxes(node, namespace)
    running = [s for s in listed if s.state == cri.SANDBOX_READY]
    assert sorted(s.metadata.uid for s in running) == sorted(
        p["metadata"]["uid"] for p in before
    ), (listed, [(p["metadata"]["name"], p.get("status")) for p in pods(plane, namespace)])


CUTOFF_TABLE = "mn_cutoff"


def cut_off(cluster: Cluster, node: Node, *, on: bool) -> None:
    """Drop the node's packets to the apiserver (nft in its netns), or stop dropping them."""
    plane = cluster.plane
    match = f"ip daddr {plane.address} tcp dport {plane.ports.apiserver} drop"
    script = (
        f"table inet {CUTOFF_TABLE} {{\n"
        f" chain cut_out {{ type filter hook output priority -300; {match}; }}\n"
        f" chain cut_forward {{ type filter hook forward priority -300; {match}; }}\n"
        "}\n"
        if on
        else f"delete table inet {CUTOFF_TABLE}\n"
    )
    subprocess.run(
        ["ip", "netns", "exec", node.netns, "nft", "-f", "-"],
        input=script,
        text=True,
        capture_output=True,
        check=on,  # the table may be gone already when undoing
    )


def test_a_node_cut_off_past_the_grace_period_has_its_pods_ready_again_once_back(
    cluster: Cluster, namespace: str
) -> None:
    plane = cluster.plane
    node = cluster.nodes[1]
    apply(  # the default 300 s tolerations: marked not ready, not evicted
        plane,
        deployment("web", namespace, 1, nodeSelector={"kubernetes.io/hostname": node.name}),
    )
    static = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "static", "namespace": namespace},
        "spec": web_pod_spec(),
    }
    manifest = node.manifests / f"{namespace}-static.json"
    manifest.write_text(json.dumps(static))
    try:
        cut_off_and_back(cluster, node, namespace, ["web-", f"static-{node.name}"])
    finally:
        manifest.unlink()


def cut_off_and_back(cluster: Cluster, node: Node, namespace: str, prefixes: list[str]) -> None:
    """Cut `node` off until the controller marks its pods (named `prefixes`, one each) not
    ready, then want them ready again in the same containers."""
    plane = cluster.plane

    def by_prefix() -> dict[str, dict[str, Any]] | None:
        live_pods = live(pods(plane, namespace))
        got = {p: [o for o in live_pods if o["metadata"]["name"].startswith(p)] for p in prefixes}
        return None if any(len(v) != 1 for v in got.values()) else {k: v[0] for k, v in got.items()}

    before = wait(
        f"{prefixes} ready",
        lambda: (got := by_prefix()) and all(ready(p) for p in got.values()) and got,
        within=180,
    )
    cut_off(cluster, node, on=True)
    try:
        wait(
            f"{node.name} Unknown and {prefixes} marked not ready",
            lambda: (
                condition(node_obj(plane, node.name)).get("status") == "Unknown"
                and (got := by_prefix()) is not None
                and not any(ready(p) for p in got.values())
            ),
            within=GRACE,
        )
    finally:
        cut_off(cluster, node, on=False)
    wait_ready(plane, [node.name])
    after = wait(
        f"{prefixes} ready again",
        lambda: (got := by_prefix()) and all(ready(p) for p in got.values()) and got,
        within=60,
    )
    for prefix in prefixes:  # not restarted: only their statuses sent
        assert container_id(after[prefix]) == container_id(before[prefix]), prefix

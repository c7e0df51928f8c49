"""The kubelet's general predicates at admission, beside the resource fit (table tests)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.lifecycle.admission import AdmitResult, admit_pod
from nodeagent.lifecycle.predicates import (
    general_predicates,
    host_ports_fit,
    node_affinity_matches,
    os_label,
    supplemental_groups,
    untolerated_no_execute,
)
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

NODE: dict[str, Any] = {
    "metadata": {
        "name": "node-a",
        "labels": {"kubernetes.io/hostname": "node-a", "zone": "z1", "cores": "8"},
    },
    "spec": {},
    "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
}


def with_ports(*ports: dict[str, Any], name: str = "web") -> Pod:
    return pod(name, containers=[container("app", ports=list(ports))])


def port(host_port: int, *, ip: str = "", protocol: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"containerPort": 8080, "hostPort": host_port}
    if ip:
        out["hostIP"] = ip
    if protocol:
        out["protocol"] = protocol
    return out


@pytest.mark.parametrize(
    ("wanted", "taken", "fits"),
    [
        pytest.param(port(80), [port(80)], False, id="same port, both on every address"),
        pytest.param(port(80), [port(81)], True, id="another port"),
        pytest.param(port(80, protocol="UDP"), [port(80)], True, id="another protocol"),
        pytest.param(
            port(80, ip="10.0.0.1"), [port(80, ip="10.0.0.2")], True, id="two distinct addresses"
        ),
        pytest.param(
            port(80, ip="10.0.0.1"), [port(80)], False, id="an address against 0.0.0.0 in use"
        ),
        pytest.param(
            port(80), [port(80, ip="10.0.0.1")], False, id="0.0.0.0 against an address in use"
        ),
        pytest.param(
            port(80, ip="0.0.0.0", protocol="TCP"),
            [port(80)],
            False,
            id="explicit 0.0.0.0/TCP is the default",
        ),
    ],
)
def test_host_ports(wanted: dict[str, Any], taken: list[dict[str, Any]], fits: bool) -> None:
    assert host_ports_fit(with_ports(wanted), [with_ports(*taken, name="other")]) is fits


def test_a_sidecars_host_port_is_taken_too_but_not_a_plain_init_containers() -> None:
    other = pod(
        "other",
        init_containers=[
            container("init", ports=[port(80)]),
            container("side", ports=[port(81)], restartPolicy="Always"),
        ],
    )
    assert host_ports_fit(with_ports(port(80)), [other])
    assert not host_ports_fit(with_ports(port(81)), [other])


def affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}
        }
    }


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": op, "values": list(values)}


@pytest.mark.parametrize(
    ("spec", "matches"),
    [
        pytest.param({}, True, id="nothing asked"),
        pytest.param({"nodeSelector": {"zone": "z1"}}, True, id="nodeSelector matches"),
        pytest.param({"nodeSelector": {"zone": "z2"}}, False, id="nodeSelector another value"),
        pytest.param({"nodeSelector": {"gpu": "yes"}}, False, id="nodeSelector missing label"),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("zone", "In", "z1", "z2")]})},
            True,
            id="In",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("zone", "NotIn", "z1")]})},
            False,
            id="NotIn",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("gpu", "NotIn", "x")]})},
            True,
            id="NotIn a missing label",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("gpu", "DoesNotExist")]})},
            True,
            id="DoesNotExist",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("cores", "Gt", "4")]})},
            True,
            id="Gt",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("cores", "Lt", "4")]})},
            False,
            id="Lt",
        ),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("zone", "Gt", "4")]})},
            False,
            id="Gt on a label that is no integer",
        ),
        pytest.param(
            {
                "affinity": affinity(
                    {"matchExpressions": [expr("zone", "In", "z9")]},
                    {"matchFields": [expr("metadata.name", "In", "node-a")]},
                )
            },
            True,
            id="terms are ORed; matchFields on the node's name",
        ),
        pytest.param(
            {
                "affinity": affinity(
                    {
                        "matchExpressions": [
                            expr("zone", "In", "z1"),
                            expr("kubernetes.io/hostname", "In", "node-b"),
                        ]
                    }
                )
            },
            False,
            id="expressions in a term are ANDed",
        ),
        pytest.param({"affinity": affinity({})}, False, id="an empty term matches nothing"),
        pytest.param(
            {"affinity": affinity({"matchExpressions": [expr("zone", "Exists", "z1")]})},
            False,
            id="an invalid requirement matches nothing",
        ),
        pytest.param(
            {
                "nodeSelector": {"zone": "z2"},
                "affinity": affinity({"matchExpressions": [expr("zone", "Exists")]}),
            },
            False,
            id="nodeSelector and affinity must both match",
        ),
    ],
)
def test_node_affinity(spec: dict[str, Any], matches: bool) -> None:
    assert node_affinity_matches(pod(**spec), NODE) is matches


NO_EXECUTE = {"key": "dedicated", "value": "db", "effect": "NoExecute"}


@pytest.mark.parametrize(
    ("taints", "tolerations", "untolerated"),
    [
        pytest.param([NO_EXECUTE], [], True, id="untolerated NoExecute"),
        pytest.param(
            [{**NO_EXECUTE, "effect": "NoSchedule"}], [], False, id="NoSchedule is the scheduler's"
        ),
        pytest.param(
            [NO_EXECUTE],
            [{"key": "dedicated", "operator": "Equal", "value": "db"}],
            False,
            id="Equal",
        ),
        pytest.param(
            [NO_EXECUTE],
            [{"key": "dedicated", "value": "web"}],
            True,
            id="another value",
        ),
        pytest.param([NO_EXECUTE], [{"operator": "Exists"}], False, id="Exists without a key"),
        pytest.param(
            [NO_EXECUTE],
            [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
            True,
            id="another effect",
        ),
        pytest.param(
            [{"key": "level", "value": "5", "effect": "NoExecute"}],
            [{"key": "level", "operator": "Gt", "value": "3"}],
            True,
            id="Gt without its gate",
        ),
    ],
)
def test_no_execute_taints(
    taints: list[dict[str, Any]], tolerations: list[dict[str, Any]], untolerated: bool
) -> None:
    p = pod(tolerations=tolerations)
    assert (untolerated_no_execute(p, taints) is not None) is untolerated


def test_comparison_operators_behind_their_gate() -> None:
    taint = {"key": "level", "value": "5", "effect": "NoExecute"}
    below = pod(tolerations=[{"key": "level", "operator": "Lt", "value": "9"}])
    above = pod(tolerations=[{"key": "level", "operator": "Lt", "value": "2"}])
    assert untolerated_no_execute(below, [taint], comparison_operators=True) is None
    assert untolerated_no_execute(above, [taint], comparison_operators=True) is not None


def test_os_label_and_supplemental_groups() -> None:
    assert os_label(pod(labels={"kubernetes.io/os": "linux"})) is None
    refusal = os_label(pod(labels={"kubernetes.io/os": "windows"}))
    assert refusal is not None
    assert (refusal.reason, refusal.message) == (
        "PodOSSelectorNodeLabelDoesNotMatch",
        "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label",
    )
    strict = pod(securityContext={"supplementalGroupsPolicy": "Strict"})
    refused = supplemental_groups(strict, NODE)
    assert refused is not None
    assert (refused.reason, refused.message) == (
        "SupplementalGroupsPolicyNotSupported",
        "SupplementalGroupsPolicy=Strict is not supported in this node",
    )
    declared = {**NODE, "status": {"features": {"supplementalGroupsPolicy": True}}}
    assert supplemental_groups(strict, declared) is None
    assert (
        supplemental_groups(pod(securityContext={"supplementalGroupsPolicy": "Merge"}), NODE)
        is None
    )


def test_a_static_pod_ignores_no_execute_taints() -> None:
    tainted = {**NODE, "spec": {"taints": [NO_EXECUTE]}}
    static = pod(annotations={"kubernetes.io/config.source": "file"})
    assert static.is_static
    assert general_predicates(static, tainted, []) == []
    assert [r.reason for r in general_predicates(pod(), tainted, [])] == ["TaintToleration"]


def test_node_name_of_another_node() -> None:
    [refusal] = general_predicates(pod(node="node-b"), NODE, [])
    assert (refusal.reason, refusal.message) == (
        "NodeName",
        "Predicate NodeName failed: node(s) didn't match the requested node name",
    )


@pytest.mark.parametrize(
    ("new", "others", "node", "expected"),
    [
        pytest.param(
            with_ports(port(8080)),
            [with_ports(port(8080), name="first")],
            NODE,
            AdmitResult(
                False,
                "NodePorts",
                "Predicate NodePorts failed: node(s) didn't have free ports for the requested "
                "pod ports",
            ),
            id="host port taken: NodePorts",
        ),
        pytest.param(
            pod(nodeSelector={"zone": "z2"}),
            [],
            NODE,
            AdmitResult(
                False,
                "NodeAffinity",
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
            ),
            id="nodeSelector: NodeAffinity",
        ),
        pytest.param(
            pod(tolerations=[]),
            [],
            {**NODE, "spec": {"taints": [NO_EXECUTE]}},
            AdmitResult(
                False,
                "TaintToleration",
                "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
            ),
            id="NoExecute taint: TaintToleration",
        ),
        pytest.param(
            pod(
                nodeSelector={"zone": "z2"},
                containers=[container("app", requests={"cpu": "3"})],
            ),
            [],
            NODE,
            AdmitResult(
                False,
                "OutOfcpu",
                "Node didn't have enough resource: cpu, requested: 3000, used: 0, capacity: 2000",
            ),
            id="resources come first",
        ),
        pytest.param(
            pod(containers=[container("app", requests={"hugepages-2Mi": "2Mi"})]),
            [],
            NODE,
            AdmitResult(
                False,
                "OutOfhugepages-2Mi",
                "Node didn't have enough resource: hugepages-2Mi, requested: 2097152, used: 0, "
                "capacity: 0",
            ),
            id="hugepages the node does not have",
        ),
        pytest.param(
            pod(containers=[container("app", requests={"example.com/gpu": "1"})]),
            [],
            NODE,
            AdmitResult(True),
            id="an extended resource the node does not know is the cluster's",
        ),
        pytest.param(
            pod(containers=[container("app", requests={"example.com/gpu": "2"})]),
            [],
            {
                **NODE,
                "status": {
                    "allocatable": {**NODE["status"]["allocatable"], "example.com/gpu": "1"}
                },
            },
            AdmitResult(
                False,
                "OutOfexample.com/gpu",
                "Node didn't have enough resource: example.com/gpu, requested: 2, used: 0, "
                "capacity: 1",
            ),
            id="an extended resource the node has too little of",
        ),
        pytest.param(with_ports(port(8080)), [], NODE, AdmitResult(True), id="free host port"),
    ],
)
def test_admission_with_the_node(
    new: Pod, others: list[Pod], node: dict[str, Any], expected: AdmitResult
) -> None:
    result = admit_pod(new, allocatable=node["status"]["allocatable"], admitted=others, node=node)
    assert result == expected

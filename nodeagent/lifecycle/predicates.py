"""The kubelet's general predicates beside the resource fit, over the Node object. Pure.

``predicateAdmitHandler.Admit`` (pkg/kubelet/lifecycle/predicate.go) checks, in this order:

1. the pod's ``kubernetes.io/os`` *label* against the node's OS
   (``PodOSSelectorNodeLabelDoesNotMatch``);
2. ``spec.os`` (``PodOSNotSupported``, in ``admission.unsupported``);
3. ``securityContext.supplementalGroupsPolicy: Strict`` on a node whose
   ``status.features.supplementalGroupsPolicy`` is not true
   (``SupplementalGroupsPolicyNotSupported``);
4. the scheduler's ``AdmissionCheck``: resources (``admission``), then required node
   affinity and ``nodeSelector`` (``NodeAffinity``), ``spec.nodeName`` (``NodeName``), host
   ports against the other admitted pods' (``NodePorts``), then, for pods not from a static
   manifest, the node's ``NoExecute`` taints the pod does not tolerate (``TaintToleration``).

A predicate refusal is reason = the plugin's name and message ``Predicate <name> failed:
<the plugin's reason>``; only the first failure is reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.podspec import Pod

OS_LABEL: Final = "kubernetes.io/os"
NODE_OS: Final = "linux"

OS_SELECTOR_MISMATCH: Final = "PodOSSelectorNodeLabelDoesNotMatch"
OS_SELECTOR_MESSAGE: Final = (
    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
)
SUPPLEMENTAL_GROUPS_NOT_SUPPORTED: Final = "SupplementalGroupsPolicyNotSupported"
SUPPLEMENTAL_GROUPS_MESSAGE: Final = "SupplementalGroupsPolicy=Strict is not supported in this node"

NODE_AFFINITY: Final = "NodeAffinity"
NODE_AFFINITY_REASON: Final = "node(s) didn't match Pod's node affinity/selector"
NODE_NAME: Final = "NodeName"
NODE_NAME_REASON: Final = "node(s) didn't match the requested node name"
NODE_PORTS: Final = "NodePorts"
NODE_PORTS_REASON: Final = "node(s) didn't have free ports for the requested pod ports"
TAINT_TOLERATION: Final = "TaintToleration"
TAINT_TOLERATION_REASON: Final = "node(s) had taints that the pod didn't tolerate"

BIND_ALL: Final = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: str
    message: str


def predicate_failed(name: str, why: str) -> Refusal:
    """A ``PredicateFailureError``: reason the plugin's name, its ``Error()`` as message."""
    return Refusal(name, f"Predicate {name} failed: {why}")


# --- before the general filter --------------------------------------------------------------


def os_label(pod: Pod) -> Refusal | None:
    """``rejectPodAdmissionBasedOnOSSelector``: the pod's own ``kubernetes.io/os`` label (not
    its nodeSelector) must name the node's OS."""
    wanted = pod.metadata.labels.get(OS_LABEL)
    if wanted is not None and wanted != NODE_OS:
        return Refusal(OS_SELECTOR_MISMATCH, OS_SELECTOR_MESSAGE)
    return None


def supplemental_groups(pod: Pod, node: Mapping[str, Any]) -> Refusal | None:
    """``Strict`` needs a node that declares it (``status.features.supplementalGroupsPolicy``)."""
    context = pod.spec.security_context
    if context is None or context.supplemental_groups_policy != "Strict":
        return None
    features = (node.get("status") or {}).get("features") or {}
    if features.get("supplementalGroupsPolicy") is True:
        return None
    return Refusal(SUPPLEMENTAL_GROUPS_NOT_SUPPORTED, SUPPLEMENTAL_GROUPS_MESSAGE)


# --- node affinity and nodeSelector ---------------------------------------------------------


_INT64: Final = 2**63


def _integer(text: Any) -> int | None:
    """``strconv.ParseInt(text, 10, 64)``, None where it fails."""
    if not isinstance(text, str) or re.fullmatch(r"[+-]?[0-9]+", text, re.ASCII) is None:
        return None
    number = int(text)
    return number if -_INT64 <= number < _INT64 else None


def _requirement(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """One ``matchExpressions`` entry against the node's labels (``labels.Requirement``);
    None when it cannot be parsed (the whole term then matches nothing)."""
    key, op = expr.get("key", ""), expr.get("operator", "")
    values = list(expr.get("values") or ())
    present = key in labels
    match op:
        case "In" | "NotIn":
            if not values:
                return None
            hit = present and labels[key] in values
            return hit if op == "In" else not hit
        case "Exists" | "DoesNotExist":
            if values:
                return None
            return present if op == "Exists" else not present
        case "Gt" | "Lt":
            if len(values) != 1 or (bound := _integer(values[0])) is None:
                return None
            have = _integer(labels.get(key)) if present else None
            if have is None:
                return False
            return have > bound if op == "Gt" else have < bound
    return None


def _field(expr: Mapping[str, Any], fields: Mapping[str, str]) -> bool | None:
    """One ``matchFields`` entry (``metadata.name`` with ``In``/``NotIn`` and one value)."""
    values = list(expr.get("values") or ())
    op = expr.get("operator", "")
    if op not in ("In", "NotIn") or len(values) != 1:
        return None
    equal = fields.get(expr.get("key", "")) == values[0]
    return equal if op == "In" else not equal


def _term(term: Mapping[str, Any], labels: Mapping[str, str], fields: Mapping[str, str]) -> bool:
    expressions = list(term.get("matchExpressions") or ())
    matched = [_requirement(e, labels) for e in expressions]
    by_field = [_field(e, fields) for e in term.get("matchFields") or ()]
    if None in matched or None in by_field:
        return False
    if expressions and not all(matched):
        return False
    return not (by_field and fields and not all(by_field))


def node_affinity_matches(pod: Pod, node: Mapping[str, Any]) -> bool:
    """``GetRequiredNodeAffinity(pod).Match(node)``: every ``nodeSelector`` label, and one of
    the required node selector terms (an empty term matches nothing)."""
    meta = node.get("metadata") or {}
    labels: Mapping[str, str] = meta.get("labels") or {}
    if any(labels.get(k) != v for k, v in pod.spec.node_selector.items()):
        return False
    affinity = (pod.spec.affinity or {}).get("nodeAffinity") or {}
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    if required is None:
        return True
    fields = {"metadata.name": meta["name"]} if meta.get("name") else {}
    terms = [
        t
        for t in required.get("nodeSelectorTerms") or ()
        if t.get("matchExpressions") or t.get("matchFields")
    ]
    return any(_term(t, labels, fields) for t in terms)


# --- host ports ------------------------------------------------------------------------------


def host_ports(pod: Pod) -> list[tuple[str, str, int]]:
    """(hostIP, protocol, hostPort) of every port with a host port (``GetHostPorts``: the
    sidecars' and the regular containers'), blanks as the scheduler fills them."""
    sidecars = [c for c in pod.spec.init_containers if c.restart_policy == "Always"]
    return [
        (p.host_ip or BIND_ALL, p.protocol or "TCP", p.host_port)
        for c in (*sidecars, *pod.spec.containers)
        for p in c.ports
        if p.host_port > 0
    ]


def host_ports_fit(pod: Pod, others: Iterable[Pod]) -> bool:
    """``nodeports.Fits``: no wanted (ip, protocol, port) is in use; ``0.0.0.0`` on either
    side overlaps every address (``HostPortInfo.CheckConflict``)."""
    wanted = host_ports(pod)
    if not wanted:
        return True
    in_use: dict[str, set[tuple[str, int]]] = {}
    for other in others:
        for ip, protocol, port in host_ports(other):
            in_use.setdefault(ip, set()).add((protocol, port))
    for ip, protocol, port in wanted:
        keys: Iterable[str] = in_use if ip == BIND_ALL else (BIND_ALL, ip)
        if any((protocol, port) in in_use.get(key, ()) for key in keys):
            return False
    return True


# --- taints ----------------------------------------------------------------------------------


def _tolerates(
    toleration: Mapping[str, Any], taint: Mapping[str, Any], *, comparison_operators: bool
) -> bool:
    """``Toleration.ToleratesTaint``."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    value, theirs = toleration.get("value") or "", taint.get("value") or ""
    match toleration.get("operator") or "":
        case "" | "Equal":
            return bool(value == theirs)
        case "Exists":
            return True
        case "Lt" | "Gt" as op if comparison_operators:
            mine, other = _integer(value), _integer(theirs)
            if mine is None or other is None:
                return False
            return other < mine if op == "Lt" else other > mine
    return False


def untolerated_no_execute(
    pod: Pod, taints: Sequence[Mapping[str, Any]], *, comparison_operators: bool = False
) -> Mapping[str, Any] | None:
    """The first ``NoExecute`` taint no toleration of the pod tolerates
    (``FindMatchingUntoleratedTaint``), else None. ``comparison_operators``: the
    ``TaintTolerationComparisonOperators`` gate (``Lt``/``Gt`` tolerations)."""
    for taint in taints:
        if taint.get("effect") != "NoExecute":
            continue
        if not any(
            _tolerates(t, taint, comparison_operators=comparison_operators)
            for t in pod.spec.tolerations
        ):
            return taint
    return None


# --- the non-resource part of the general filter -------------------------------------------


def general_predicates(
    pod: Pod,
    node: Mapping[str, Any],
    others: Sequence[Pod],
    *,
    comparison_operators: bool = False,
) -> list[Refusal]:
    """What ``AdmissionCheck`` and the taint check find beside the resources, in their order."""
    refused: list[Refusal] = []
    if not node_affinity_matches(pod, node):
        refused.append(predicate_failed(NODE_AFFINITY, NODE_AFFINITY_REASON))
    name = (node.get("metadata") or {}).get("name", "")
    if pod.spec.node_name and pod.spec.node_name != name:
        refused.append(predicate_failed(NODE_NAME, NODE_NAME_REASON))
    if not host_ports_fit(pod, others):
        refused.append(predicate_failed(NODE_PORTS, NODE_PORTS_REASON))
    taints = (node.get("spec") or {}).get("taints") or ()
    if not pod.is_static and untolerated_no_execute(
        pod, taints, comparison_operators=comparison_operators
    ):
        refused.append(predicate_failed(TAINT_TOLERATION, TAINT_TOLERATION_REASON))
    return refused

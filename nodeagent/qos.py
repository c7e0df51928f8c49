"""Pod QoS class and OOM score adjustment, as the kubelet computes them.

``pod_qos_class`` follows ``pkg/apis/core/v1/helper/qos``: only cpu and memory count, over
containers and init containers; Guaranteed when every container limits both and requests
equal limits; BestEffort when nothing is requested or limited; else Burstable.
``container_oom_score_adj`` follows ``pkg/kubelet/qos/policy.go``. Pure functions.
"""

from __future__ import annotations

import enum
from fractions import Fraction
from typing import Final

from nodeagent.podspec import Container, Pod
from nodeagent.quantity import parse_quantity, value

SYSTEM_CRITICAL_PRIORITY: Final = 2_000_000_000
NODE_CRITICAL_CLASS: Final = "system-node-critical"
GUARANTEED_OOM_SCORE_ADJ: Final = -997
BESTEFFORT_OOM_SCORE_ADJ: Final = 1000
POD_INFRA_OOM_SCORE_ADJ: Final = -998
_QOS_RESOURCES: Final = ("cpu", "memory")


class QOSClass(enum.StrEnum):
    GUARANTEED = "Guaranteed"
    BURSTABLE = "Burstable"
    BEST_EFFORT = "BestEffort"


def compute_qos_class(pod: Pod) -> QOSClass:
    """The QoS class from the spec alone."""
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for container in (*pod.spec.containers, *pod.spec.init_containers):
        for name, raw in container.resources.requests.items():
            if name in _QOS_RESOURCES and (q := parse_quantity(raw)) > 0:
                requests[name] = requests.get(name, Fraction(0)) + q
        found = set()
        for name, raw in container.resources.limits.items():
            if name in _QOS_RESOURCES and (q := parse_quantity(raw)) > 0:
                found.add(name)
                limits[name] = limits.get(name, Fraction(0)) + q
        if not found.issuperset(_QOS_RESOURCES):
            guaranteed = False
    if not requests and not limits:
        return QOSClass.BEST_EFFORT
    if (
        guaranteed
        and all(limits.get(name) == q for name, q in requests.items())
        and len(requests) == len(limits)
    ):
        return QOSClass.GUARANTEED
    return QOSClass.BURSTABLE


def pod_qos_class(pod: Pod) -> QOSClass:
    """``status.qosClass`` when the apiserver has set it (it never changes), else computed."""
    reported = pod.status.get("qosClass")
    if reported in {c.value for c in QOSClass}:
        return QOSClass(reported)
    return compute_qos_class(pod)


def is_critical_pod(pod: Pod) -> bool:
    """Static and mirror pods, and pods with a system-critical priority."""
    if pod.is_static or pod.is_mirror:
        return True
    return pod.spec.priority is not None and pod.spec.priority >= SYSTEM_CRITICAL_PRIORITY


def is_node_critical_pod(pod: Pod) -> bool:
    return is_critical_pod(pod) and pod.spec.priority_class_name == NODE_CRITICAL_CLASS


def container_oom_score_adj(pod: Pod, container: Container, memory_capacity: int) -> int:
    """The ``oom_score_adj`` of ``container``'s processes on a node with this much memory."""
    if is_node_critical_pod(pod):
        return GUARANTEED_OOM_SCORE_ADJ
    qos = pod_qos_class(pod)
    if qos is QOSClass.GUARANTEED:
        return GUARANTEED_OOM_SCORE_ADJ
    if qos is QOSClass.BEST_EFFORT:
        return BESTEFFORT_OOM_SCORE_ADJ
    request = value(container.resources.requests.get("memory", 0))
    adj = 1000 - (1000 * request) // memory_capacity if memory_capacity > 0 else 1000
    if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ:
        return 1000 + GUARANTEED_OOM_SCORE_ADJ
    if adj == BESTEFFORT_OOM_SCORE_ADJ:
        return adj - 1
    return adj

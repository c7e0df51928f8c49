"""The pod pipeline's kubelet metrics, on the default Prometheus registry:

- each PLEG relist: ``kubelet_pleg_relist_duration_seconds``, ``..._interval_seconds``
  (between relist starts), ``kubelet_running_pods`` (pods with a ready sandbox) and
  ``kubelet_running_containers`` by state (``created``, ``running``, ``exited``,
  ``unknown``; a state no container is in any more drops to 0, where the kubelet's gauge
  keeps its last value);
- each housekeeping: ``kubelet_desired_pods``, ``kubelet_active_pods`` (what admission counts)
  and ``kubelet_mirror_pods``, ``static="true"`` for pods from manifests;
- ``kubelet_containers_per_pod_count`` for each pod a worker starts on;
- ``kubelet_admission_rejections_total`` by reason, with the kubelet's allowlist of reasons
  (an ``OutOf<extended resource>`` is ``OutOfExtendedResources``, anything else ``Other``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID

DEF_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

PLEG_RELIST_DURATION: Final = Histogram(
    "kubelet_pleg_relist_duration_seconds",
    "Duration in seconds for relisting pods in PLEG.",
    buckets=DEF_BUCKETS,
)
PLEG_RELIST_INTERVAL: Final = Histogram(
    "kubelet_pleg_relist_interval_seconds",
    "Interval in seconds between relisting in PLEG.",
    buckets=DEF_BUCKETS,
)
RUNNING_PODS: Final = Gauge(
    "kubelet_running_pods", "Number of pods that have a running pod sandbox"
)
RUNNING_CONTAINERS: Final = Gauge(
    "kubelet_running_containers", "Number of containers currently running", ["container_state"]
)
DESIRED_PODS: Final = Gauge(
    "kubelet_desired_pods",
    "The number of pods the kubelet is being instructed to run. static is true if the pod is "
    "not from the apiserver.",
    ["static"],
)
ACTIVE_PODS: Final = Gauge(
    "kubelet_active_pods",
    "The number of pods the kubelet considers active and which are being considered when "
    "admitting new pods. static is true if the pod is not from the apiserver.",
    ["static"],
)
MIRROR_PODS: Final = Gauge(
    "kubelet_mirror_pods",
    "The number of mirror pods the kubelet will try to create (one per admitted static pod)",
)
CONTAINERS_PER_POD: Final = Histogram(
    "kubelet_containers_per_pod_count",
    "The number of containers per pod.",
    buckets=(1.0, 2.0, 4.0, 8.0, 16.0),
)
ADMISSION_REJECTIONS: Final = Counter(
    "kubelet_admission_rejections_total",
    "Cumulative number pod admission rejections by the Kubelet.",
    ["reason"],
)

# The kubelet's admissionRejectionReasons (pkg/kubelet/kubelet.go), by value.
KNOWN_REJECTIONS: Final = frozenset(
    {
        "AppArmor", "PodOSSelectorNodeLabelDoesNotMatch", "PodOSNotSupported",
        "InvalidNodeInfo", "InitContainerRestartPolicyForbidden",
        "SupplementalGroupsPolicyNotSupported", "UnexpectedAdmissionError", "UnknownReason",
        "UnexpectedPredicateFailureType", "OutOfcpu", "OutOfmemory", "OutOfephemeral-storage",
        "OutOfpods", "PodLevelResourcesNotSupported", "PodFeatureUnsupported",
        "node(s) had taints that the pod didn't tolerate", "Evicted", "SysctlForbidden",
        "TopologyAffinityError", "NodeShutdown", "VolumeAttachmentLimitExceeded",
    }
)  # fmt: skip

_STATES: Final = {
    cri.CONTAINER_CREATED: "created",
    cri.CONTAINER_RUNNING: "running",
    cri.CONTAINER_EXITED: "exited",
    cri.CONTAINER_UNKNOWN: "unknown",
}
_seen_states: set[str] = set()


def rejection_label(reason: str) -> str:
    """``recordAdmissionRejection``'s label for ``reason``."""
    if reason in KNOWN_REJECTIONS:
        return reason
    return "OutOfExtendedResources" if reason.startswith("OutOf") else "Other"


def count_rejection(reason: str) -> None:
    ADMISSION_REJECTIONS.labels(rejection_label(reason)).inc()


def running(sandboxes: Iterable[cri.PodSandbox], containers: Iterable[cri.Container]) -> None:
    """``updateRunningPodAndContainerMetrics`` over one relist."""
    counts: dict[str, int] = {}
    for container in containers:
        state = _STATES.get(container.state, "unknown")
        counts[state] = counts.get(state, 0) + 1
    for state in _seen_states - counts.keys():
        RUNNING_CONTAINERS.labels(state).set(0)
    for state, n in counts.items():
        RUNNING_CONTAINERS.labels(state).set(n)
    _seen_states.update(counts)
    ready = {s.labels.get(POD_UID, s.id) for s in sandboxes if s.state == cri.SANDBOX_READY}
    RUNNING_PODS.set(len(ready))


def pod_counts(desired: Mapping[bool, int], active: Mapping[bool, int], mirrors: int) -> None:
    """The housekeeping gauges; keys: whether the pods are static."""
    for static, label in ((False, ""), (True, "true")):
        DESIRED_PODS.labels(label).set(desired.get(static, 0))
        ACTIVE_PODS.labels(label).set(active.get(static, 0))
    MIRROR_PODS.set(mirrors)

"""Pod admission: does a pod bound to this node fit, and can the agent run it?

``admit_pod`` follows the kubelet's predicate admit handler: the pod's ``spec.os`` must be
linux, then the scheduler's resource fit on allocatable minus what the admitted pods request
(``lifecycle.resources``; pods count first, then cpu, memory, ephemeral-storage, the scalar
resources), then the other general predicates (``lifecycle.predicates``). A refusal carries the
kubelet's reason (``OutOfpods``, ``OutOfcpu``, ``OutOfmemory``, ``OutOfephemeral-storage``,
``NodePorts``, ...) and message
(``Node didn't have enough resource: cpu, requested: 500, used: 1800, capacity: 2000``).
Features nodeagent does not implement are refused with a reason of their own. A quantity that
cannot be computed with (decoding refuses those, so only a pod built another way) is the
kubelet's ``UnexpectedAdmissionError``, never an exception. ``admit_sysctls`` is the kubelet's
sysctl admit handler (it runs before the resource fit): a sysctl the node does not allow is
``SysctlForbidden``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.lifecycle import predicates, resources
from nodeagent.podspec import Pod
from nodeagent.quantity import value
from nodeagent.sysctl import FORBIDDEN_REASON, Allowlist

CHECKED: Final = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


ADMITTED: Final = AdmitResult(admit=True)


def pod_requests(pod: Pod) -> dict[str, int]:
    """cpu (millicores), memory and ephemeral-storage (bytes) the scheduler counts for ``pod``
    (``resources.pod_requests``: sidecars summed, init containers maxed, overhead added)."""
    total = resources.pod_requests(pod)
    return {name: total.get(name, 0) for name in CHECKED}


def _unsupported_pod_fields(pod: Pod) -> AdmitResult | None:
    """Pod-level fields nodeagent does not implement yet, refused by name: running the pod
    without them would break what the field promises (limits, resource claims, user
    namespaces)."""
    spec = pod.spec
    refusals: tuple[tuple[bool, str, str, str], ...] = (
        (
            spec.resources is not None,
            "PodLevelResourcesNotSupported",
            "spec.resources",
            "pod-level resources are not enforced by nodeagent yet",
        ),
        (
            bool(spec.resource_claims),
            "ResourceClaimsNotSupported",
            "spec.resourceClaims",
            "nodeagent has no dynamic resource allocation",
        ),
        (
            spec.host_users is False,
            "UserNamespacesNotSupported",
            "spec.hostUsers",
            "nodeagent does not run pods in user namespaces yet",
        ),
    )
    for refused, reason, field, why in refusals:
        if refused:
            return AdmitResult(False, reason, f"{field}: {why}; the pod was not started")
    return None


def unsupported(pod: Pod) -> AdmitResult | None:
    if pod.spec.os is not None and pod.spec.os.name != "linux":
        return AdmitResult(
            False,
            "PodOSNotSupported",
            "Failed to admit pod as the OS field doesn't match node OS",
        )
    if (refused := _unsupported_pod_fields(pod)) is not None:
        return refused
    for key, containers in (
        ("initContainers", pod.spec.init_containers),
        ("containers", pod.spec.containers),
    ):
        for i, c in enumerate(containers):
            where = f"spec.{key}[{i}]"
            if c.lifecycle is not None and c.lifecycle.stop_signal:
                return AdmitResult(
                    False,
                    "ContainerStopSignalsNotSupported",
                    f"{where}.lifecycle.stopSignal: container {c.name!r} asks for stop signal "
                    f"{c.lifecycle.stop_signal}; nodeagent does not honour stop signals yet",
                )
            for field, probe in (
                ("livenessProbe", c.liveness_probe),
                ("readinessProbe", c.readiness_probe),
                ("startupProbe", c.startup_probe),
            ):
                if probe is not None and key == "initContainers" and c.restart_policy != "Always":
                    return AdmitResult(
                        False,
                        "ProbesNotSupported",
                        f"{where}.{field}: init container {c.name!r} has a probe; only "
                        "regular and sidecar (restartPolicy: Always) containers are probed",
                    )
    return None


def admit_sysctls(pod: Pod, allowlist: Allowlist) -> AdmitResult | None:
    """None when every sysctl of the pod is on the node's ``allowlist`` (and its namespace is
    the pod's own), else the kubelet's refusal for the first one that is not."""
    context = pod.spec.security_context
    for sysctl in context.sysctls if context is not None else ():
        problem = allowlist.problem(
            sysctl.name, host_network=pod.spec.host_network, host_ipc=pod.spec.host_ipc
        )
        if problem is not None:
            return AdmitResult(False, FORBIDDEN_REASON, f"forbidden sysctl: {problem}")
    return None


UNEXPECTED_ADMISSION_ERROR: Final = "UnexpectedAdmissionError"


def admit_pod(
    pod: Pod,
    *,
    allocatable: Mapping[str, str | int],
    admitted: Sequence[Pod],
    node: Mapping[str, Any] | None = None,
    comparison_operators: bool = False,
) -> AdmitResult:
    """Whether ``pod`` may run next to the ``admitted`` pods (the kubelet's active pods, with
    their allocated resources). With the ``node`` object, the general predicates too
    (``lifecycle.predicates``); ``comparison_operators``: the
    ``TaintTolerationComparisonOperators`` gate."""
    try:
        return _admit(
            pod,
            allocatable=allocatable,
            admitted=admitted,
            node=node,
            comparison_operators=comparison_operators,
        )
    except (ValueError, ArithmeticError) as e:
        return AdmitResult(
            False,
            UNEXPECTED_ADMISSION_ERROR,
            f"Allocate failed due to {e}, which is unexpected",
        )


def _refused(refusal: predicates.Refusal) -> AdmitResult:
    return AdmitResult(False, refusal.reason, refusal.message)


def _admit(
    pod: Pod,
    *,
    allocatable: Mapping[str, str | int],
    admitted: Sequence[Pod],
    node: Mapping[str, Any] | None,
    comparison_operators: bool,
) -> AdmitResult:
    if node is not None and (label := predicates.os_label(pod)) is not None:
        return _refused(label)
    refused = unsupported(pod)
    if refused is not None:
        return refused
    if node is not None and (groups := predicates.supplemental_groups(pod, node)) is not None:
        return _refused(groups)
    short = _resource_fit(pod, allocatable=allocatable, admitted=admitted)
    if short is not None:
        return short
    if node is not None:
        for failure in predicates.general_predicates(
            pod, node, admitted, comparison_operators=comparison_operators
        ):
            return _refused(failure)
    return ADMITTED


def _resource_fit(
    pod: Pod, *, allocatable: Mapping[str, str | int], admitted: Sequence[Pod]
) -> AdmitResult | None:
    """``noderesources.Fits``: pods first, then cpu, memory, ephemeral-storage and the scalar
    resources (sorted); the first short one is the refusal."""
    capacity_pods = int(value(allocatable.get("pods", 0)))
    if len(admitted) + 1 > capacity_pods:
        return _out_of("pods", 1, len(admitted), capacity_pods)
    # extended resources the node lacks are the cluster's (removeMissingExtendedResources)
    wanted = {
        name: amount
        for name, amount in resources.pod_requests(pod).items()
        if not resources.is_extended(name) or name in allocatable
    }
    if not any(wanted.values()):
        return None
    used = resources.used(admitted)
    scalar = sorted(name for name in wanted if name not in resources.NAMED)
    for name in (*resources.NAMED, *scalar):
        want = wanted.get(name, 0)
        capacity = resources.amount(name, allocatable.get(name, 0))
        if want > 0 and want > capacity - used.get(name, 0):
            return _out_of(name, want, used.get(name, 0), capacity)
    return None


def _out_of(resource: str, requested: int, used: int, capacity: int) -> AdmitResult:
    return AdmitResult(
        False,
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
    )

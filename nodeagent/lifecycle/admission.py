"""Pod admission: does a pod bound to this node fit, and can the agent run it?

``admit_pod`` follows the kubelet's predicate admit handler: the pod's ``spec.os`` must be
linux, then the scheduler's resource fit on allocatable minus what the admitted pods request
(pods count first, then cpu, memory, ephemeral-storage). A refusal carries the kubelet's reason
(``OutOfpods``, ``OutOfcpu``, ``OutOfmemory``, ``OutOfephemeral-storage``) and message
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
from typing import Final

from nodeagent.podspec import Container, Pod
from nodeagent.quantity import milli_value, value
from nodeagent.sysctl import FORBIDDEN_REASON, Allowlist

CHECKED: Final = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class AdmitResult:
    admit: bool
    reason: str = ""
    message: str = ""


ADMITTED: Final = AdmitResult(admit=True)


def _amount(resource: str, raw: str | int | float) -> int:
    return milli_value(raw) if resource == "cpu" else value(raw)


def _container_requests(container: Container) -> dict[str, int]:
    return {
        name: _amount(name, raw)
        for name, raw in container.resources.requests.items()
        if name in CHECKED
    }


def pod_requests(pod: Pod) -> dict[str, int]:
    """cpu (millicores), memory and ephemeral-storage (bytes) the scheduler counts for ``pod``:
    the sum over containers and sidecars (which keep running), at least what each init
    container needs beside the sidecars started before it, plus the overhead."""
    total: dict[str, int] = dict.fromkeys(CHECKED, 0)
    for container in pod.spec.containers:
        for name, amount in _container_requests(container).items():
            total[name] += amount
    sidecars: dict[str, int] = dict.fromkeys(CHECKED, 0)
    peak: dict[str, int] = dict.fromkeys(CHECKED, 0)
    for container in pod.spec.init_containers:
        requests = _container_requests(container)
        if container.restart_policy == "Always":
            for name, amount in requests.items():
                total[name] += amount
                sidecars[name] += amount
            needed = dict(sidecars)
        else:
            needed = {name: sidecars[name] + requests.get(name, 0) for name in CHECKED}
        for name in CHECKED:
            peak[name] = max(peak[name], needed[name])
    for name in CHECKED:
        total[name] = max(total[name], peak[name])
    for name, raw in pod.spec.overhead.items():
        if name in total:
            total[name] += _amount(name, raw)
    return total


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
            if c.volume_devices:
                return AdmitResult(
                    False,
                    "VolumeDevicesNotSupported",
                    f"{where}.volumeDevices: container {c.name!r} asks for raw block devices; "
                    "nodeagent does not map volumeMode: Block volumes yet",
                )
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
    pod: Pod, *, allocatable: Mapping[str, str | int], admitted: Sequence[Pod]
) -> AdmitResult:
    """Whether ``pod`` may run next to the ``admitted`` (non-terminal) pods."""
    try:
        return _admit(pod, allocatable=allocatable, admitted=admitted)
    except (ValueError, ArithmeticError) as e:
        return AdmitResult(
            False,
            UNEXPECTED_ADMISSION_ERROR,
            f"Allocate failed due to {e}, which is unexpected",
        )


def _admit(
    pod: Pod, *, allocatable: Mapping[str, str | int], admitted: Sequence[Pod]
) -> AdmitResult:
    refused = unsupported(pod)
    if refused is not None:
        return refused
    capacity_pods = int(value(allocatable.get("pods", 0)))
    if len(admitted) + 1 > capacity_pods:
        return _out_of("pods", 1, len(admitted), capacity_pods)
    wanted = pod_requests(pod)
    if not any(wanted.values()):
        return ADMITTED
    used: dict[str, int] = dict.fromkeys(CHECKED, 0)
    for other in admitted:
        for name, amount in pod_requests(other).items():
            used[name] += amount
    for name in CHECKED:
        capacity = _amount(name, allocatable.get(name, 0))
        if wanted[name] > 0 and wanted[name] > capacity - used[name]:
            return _out_of(name, wanted[name], used[name], capacity)
    return ADMITTED


def _out_of(resource: str, requested: int, used: int, capacity: int) -> AdmitResult:
    return AdmitResult(
        False,
        f"OutOf{resource}",
        f"Node didn't have enough resource: {resource}, requested: {requested}, "
        f"used: {used}, capacity: {capacity}",
    )

"""In-place pod resize decisions, as the kubelet's allocation manager makes them. Pure.

A pod's *allocation* is the resources (``requests``/``limits`` of its containers and sidecars)
the node admitted it with. The spec may ask for others (``kubectl patch --subresource
resize``); until the node accepts them the pod keeps running with its allocation:

- :func:`allocated_pod`: the pod with its allocated resources in place of the spec's
  (``UpdatePodFromAllocation``), and whether they differ (a resize is requested);
- :func:`resize_admission`: may the desired resources be allocated now? ``Infeasible`` (never on
  this node: a static pod, a container with swap, more than allocatable, with the kubelet's
  messages) or ``Deferred`` (not now: the other pods' allocations leave no room; the kubelet's
  predicate message), else accepted;
- :func:`resize_restarts`: the containers whose ``resizePolicy`` says ``RestartContainer`` for
  a resource that changed;
- the ``PodResizePending``/``PodResizeInProgress`` conditions and the ``Resize*`` Event messages
  (the kubelet's JSON summary of the containers' resources and the pod's generation).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from nodeagent.kuberuntime.resources import SwapInputs, container_swap
from nodeagent.lifecycle.admission import admit_pod, pod_requests
from nodeagent.podspec import Container, Pod, ResourceRequirements
from nodeagent.quantity import milli_value, value

PENDING: Final = "PodResizePending"
IN_PROGRESS: Final = "PodResizeInProgress"
INFEASIBLE: Final = "Infeasible"
DEFERRED: Final = "Deferred"
ERROR: Final = "Error"
STATIC_POD_MESSAGE: Final = "In-place resize of static-pods is not supported"
SWAP_MESSAGE: Final = "In-place resize of containers with swap is not supported."
CAPACITY_MESSAGE: Final = "Node didn't have enough capacity: "
MEMORY_USAGE_MESSAGE: Final = (
    "aborting attempt to set pod memory limit less than current memory usage for pod {pod}"
)
RESIZE_RESTART_MESSAGE: Final = "Container {name} resize requires restart"
RESIZABLE: Final = ("cpu", "memory")

# Event reasons (pkg/kubelet/events)
RESIZE_STARTED: Final = "ResizeStarted"
RESIZE_COMPLETED: Final = "ResizeCompleted"
RESIZE_DEFERRED: Final = "ResizeDeferred"
RESIZE_INFEASIBLE: Final = "ResizeInfeasible"
RESIZE_ERROR: Final = "ResizeError"

Resources = dict[str, dict[str, str]]
"""``{"requests": {...}, "limits": {...}}`` of one container, quantities as strings."""
Allocation = dict[str, Resources]
"""Container name -> its allocated resources."""


def _text(raw: str | int | float) -> str:
    return raw if isinstance(raw, str) else str(raw)


def container_resources(container: Container) -> Resources:
    res = container.resources
    return {
        "requests": {k: _text(v) for k, v in sorted(res.requests.items())},
        "limits": {k: _text(v) for k, v in sorted(res.limits.items())},
    }


def resizable_containers(pod: Pod) -> tuple[Container, ...]:
    """Regular containers and sidecars (``IsResizableContainer`` without the init-container
    gate): a plain init container has finished before a resize could matter."""
    sidecars = tuple(c for c in pod.spec.init_containers if c.restart_policy == "Always")
    return (*sidecars, *pod.spec.containers)


def allocation_of(pod: Pod) -> Allocation:
    """What to checkpoint when ``pod`` is admitted or its resize accepted."""
    return {c.name: container_resources(c) for c in resizable_containers(pod)}


def same_resources(a: Resources, b: Resources) -> bool:
    """Semantic equality: ``1`` cpu equals ``1000m``."""
    for part in ("requests", "limits"):
        x, y = a.get(part, {}), b.get(part, {})
        if x.keys() != y.keys():
            return False
        for name in x:
            try:
                if _amount(name, x[name]) != _amount(name, y[name]):
                    return False
            except (ValueError, ArithmeticError):
                if x[name] != y[name]:
                    return False
    return True


def _amount(name: str, raw: str | int | float) -> int:
    return milli_value(raw) if name == "cpu" else value(raw)


def _with(container: Container, resources: Resources) -> Container:
    return msgspec.structs.replace(
        container,
        resources=ResourceRequirements(
            requests=dict(resources.get("requests", {})), limits=dict(resources.get("limits", {}))
        ),
    )


def allocated_pod(pod: Pod, allocation: Mapping[str, Resources] | None) -> tuple[Pod, bool]:
    """(the pod with its allocated resources, whether the spec asks for other ones)."""
    if not allocation:
        return pod, False
    changed = False

    def swap(containers: Sequence[Container]) -> tuple[Container, ...]:
        nonlocal changed
        out = []
        for c in containers:
            alloc = allocation.get(c.name)
            if alloc is not None and not same_resources(container_resources(c), alloc):
                changed = True
                out.append(_with(c, alloc))
            else:
                out.append(c)
        return tuple(out)

    spec = msgspec.structs.replace(
        pod.spec,
        init_containers=swap(pod.spec.init_containers),
        containers=swap(pod.spec.containers),
    )
    if not changed:
        return pod, False
    return msgspec.structs.replace(pod, spec=spec), True


@dataclass(frozen=True, slots=True)
class ResizeDecision:
    accepted: bool
    reason: str = ""
    message: str = ""


ACCEPTED: Final = ResizeDecision(accepted=True)


def _swap_involved(
    desired: Pod, allocated: Pod, swap: SwapInputs
) -> bool:  # disallowResizeForSwappableContainers
    allocated_by_name = {c.name: c for c in resizable_containers(allocated)}
    for c in resizable_containers(desired):
        old = allocated_by_name.get(c.name)
        if old is None:
            continue
        new_req = c.resources.requests.get("memory")
        old_req = old.resources.requests.get("memory")
        same = (new_req is None and old_req is None) or (
            new_req is not None and old_req is not None and value(new_req) == value(old_req)
        )
        if same or restart_policy(old, "memory") == "RestartContainer":
            continue
        for pod, container in ((desired, c), (allocated, old)):
            decision = container_swap(pod, container, swap)
            if decision.limit:
                return True
    return False


def resize_admission(
    desired: Pod,
    allocated: Pod,
    *,
    allocatable: Mapping[str, str | int],
    others: Sequence[Pod],
    swap: SwapInputs | None = None,
) -> ResizeDecision:
    """The kubelet's resize admit handler and predicate fit, in its order. ``others``: the
    other active pods, with their allocated resources."""
    if desired.is_static:
        return ResizeDecision(False, INFEASIBLE, STATIC_POD_MESSAGE)
    if swap is not None and _swap_involved(desired, allocated, swap):
        return ResizeDecision(False, INFEASIBLE, SWAP_MESSAGE)
    try:
        wanted = pod_requests(desired)
        cpu = milli_value(allocatable.get("cpu", 0))
        memory = value(allocatable.get("memory", 0))
    except (ValueError, ArithmeticError) as e:
        return ResizeDecision(False, INFEASIBLE, f"cannot compute the resize: {e}")
    if wanted["memory"] > memory:
        return ResizeDecision(
            False,
            INFEASIBLE,
            f"{CAPACITY_MESSAGE}memory, requested: {wanted['memory']}, capacity: {memory}",
        )
    if wanted["cpu"] > cpu:
        return ResizeDecision(
            False, INFEASIBLE, f"{CAPACITY_MESSAGE}cpu, requested: {wanted['cpu']}, capacity: {cpu}"
        )
    fit = admit_pod(
        desired,
        allocatable={**allocatable, "pods": len(others) + 1},
        admitted=[p for p in others if p.uid != desired.uid],
    )
    if not fit.admit:
        return ResizeDecision(False, DEFERRED, fit.message)
    return ACCEPTED


def restart_policy(container: Container, resource: str) -> str:
    for policy in container.resize_policy:
        if policy.resource_name == resource:
            return policy.restart_policy
    return "NotRequired"


def _changed(old: Resources, new: Resources, resource: str) -> bool:
    for part in ("requests", "limits"):
        if resource == "memory" and part == "requests":
            continue  # memory requests are not written anywhere: no restart for them
        a, b = old.get(part, {}).get(resource), new.get(part, {}).get(resource)
        if (a is None) != (b is None):
            return True
        if a is not None and b is not None and _amount(resource, a) != _amount(resource, b):
            return True
    return False


def resize_restarts(
    pod: Pod, actuated: Mapping[str, Resources], running: Sequence[str]
) -> dict[str, str]:
    """Running containers (by name) that must restart to take their new allocation: a
    changed resource whose ``resizePolicy`` is ``RestartContainer``; -> the Killing message."""
    out: dict[str, str] = {}
    for c in resizable_containers(pod):
        old = actuated.get(c.name)
        if c.name not in running or old is None:
            continue
        new = container_resources(c)
        if any(
            _changed(old, new, r) and restart_policy(c, r) == "RestartContainer" for r in RESIZABLE
        ):
            out[c.name] = RESIZE_RESTART_MESSAGE.format(name=c.name)
    return out


# --- conditions and events ------------------------------------------------------------------


def condition(
    kind: str, *, reason: str = "", message: str = "", generation: int = 0
) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True"}
    if generation:
        out["observedGeneration"] = generation
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def _go_resources(resources: Resources) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in ("limits", "requests"):
        if resources.get(part):
            out[part] = dict(sorted(resources[part].items()))
    return out


def summary(pod: Pod, generation: int, error: str = "") -> str:
    """The kubelet's ``podResourceSummary`` JSON of the pod's (allocated) resources."""
    body: dict[str, Any] = {}
    inits = [c for c in pod.spec.init_containers]
    if inits:
        body["initContainers"] = [
            {"name": c.name, "resources": _go_resources(container_resources(c))} for c in inits
        ]
    if pod.spec.containers:
        body["containers"] = [
            {"name": c.name, "resources": _go_resources(container_resources(c))}
            for c in pod.spec.containers
        ]
    body["generation"] = generation
    if error:
        body["error"] = error
    return json.dumps(body, separators=(",", ":"))


def event_message(prefix: str, pod: Pod, generation: int, error: str = "") -> str:
    """``Pod resize started: {...}``, ``Pod resize completed``, ``Pod resize error``,
    ``Pod resize Deferred``/``Infeasible`` with the summary."""
    return f"{prefix}: {summary(pod, generation, error)}"

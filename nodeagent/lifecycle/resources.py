"""What a pod requests, as the kubelet's admission counts it. Pure.

The kubelet fits a new pod the way the scheduler does (``noderesources.Fits`` over a
``NodeInfo`` of the other admitted pods), and both sum a pod with component-helpers'
``resource.PodRequests``:

- regular containers and sidecars (init containers with ``restartPolicy: Always``) are summed;
- a plain init container needs its own requests plus the sidecars started before it, and
  the pod needs at least the largest of these (init containers are maxed, not summed);
- the pod's ``overhead`` (RuntimeClass) is added;
- every resource is counted: cpu (millicores), memory, ephemeral-storage (bytes) and the
  *scalar* ones (``hugepages-*``, extended resources such as ``example.com/gpu``, prefixed
  native names), as ``Resource.Add`` counts them.

For a pod that already runs (:func:`pod_requests` with ``use_status``, what ``NodeInfo``
counts with in-place resize on) a container's requests are the largest of its spec's (the
allocation, once the allocation manager has put it there), what it runs with
(``status.containerStatuses[].resources.requests``) and ``allocatedResources``; for a resize
marked ``PodResizePending``/``Infeasible`` the spec is left out. A new pod counts its spec only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from nodeagent.podspec import Container, Pod
from nodeagent.quantity import milli_value, value

Amounts = dict[str, int]
"""Resource name -> amount: millicores for cpu, else the quantity's value (bytes, units)."""

NAMED: Final = ("cpu", "memory", "ephemeral-storage")
"""The resources ``Fits`` checks one by one, in this order, before the scalar ones."""

_SKIPPED: Final = frozenset({"pods"})


def amount(resource: str, raw: str | int | float) -> int:
    """``raw`` as the scheduler's ``Resource`` holds it (ValueError when it is no quantity)."""
    return milli_value(raw) if resource == "cpu" else value(raw)


def is_native(resource: str) -> bool:
    """No domain, or a ``kubernetes.io/`` one (``IsNativeResource``)."""
    return "/" not in resource or "kubernetes.io/" in resource


def is_extended(resource: str) -> bool:
    """A domain-qualified name outside ``kubernetes.io`` (``IsExtendedResourceName``; the
    apiserver has validated the name's syntax)."""
    return not is_native(resource) and not resource.startswith("requests.")


def is_scalar(resource: str) -> bool:
    """Counted beside cpu, memory and ephemeral-storage (``IsScalarResourceName``)."""
    return (
        is_extended(resource)
        or resource.startswith("hugepages-")
        or "kubernetes.io/" in resource
        or resource.startswith("attachable-volumes-")
    )


def counted(resource: str) -> bool:
    return resource in NAMED or (resource not in _SKIPPED and is_scalar(resource))


def _amounts(raw: Mapping[str, Any] | None) -> Amounts:
    return {k: amount(k, v) for k, v in (raw or {}).items() if counted(k)}


def _add(into: Amounts, more: Mapping[str, int]) -> None:
    for name, n in more.items():
        into[name] = into.get(name, 0) + n


def _max(into: Amounts, other: Mapping[str, int]) -> None:
    for name, n in other.items():
        if name not in into or n > into[name]:
            into[name] = n


def _resize_infeasible(pod: Pod) -> bool:
    for condition in pod.status.get("conditions") or ():
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def _statuses(pod: Pod) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for key in ("containerStatuses", "initContainerStatuses"):
        for status in pod.status.get(key) or ():
            out[str(status.get("name", ""))] = status
    return out


def _effective(
    container: Container, statuses: Mapping[str, Mapping[str, Any]] | None, infeasible: bool
) -> Amounts:
    """``determineEffectiveRequests``: the spec, or the largest of spec (left out for an
    infeasible resize), what runs and what was allocated."""
    spec = _amounts(container.resources.requests)
    status = statuses.get(container.name) if statuses is not None else None
    if status is None or status.get("resources") is None:
        return spec
    actuated = _amounts((status.get("resources") or {}).get("requests"))
    allocated = _amounts(status.get("allocatedResources"))
    out = dict(actuated) if infeasible else spec
    _max(out, actuated)
    _max(out, allocated)
    return out


def pod_requests(pod: Pod, *, use_status: bool = False) -> Amounts:
    """What ``pod`` requests (``resource.PodRequests``); ``use_status`` for a pod that already
    runs (``UseStatusResources``). Raises ValueError on a quantity that is none."""
    statuses = _statuses(pod) if use_status else None
    infeasible = use_status and _resize_infeasible(pod)
    total: Amounts = {}
    for container in pod.spec.containers:
        _add(total, _effective(container, statuses, infeasible))
    sidecars: Amounts = {}
    peak: Amounts = {}
    for container in pod.spec.init_containers:
        if container.restart_policy == "Always":
            requests = _effective(container, statuses, infeasible)
            _add(total, requests)
            _add(sidecars, requests)
            needed = dict(sidecars)
        else:
            needed = _amounts(container.resources.requests)
            _add(needed, sidecars)
        _max(peak, needed)
    _max(total, peak)
    _add(total, _amounts(pod.spec.overhead))
    return total


def used(pods: Iterable[Pod]) -> Amounts:
    """The sum the kubelet's ``NodeInfo.Requested`` holds for ``pods`` (already running, so
    their status counts)."""
    total: Amounts = {}
    for pod in pods:
        _add(total, pod_requests(pod, use_status=True))
    return total

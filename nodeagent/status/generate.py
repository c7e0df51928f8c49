"""A pod's whole API status from its spec, the runtime's view and the previous status, as the
kubelet's ``generateAPIPodStatus`` and status manager compute it. Pure.

The previous status (what was last sent, else what the API object carries) keeps what must not
move: ``startTime``, condition transition times, a terminal phase (never left), the reason and
message of an unchanged phase, the pod IPs once the sandbox is gone, and an
``observedGeneration`` never lower than reported. ``status.observedGeneration`` and every
condition the agent makes report the ``metadata.generation`` of the pod they were computed
from; the resize conditions keep their own (the allocation manager's: the generation the
resize was judged or accepted at), as the 1.36 kubelet writes them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any, Final, Protocol

from nodeagent.kuberuntime.actions import sandbox_changed
from nodeagent.kuberuntime.runtime_state import PodRuntimeState
from nodeagent.podspec import Container, Pod
from nodeagent.qos import pod_qos_class
from nodeagent.status.conditions import (
    FAILED,
    KUBELET_CONDITIONS,
    TERMINAL,
    containers_ready,
    kubelet_conditions,
    observed,
    pod_phase,
    ready,
    with_transition_times,
)
from nodeagent.status.containers import WaitingReason, container_statuses

Status = dict[str, Any]
REJECTED_PREFIX: Final = "Pod was rejected: "


class ProbeView(Protocol):
    """The prober's say on the regular and sidecar containers' ``started`` and ``ready``."""

    def apply(self, pod: Pod, statuses: Sequence[MutableMapping[str, Any]]) -> None: ...


def _ips(values: Sequence[str]) -> list[dict[str, str]]:
    return [{"ip": ip} for ip in values]


def _phase(
    phase: str, previous: Status, api_status: Status, evict: tuple[str, str] | None
) -> Status:
    """The phase with its reason and message, from the containers' ``phase``: a terminal
    phase already reported is kept, and with it the reason and message of an unchanged
    phase; ``evict`` fails the pod."""
    if phase not in TERMINAL:
        if previous.get("phase") in TERMINAL:
            phase = previous["phase"]
        elif api_status.get("phase") in TERMINAL:
            phase = api_status["phase"]
    status: Status = {"phase": phase}
    if phase == previous.get("phase"):
        reason = previous.get("reason") or api_status.get("reason")
        message = previous.get("message") or api_status.get("message")
        if reason:
            status["reason"] = reason
        if message:
            status["message"] = message
    if evict is not None:
        status = {"phase": FAILED, "reason": evict[0], "message": evict[1]}
    for source in (previous, api_status):
        settled = source.get("phase")
        if settled in TERMINAL and status["phase"] != settled:
            # a terminal phase is never left, not even for the other terminal phase (a
            # pod failed by its deadline whose killed containers then exit 0)
            status = {"phase": settled}
            status.update({k: source[k] for k in ("reason", "message") if source.get(k)})
            break
    return status


def generate_pod_status(
    pod: Pod,
    runtime: PodRuntimeState,
    *,
    previous: Status,
    reasons: Mapping[str, WaitingReason],
    runtime_name: str,
    host_ips: Sequence[str],
    now: str,
    terminal: bool = False,
    probes: ProbeView | None = None,
    resize_conditions: Sequence[Status] = (),
    resources: Mapping[str, tuple[Status, Status]] | None = None,
    evict: tuple[str, str] | None = None,
) -> Status:
    """``resize_conditions``: ``PodResizePending``/``PodResizeInProgress`` of the allocation
    manager; ``resources``: container name -> (``allocatedResources``, the ``resources`` it
    runs with), reported on the regular and sidecar containers' statuses. ``evict``: (reason,
    message) of an agent module that wants the pod gone (the active deadline: the kubelet's
    ``ShouldEvict``): the phase is Failed with them, unless the API already shows a terminal
    phase."""
    api_status = pod.status

    def statuses_of(
        containers: Sequence[Container], key: str, *, init: bool = False, ephemeral: bool = False
    ) -> list[Status]:
        return container_statuses(
            pod,
            runtime,
            containers=containers,
            previous=previous.get(key) or [],
            reasons=reasons,
            runtime_name=runtime_name,
            init=init,
            ephemeral=ephemeral,
        )

    init_statuses = statuses_of(pod.spec.init_containers, "initContainerStatuses", init=True)
    statuses = statuses_of(pod.spec.containers, "containerStatuses")
    ephemeral_statuses = statuses_of(
        pod.spec.ephemeral_containers, "ephemeralContainerStatuses", ephemeral=True
    )
    if probes is not None:
        probes.apply(pod, statuses)
        sidecars = {c.name for c in pod.spec.init_containers if c.restart_policy == "Always"}
        probes.apply(pod, [s for s in init_statuses if s.get("name") in sidecars])
    if resources:
        _add_resources([*init_statuses, *statuses], resources)
    phase = pod_phase(pod, [*init_statuses, *statuses], terminal=terminal)
    status = _phase(phase, previous, api_status, evict)
    phase = status["phase"]

    others = [
        c for c in api_status.get("conditions") or [] if c.get("type") not in KUBELET_CONDITIONS
    ]
    sandbox_ready = not sandbox_changed(pod, runtime)[0]
    ours = kubelet_conditions(
        pod, [*init_statuses, *statuses], phase, sandbox_ready=sandbox_ready, others=others
    )
    old_conditions = previous.get("conditions") or api_status.get("conditions") or []
    resize = list(resize_conditions) if phase not in TERMINAL else []
    status["conditions"] = [*others, *with_transition_times([*resize, *ours], old_conditions, now)]

    generation = observed_generation(pod, previous)
    if generation:
        status["observedGeneration"] = generation
    _set_addresses(status, pod, runtime, previous=previous, host_ips=host_ips)
    status["startTime"] = previous.get("startTime") or api_status.get("startTime") or now
    if init_statuses:
        status["initContainerStatuses"] = init_statuses
    status["containerStatuses"] = statuses
    if ephemeral_statuses:
        status["ephemeralContainerStatuses"] = ephemeral_statuses
    status["qosClass"] = pod_qos_class(pod).value
    return status


def observed_generation(pod: Pod, previous: Status) -> int:
    """``status.observedGeneration``: the generation of the pod this status was made from
    (the kubelet's ``SetPodStatus``), never below the one reported before (its status
    manager's guard against a sync of an older copy)."""
    return max(pod.metadata.generation, int(previous.get("observedGeneration") or 0))


def _set_addresses(
    status: Status,
    pod: Pod,
    runtime: PodRuntimeState,
    *,
    previous: Status,
    host_ips: Sequence[str],
) -> None:
    """``hostIP(s)``, and ``podIP(s)`` from the newest ready sandbox (the node's for a
    hostNetwork pod), else the ones reported before."""
    if host_ips:
        status["hostIP"] = host_ips[0]
        status["hostIPs"] = _ips(host_ips)
    newest = runtime.sandboxes[0] if runtime.sandboxes else None
    pod_ips: Sequence[str] = newest.ips if newest is not None and newest.ready else ()
    if pod.spec.host_network and not pod_ips:
        pod_ips = host_ips
    if pod_ips:
        status["podIP"] = pod_ips[0]
        status["podIPs"] = _ips(pod_ips)
    elif previous.get("podIPs"):
        status["podIP"] = previous.get("podIP", "")
        status["podIPs"] = previous["podIPs"]


def _add_resources(
    statuses: Sequence[MutableMapping[str, Any]], resources: Mapping[str, tuple[Status, Status]]
) -> None:
    for status in statuses:
        entry = resources.get(str(status.get("name")))
        if entry is None:
            continue
        allocated, actual = entry
        if allocated:
            status["allocatedResources"] = dict(allocated)
        if actual and "running" in (status.get("state") or {}):
            status["resources"] = {k: dict(v) for k, v in actual.items() if v}


def with_container_readiness(
    pod: Pod, status: Status, results: Mapping[str, bool], *, now: str
) -> Status | None:
    """The kubelet's ``SetContainerReadiness``: ``status`` with the readiness probe results
    (raw container ID -> passed) on the ``ready`` flags of the running, started regular and
    sidecar containers they belong to, and ``ContainersReady`` and ``Ready`` made again from
    them; None when no flag moves. The pod's worker may be busy meanwhile (killing a
    terminating pod for its whole grace period): readiness reaches the API without it."""
    sidecars = {c.name for c in pod.spec.init_containers if c.restart_policy == "Always"}
    moved = False
    lists: dict[str, list[Status]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        out = []
        for entry in status.get(key) or []:
            text = str(entry.get("containerID") or "")
            found = results.get(text.split("://", 1)[-1]) if text else None
            probed = key == "containerStatuses" or entry.get("name") in sidecars
            running = "running" in (entry.get("state") or {}) and entry.get("started")
            want = bool(found) if found is not None and probed and running else entry.get("ready")
            moved = moved or want != entry.get("ready")
            out.append(entry if want == entry.get("ready") else {**entry, "ready": want})
        lists[key] = out
    if not moved:
        return None
    updated = {**status}
    for key, out in lists.items():
        if key in status:
            updated[key] = out
    statuses = [*lists["initContainerStatuses"], *lists["containerStatuses"]]
    phase = str(status.get("phase", ""))
    old = status.get("conditions") or []
    generation = pod.metadata.generation
    fresh = {
        "Ready": observed(ready(pod, statuses, phase, old), generation),
        "ContainersReady": observed(containers_ready(pod, statuses, phase), generation),
    }
    remade = with_transition_times(list(fresh.values()), old, now)
    by_type = {c["type"]: c for c in remade}
    conditions = [by_type.pop(c.get("type"), c) for c in old]
    updated["conditions"] = [*conditions, *by_type.values()]
    return updated


def rejected_status(pod: Pod, *, reason: str, message: str, now: str) -> Status:
    """The status of a pod admission refused: Failed, with the kubelet's reason and message
    (and, as every status its ``SetPodStatus`` takes, the pod's generation)."""
    status: Status = {
        "phase": "Failed",
        "reason": reason,
        "message": REJECTED_PREFIX + message,
        "startTime": pod.status.get("startTime") or now,
        "qosClass": pod_qos_class(pod).value,
    }
    generation = observed_generation(pod, pod.status)
    if generation:
        status["observedGeneration"] = generation
    return status

"""Pod phase and the kubelet-owned pod conditions, from API container statuses.

``pod_phase`` is the kubelet's ``getPhase``; the condition functions are those of
``pkg/kubelet/status/generate.go``: Initialized, ContainersReady and Ready with the reasons
``ContainersNotInitialized``, ``ContainersNotReady``, ``PodCompleted``, ``PodFailed`` and
``ReadinessGatesNotReady`` and messages such as ``containers with unready status: [app]``.
Ready also needs the condition of every ``spec.readinessGates`` entry (conditions other
components write on the pod's status) to be True. Each condition the agent writes carries the
``observedGeneration`` of the pod it was computed from (:func:`observed`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from nodeagent.gotext import join_list, quote
from nodeagent.podspec import Pod

Status = dict[str, Any]

PENDING: Final = "Pending"
RUNNING: Final = "Running"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
TERMINAL: Final = frozenset({SUCCEEDED, FAILED})
READINESS_GATES_NOT_READY: Final = "ReadinessGatesNotReady"
KUBELET_CONDITIONS: Final = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
    "PodResizePending",
    "PodResizeInProgress",
)


def _find(statuses: Sequence[Status], name: str) -> Status | None:
    return next((s for s in statuses if s.get("name") == name), None)


def any_regular_container_started(pod: Pod, statuses: Sequence[Status]) -> bool:
    for container in pod.spec.containers:
        status = _find(statuses, container.name)
        if status is None:
            continue
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state or "terminated" in state or "terminated" in last:
            return True
    return False


def _count_sidecars(pod: Pod, statuses: Sequence[Status]) -> tuple[int, int, int, int]:
    """(running, waiting, unknown, not yet started) sidecars, as ``getPhase`` counts them: a
    sidecar that has terminated (and waits to restart) does not count."""
    running = waiting = unknown = pending = 0
    for container in pod.spec.init_containers:
        if container.restart_policy != "Always":
            continue
        status = _find(statuses, container.name)
        if status is None:
            unknown += 1
            continue
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state:
            pending += not status.get("started")
            running += 1
        elif "waiting" in state and "terminated" not in last:
            pending += 1
            waiting += 1
        elif "terminated" not in state and "waiting" not in state:
            unknown += 1
    return running, waiting, unknown, pending


def pod_phase(pod: Pod, statuses: Sequence[Status], *, terminal: bool) -> str:
    """``statuses`` holds init and regular container statuses."""
    pending_init = failed_init = 0
    for container in pod.spec.init_containers:
        if container.restart_policy == "Always":
            continue  # sidecars: counted below
        status = _find(statuses, container.name)
        if status is None:
            pending_init += 1
            continue
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state:
            pending_init += 1
        elif "terminated" in state:
            failed_init += state["terminated"].get("exitCode", 0) != 0
        elif "waiting" in state and "terminated" in last:
            failed_init += last["terminated"].get("exitCode", 0) != 0
        else:
            pending_init += 1

    stopped = succeeded = 0
    running, waiting, unknown, pending_sidecars = _count_sidecars(pod, statuses)
    for container in pod.spec.containers:
        status = _find(statuses, container.name)
        if status is None:
            unknown += 1
            continue
        state, last = status.get("state") or {}, status.get("lastState") or {}
        if "running" in state:
            running += 1
        elif "terminated" in state:
            stopped += 1
            succeeded += state["terminated"].get("exitCode", 0) == 0
        elif "waiting" in state:
            if "terminated" in last:
                stopped += 1
            else:
                waiting += 1
        else:
            unknown += 1

    if failed_init > 0 and pod.spec.restart_policy == "Never":
        return FAILED
    started = any_regular_container_started(pod, statuses)
    if ((pending_init > 0 or pending_sidecars > 0) and not started) or waiting > 0:
        return PENDING
    if running > 0 and unknown == 0:
        return RUNNING
    if running == 0 and stopped > 0 and unknown == 0:
        if terminal and not pod.is_static:
            return SUCCEEDED if stopped == succeeded else FAILED
        if pod.spec.restart_policy == "Always":
            return RUNNING
        if stopped == succeeded:
            return SUCCEEDED
        if pod.spec.restart_policy == "Never":
            return FAILED
        return RUNNING
    return PENDING


def _condition(kind: str, ok: bool, reason: str = "", message: str = "") -> Status:
    condition: Status = {"type": kind, "status": "True" if ok else "False"}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def initialized(pod: Pod, statuses: Sequence[Status], phase: str) -> Status:
    unknown, incomplete = [], []
    for container in pod.spec.init_containers:
        status = _find(statuses, container.name)
        if status is None:
            unknown.append(container.name)
            continue
        if container.restart_policy == "Always":
            if not status.get("started"):
                incomplete.append(container.name)
            continue
        terminated = (status.get("state") or {}).get("terminated")
        if terminated is None or terminated.get("exitCode", 0) != 0:
            incomplete.append(container.name)
    if phase == SUCCEEDED and not unknown:
        return _condition("Initialized", True, "PodCompleted")
    if any_regular_container_started(pod, statuses):
        return _condition("Initialized", True)
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {join_list(unknown)}")
    if incomplete:
        messages.append(f"containers with incomplete status: {join_list(incomplete)}")
    if messages:
        return _condition("Initialized", False, "ContainersNotInitialized", ", ".join(messages))
    return _condition("Initialized", True)


def containers_ready(pod: Pod, statuses: Sequence[Status], phase: str) -> Status:
    unknown, unready = [], []
    sidecars = [c for c in pod.spec.init_containers if c.restart_policy == "Always"]
    for container in (*sidecars, *pod.spec.containers):
        status = _find(statuses, container.name)
        if status is None:
            unknown.append(container.name)
        elif not status.get("ready"):
            unready.append(container.name)
    if phase == SUCCEEDED and not unknown:
        return _condition("ContainersReady", False, "PodCompleted")
    if phase == FAILED:
        return _condition("ContainersReady", False, "PodFailed")
    messages = []
    if unknown:
        messages.append(f"containers with unknown status: {join_list(unknown)}")
    if unready:
        messages.append(f"containers with unready status: {join_list(unready)}")
    if messages:
        return _condition("ContainersReady", False, "ContainersNotReady", ", ".join(messages))
    return _condition("ContainersReady", True)


def readiness_gate_messages(pod: Pod, conditions: Sequence[Status]) -> list[str]:
    """Why each unmet readiness gate holds the pod back, in ``spec.readinessGates`` order."""
    by_type: dict[Any, Status] = {}
    for c in conditions:
        by_type.setdefault(c.get("type"), c)  # the first of a type, as the kubelet looks up
    messages = []
    for gate in pod.spec.readiness_gates:
        kind = str(gate.get("conditionType", ""))
        found = by_type.get(kind)
        if found is None:
            messages.append(
                f"corresponding condition of pod readiness gate {quote(kind)} does not exist."
            )
        elif found.get("status") != "True":
            messages.append(
                f"the status of pod readiness gate {quote(kind)} is not "
                f'"True", but {found.get("status", "")}'
            )
    return messages


def ready(
    pod: Pod, statuses: Sequence[Status], phase: str, conditions: Sequence[Status] = ()
) -> Status:
    """``conditions``: the pod's other conditions, where its readiness gates are looked up."""
    containers = containers_ready(pod, statuses, phase)
    if containers["status"] != "True":
        return {**containers, "type": "Ready"}
    unready = readiness_gate_messages(pod, conditions)
    if unready:
        return _condition("Ready", False, READINESS_GATES_NOT_READY, ", ".join(unready))
    return _condition("Ready", True)


def observed(condition: Status, generation: int) -> Status:
    """``condition`` reporting the pod ``generation`` it was computed from, as every condition
    the 1.36 kubelet writes does (``PodObservedGenerationTracking``, GA and locked on since
    1.35); a generation of 0 (a static pod's) is left out, as Go's ``omitempty`` does."""
    return {**condition, "observedGeneration": generation} if generation else condition


def kubelet_conditions(
    pod: Pod,
    statuses: Sequence[Status],
    phase: str,
    *,
    sandbox_ready: bool,
    others: Sequence[Status] = (),
) -> list[Status]:
    """In the kubelet's order, after the conditions other components own (``others``, where
    the readiness gates are looked up), each observing the pod's ``metadata.generation``."""
    before = [
        _condition("PodReadyToStartContainers", sandbox_ready),
        initialized(pod, statuses, phase),
    ]
    made = [
        *before,
        ready(pod, statuses, phase, [*others, *before]),
        containers_ready(pod, statuses, phase),
        _condition("PodScheduled", True),
    ]
    return [observed(c, pod.metadata.generation) for c in made]


def needs_readiness_reconcile(pod: Pod) -> bool:
    """The kubelet's ``NeedToReconcilePodReadiness``: the pod has readiness gates and the
    Ready condition its API status carries is not what its conditions and container statuses
    make it (a controller changed a gate's condition): sync it now."""
    if not pod.spec.readiness_gates:
        return False
    status = pod.status
    conditions = status.get("conditions") or []
    current = next((c for c in conditions if c.get("type") == "Ready"), None)
    if current is None:
        return False
    statuses = [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]
    wanted = ready(pod, statuses, str(status.get("phase", "")), conditions)
    return bool(
        current.get("status") != wanted["status"]
        or current.get("message", "") != wanted.get("message", "")
    )


def with_transition_times(
    conditions: Sequence[Status], old: Sequence[Status], now: str
) -> list[Status]:
    """Keep an old condition's lastTransitionTime while its status is unchanged."""
    old_by_type = {c.get("type"): c for c in old}
    out = []
    for condition in conditions:
        previous = old_by_type.get(condition["type"])
        since = now
        if previous is not None and previous.get("status") == condition["status"]:
            since = previous.get("lastTransitionTime") or now
        out.append({**condition, "lastProbeTime": None, "lastTransitionTime": since})
    return out

"""API container statuses from runtime records, as the kubelet's
``convertToAPIContainerStatuses`` builds them.

Every spec container gets a status: the newest runtime container's state (running,
terminated with its exit code and reason, or waiting), the one before it as ``lastState``, the
restart count from its annotation, ``containerd://<id>``, the image and the image's digest
reference. A container that has none yet waits with ``ContainerCreating`` (``PodInitializing``
when the pod has init containers); one that will be restarted and failed to start waits with
the reason the last sync recorded (``CrashLoopBackOff``, ``ErrImagePull``, ...). Ephemeral
containers get the same statuses, never ready and without ``started`` (the prober never sets
it for them), waiting with a recorded reason only until they have been created once. Pure.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Final

from nodeagent.gotext import SECOND, rfc3339
from nodeagent.kuberuntime.actions import should_container_be_restarted
from nodeagent.kuberuntime.results import ContainerFailure
from nodeagent.kuberuntime.runtime_state import ContainerRecord, ContainerState, PodRuntimeState
from nodeagent.podspec import Container, Pod

CONTAINER_CREATING: Final = "ContainerCreating"
POD_INITIALIZING: Final = "PodInitializing"
STATUS_UNKNOWN: Final = "ContainerStatusUnknown"
Status = dict[str, Any]


WaitingReason = ContainerFailure
"""Why the last attempt to start a container failed (the kubelet's reason cache)."""


def cri_time(nanos: int) -> str:
    """A CRI time (Unix nanoseconds) as ``metav1.Time``."""
    return rfc3339(dt.datetime.fromtimestamp(nanos // SECOND, dt.UTC))


def _state(record: ContainerRecord, container_id: str, old: Status | None) -> Status:
    if record.state is ContainerState.RUNNING:
        return {"running": {"startedAt": cri_time(record.started_at)}}
    if record.state is ContainerState.EXITED:
        terminated: Status = {
            "exitCode": record.exit_code,
            "reason": record.reason,
            "startedAt": cri_time(record.started_at),
            "finishedAt": cri_time(record.finished_at),
            "containerID": container_id,
        }
        if record.message:
            terminated["message"] = record.message
        if not record.reason:
            del terminated["reason"]
        return {"terminated": terminated}
    if record.state is ContainerState.UNKNOWN and old and "running" in old.get("state", {}):
        return {
            "terminated": {
                "exitCode": 137,
                "reason": STATUS_UNKNOWN,
                "message": "The container could not be located when the pod was terminated",
            }
        }
    return {"waiting": {}}


def _convert(
    record: ContainerRecord,
    *,
    runtime_name: str,
    old: Status | None,
    init: bool,
    sidecar: bool = False,
    ephemeral: bool = False,
) -> Status:
    """``sidecar``: an init container with ``restartPolicy: Always``, ready and started while
    it runs (until its probes say otherwise), like a regular container. ``ephemeral``: never
    ready, no ``started``."""
    container_id = f"{runtime_name}://{record.id}"
    state = _state(record, container_id, old)
    running = "running" in state
    succeeded = state.get("terminated", {}).get("exitCode") == 0
    status: Status = {
        "name": record.name,
        "state": state,
        "lastState": {},
        "ready": False if ephemeral else succeeded if init and not sidecar else running,
        "restartCount": record.restart_count,
        "image": record.image,
        "imageID": record.image_ref,
        "containerID": container_id,
        "started": running,
    }
    if ephemeral:
        del status["started"]
    return status


def _defaults(
    containers: Sequence[Container],
    old_by_name: Mapping[str, Status],
    default_reason: str,
    *,
    ephemeral: bool = False,
) -> dict[str, Status]:
    statuses: dict[str, Status] = {}
    for container in containers:
        status: Status = {
            "name": container.name,
            "state": {"waiting": {"reason": default_reason}},
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": container.image,
            "imageID": "",
        }
        if not ephemeral:
            status["started"] = False
        old = old_by_name.get(container.name)
        if old is not None:
            if "terminated" in (old.get("state") or {}):
                status = copy.deepcopy(old)
            else:
                status["restartCount"] = old.get("restartCount", 0)
                status["lastState"] = copy.deepcopy(old.get("lastState") or {})
        statuses[container.name] = status
    return statuses


def _infer_lost(
    pod: Pod,
    runtime: PodRuntimeState,
    statuses: dict[str, Status],
    old_by_name: Mapping[str, Status],
    default_reason: str,
) -> None:
    """A container that was running and has vanished from the runtime did terminate."""
    seen_names = {r.name for r in runtime.containers}
    for name, status in statuses.items():
        old = old_by_name.get(name)
        if name in seen_names or old is None or "running" not in (old.get("state") or {}):
            continue
        waiting = status["state"].get("waiting")
        if waiting is None or waiting.get("reason") != default_reason:
            continue
        if "terminated" in status["lastState"]:
            continue
        status["lastState"] = {
            "terminated": {
                "exitCode": 137,
                "reason": STATUS_UNKNOWN,
                "message": "The container could not be located when the pod was deleted.  "
                "The container used to be Running",
            }
        }
        if not pod.deleted:
            status["restartCount"] = status.get("restartCount", 0) + 1


def _apply_reasons(
    pod: Pod,
    runtime: PodRuntimeState,
    *,
    containers: Sequence[Container],
    statuses: dict[str, Status],
    reasons: Mapping[str, WaitingReason],
    init: bool,
    ephemeral: bool = False,
) -> None:
    """A container that will be restarted and failed to start waits with the failure's reason
    (an ephemeral container: one never created, or whose start failed)."""
    for container in containers:
        record = runtime.find(container.name)
        done = record is not None and record.state is ContainerState.EXITED
        if init and done and record is not None and record.exit_code == 0:
            continue
        if ephemeral:
            if record is not None and record.state in (
                ContainerState.RUNNING,
                ContainerState.EXITED,
            ):
                continue
        elif not should_container_be_restarted(container, pod, runtime):
            continue
        why = reasons.get(container.name)
        if why is None:
            continue
        status = statuses[container.name]
        if "terminated" in status["state"]:
            status["lastState"] = status["state"]
        waiting: Status = {"reason": why.reason}
        if why.message:
            waiting["message"] = why.message
        status["state"] = {"waiting": waiting}
        status["ready"] = False
        if not ephemeral:
            status["started"] = False


def container_statuses(
    pod: Pod,
    runtime: PodRuntimeState,
    *,
    containers: Sequence[Container],
    previous: Sequence[Status],
    reasons: Mapping[str, WaitingReason],
    runtime_name: str,
    init: bool,
    ephemeral: bool = False,
) -> list[Status]:
    """``init``: the init containers (spec order); ``ephemeral``: the ephemeral containers;
    else the regular ones. All but the init containers' come sorted by name."""
    default_reason = POD_INITIALIZING if pod.spec.init_containers else CONTAINER_CREATING
    old_by_name = {str(s.get("name")): s for s in previous}
    statuses = _defaults(containers, old_by_name, default_reason, ephemeral=ephemeral)
    _infer_lost(pod, runtime, statuses, old_by_name, default_reason)
    seen: dict[str, int] = {}
    sidecars = {c.name for c in containers if init and c.restart_policy == "Always"}
    for record in runtime.containers:  # newest first: the state, then the last state
        count = seen.get(record.name, 0)
        if record.name not in statuses or count >= 2:
            continue
        old = old_by_name.get(record.name)
        converted = _convert(
            record,
            runtime_name=runtime_name,
            old=old,
            init=init,
            sidecar=record.name in sidecars,
            ephemeral=ephemeral,
        )
        if converted["image"].startswith("sha256:") or not converted["image"]:
            converted["image"] = statuses[record.name]["image"]  # the spec's, not an id
        if count == 0:
            statuses[record.name] = converted
        else:
            statuses[record.name]["lastState"] = converted["state"]
        seen[record.name] = count + 1
    _apply_reasons(
        pod,
        runtime,
        containers=containers,
        statuses=statuses,
        reasons=reasons,
        init=init,
        ephemeral=ephemeral,
    )
    if init:
        return [statuses[c.name] for c in containers]
    return [statuses[name] for name in sorted(statuses)]

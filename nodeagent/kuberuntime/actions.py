"""What to do to bring a pod's runtime state to its spec: the kubelet's ``computePodActions``.

``compute_pod_actions(pod, state)`` is pure. The executor (``manager.RuntimeManager.sync_pod``)
carries the plan out in the kubelet's SyncPod order: kill the pod (when its sandbox must be
replaced or nothing should run any more), kill unwanted containers, create the sandbox, start
the next init container (one at a time), then start the regular containers. Crash-loop
back-off is applied by the executor when it starts a container, as the kubelet's
``doBackOff`` is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent.kuberuntime.labels import container_hash
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    SandboxRecord,
)
from nodeagent.podspec import Container, Pod

# The Killing event's message for a container whose state the runtime lost (the kubelet's
# ``fmt.Sprintf("Container is in %q state, ...", ContainerStateUnknown)``).
UNKNOWN_KILL: Final = 'Container is in "unknown" state, try killing it before restart'
UNKNOWN_INIT_KILL: Final = 'Init container is in "unknown" state, try killing it before restart'


@dataclass(frozen=True, slots=True)
class KillContainer:
    container_id: str
    name: str
    message: str
    grace: int | None = None  # probe-level terminationGracePeriodSeconds, else the pod's


@dataclass(frozen=True, slots=True)
class PodActions:
    kill_pod: bool = False
    create_sandbox: bool = False
    sandbox_id: str = ""
    attempt: int = 0
    next_init_container: str | None = None
    containers_to_start: tuple[str, ...] = ()
    containers_to_kill: tuple[KillContainer, ...] = ()


def should_restart_on_failure(pod: Pod) -> bool:
    return pod.spec.restart_policy != "Never"


def container_succeeded(container: Container, state: PodRuntimeState) -> bool:
    record = state.find(container.name)
    return record is not None and record.state is ContainerState.EXITED and record.exit_code == 0


def should_container_be_restarted(container: Container, pod: Pod, state: PodRuntimeState) -> bool:
    """``kubecontainer.ShouldContainerBeRestarted``."""
    if pod.deleted:
        return False
    record = state.find(container.name)
    if record is None:
        return True
    if record.state is ContainerState.RUNNING:
        return False
    if record.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    if pod.spec.restart_policy == "Never":
        return False
    return not (pod.spec.restart_policy == "OnFailure" and record.exit_code == 0)


def sandbox_changed(pod: Pod, state: PodRuntimeState) -> tuple[bool, int, str]:
    """(a new sandbox is needed, its attempt, the current sandbox id): ``PodSandboxChanged``."""
    if not state.sandboxes:
        return True, 0, ""
    newest: SandboxRecord = state.sandboxes[0]
    ready = sum(1 for s in state.sandboxes if s.ready)
    if ready > 1 or not newest.ready:
        return True, newest.attempt + 1, newest.id
    if newest.host_network != pod.spec.host_network:
        return True, newest.attempt + 1, newest.id
    if not pod.spec.host_network and not newest.ip:
        return True, newest.attempt + 1, newest.id
    return False, newest.attempt, newest.id


def is_init_container_failed(record: ContainerRecord) -> bool:
    if record.state is ContainerState.EXITED and record.exit_code != 0:
        return True
    return record.state is ContainerState.UNKNOWN


def next_init_container(
    pod: Pod, state: PodRuntimeState
) -> tuple[ContainerRecord | None, Container | None, bool]:
    """(last failed init container's record, next init container to run, all done)."""
    inits = pod.spec.init_containers
    if not inits:
        return None, None, True
    for container in pod.spec.containers:
        record = state.find(container.name)
        if record is not None and record.state is ContainerState.RUNNING:
            return None, None, True
    for container in reversed(inits):
        record = state.find(container.name)
        if record is not None and is_init_container_failed(record):
            return record, container, False
    for index in range(len(inits) - 1, -1, -1):
        record = state.find(inits[index].name)
        if record is None:
            continue
        if record.state is ContainerState.RUNNING:
            return None, None, False
        if record.state is ContainerState.EXITED:
            if index == len(inits) - 1:
                return None, None, True
            return None, inits[index + 1], False
    return None, inits[0], False


def _probe_kill(
    pod: Pod, container: Container, record: ContainerRecord, failed: str
) -> KillContainer:
    """A running container whose liveness or startup probe failed: killed (the grace of the
    probe's ``terminationGracePeriodSeconds`` when set), restarted unless restartPolicy Never."""
    probe = container.liveness_probe if failed == "liveness" else container.startup_probe
    message = f"Container {container.name} failed {failed} probe"
    if should_restart_on_failure(pod):
        message += ", will be restarted"
    grace = probe.termination_grace_period_seconds if probe is not None else None
    return KillContainer(record.id, record.name, message, grace)


def compute_pod_actions(
    pod: Pod, state: PodRuntimeState, failed_probes: Mapping[str, str] | None = None
) -> PodActions:
    """``failed_probes``: container ID -> ``liveness``/``startup`` from the prober."""
    if pod.deleted:
        newest = state.sandboxes[0].id if state.sandboxes else ""
        return PodActions(kill_pod=True, sandbox_id=newest)
    create, attempt, sandbox_id = sandbox_changed(pod, state)
    if create:
        return _new_sandbox_actions(pod, state, attempt, sandbox_id)

    last_failed, next_init, done = next_init_container(pod, state)
    if not done:
        if next_init is None:
            return PodActions(sandbox_id=sandbox_id, attempt=attempt)
        if last_failed is not None and not should_restart_on_failure(pod):
            return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
        kills: tuple[KillContainer, ...] = ()
        if last_failed is not None and last_failed.state is ContainerState.UNKNOWN:
            kills = (KillContainer(last_failed.id, last_failed.name, UNKNOWN_INIT_KILL),)
        return PodActions(
            sandbox_id=sandbox_id,
            attempt=attempt,
            next_init_container=next_init.name,
            containers_to_kill=kills,
        )

    to_start: list[str] = []
    to_kill: list[KillContainer] = []
    keep = 0
    for container in pod.spec.containers:
        record = state.find(container.name)
        if record is None or record.state is not ContainerState.RUNNING:
            if should_container_be_restarted(container, pod, state):
                to_start.append(container.name)
                if record is not None and record.state is ContainerState.UNKNOWN:
                    to_kill.append(KillContainer(record.id, record.name, UNKNOWN_KILL))
            continue
        if record.hash and record.hash != container_hash(container):
            message = f"Container {container.name} definition changed, will be restarted"
            to_kill.append(KillContainer(record.id, record.name, message))
            to_start.append(container.name)
            continue
        failed = (failed_probes or {}).get(record.id)
        if failed is not None:
            to_kill.append(_probe_kill(pod, container, record, failed))
            if should_restart_on_failure(pod):
                to_start.append(container.name)
            continue
        keep += 1
    return PodActions(
        kill_pod=keep == 0 and not to_start,
        sandbox_id=sandbox_id,
        attempt=attempt,
        containers_to_start=tuple(to_start),
        containers_to_kill=tuple(to_kill),
    )


def _new_sandbox_actions(
    pod: Pod, state: PodRuntimeState, attempt: int, sandbox_id: str
) -> PodActions:
    if not should_restart_on_failure(pod) and attempt != 0 and state.containers:
        # The pod ran once and must not run again: never a second sandbox.
        return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    to_start = tuple(
        c.name
        for c in pod.spec.containers
        if not (pod.spec.restart_policy == "OnFailure" and container_succeeded(c, state))
    )
    if not to_start and next_init_container(pod, state)[2]:
        return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    if pod.spec.init_containers:
        return PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id=sandbox_id,
            attempt=attempt,
            next_init_container=pod.spec.init_containers[0].name,
        )
    return PodActions(
        kill_pod=True,
        create_sandbox=True,
        sandbox_id=sandbox_id,
        attempt=attempt,
        containers_to_start=to_start,
    )

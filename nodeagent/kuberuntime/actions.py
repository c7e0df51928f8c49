"""What to do to bring a pod's runtime state to its spec: the kubelet's ``computePodActions``.

``compute_pod_actions(pod, state)`` is pure. The executor (``manager.RuntimeManager.sync_pod``)
carries the plan out in the kubelet's SyncPod order: kill the pod (when its sandbox must be
replaced or nothing should run any more), kill unwanted containers, create the sandbox, start
the next init container (one at a time) and the sidecars (init containers with
``restartPolicy: Always``) that must run again, then start the regular containers. Crash-loop
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
    init_containers_to_start: tuple[str, ...] = ()
    """In spec order: the next plain init container, and sidecars to (re)start."""
    containers_to_start: tuple[str, ...] = ()
    containers_to_kill: tuple[KillContainer, ...] = ()
    ephemeral_containers_to_start: tuple[str, ...] = ()
    """In spec order: the ephemeral containers the runtime has never created."""


def should_restart_on_failure(pod: Pod) -> bool:
    return pod.spec.restart_policy != "Never"


def container_succeeded(container: Container, state: PodRuntimeState) -> bool:
    record = state.find(container.name)
    return record is not None and record.state is ContainerState.EXITED and record.exit_code == 0


def should_container_be_restarted(container: Container, pod: Pod, state: PodRuntimeState) -> bool:
    """``kubecontainer.ShouldContainerBeRestarted``; a sidecar is always restarted."""
    if pod.deleted:
        return False
    record = state.find(container.name)
    if record is None:
        return True
    if record.state is ContainerState.RUNNING:
        return False
    if record.state in (ContainerState.UNKNOWN, ContainerState.CREATED):
        return True
    if is_sidecar(container):
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


def is_sidecar(container: Container) -> bool:
    """An init container with ``restartPolicy: Always`` (a restartable init container)."""
    return container.restart_policy == "Always"


def has_sidecars(pod: Pod) -> bool:
    return any(is_sidecar(c) for c in pod.spec.init_containers)


StartupResults = Mapping[str, bool]
"""Container id -> the startup probe's result (absent: not known yet)."""


@dataclass(slots=True)
class _InitPlan:
    to_start: list[int]
    to_kill: list[KillContainer]
    kill_pod: bool = False
    initialized: bool = False


def _sidecar_started(
    container: Container, record: ContainerRecord, startup: StartupResults | None
) -> bool | None:
    """True when a running sidecar counts as started, False when its startup probe failed,
    None while it is still starting. Without a startup probe (or before the prober reports
    any result) running is started."""
    if container.startup_probe is None or startup is None:
        return True
    return startup.get(record.id)


def _running_sidecar(
    plan: _InitPlan,
    container: Container,
    record: ContainerRecord,
    index: int,
    *,
    last: bool,
    previously: bool,
    startup: StartupResults | None,
    failed: str | None = None,
    resized: str | None = None,
) -> bool:
    """Plan for a running sidecar; True when it completes the initialization (the last init
    container, started). ``failed``: ``liveness`` when the prober condemned it (restarted
    without holding back the next init container, as the kubelet does); ``resized``: the
    Killing message when an in-place resize restarts it (``resizePolicy: RestartContainer``;
    the kubelet's ``computePodResizeAction`` for a restartable init container, looked at
    after its definition and its liveness)."""
    started = _sidecar_started(container, record, startup)
    if started is None:
        return False
    if started is False:
        message = f"Init container {container.name} failed startup probe"
        probe = container.startup_probe
        grace = probe.termination_grace_period_seconds if probe is not None else None
        plan.to_kill.append(KillContainer(record.id, record.name, message, grace))
        plan.to_start.append(index)
        return False
    if not last and not previously:
        plan.to_start.append(index + 1)
    if record.hash and record.hash != container_hash(container):
        message = f"Init container {container.name} definition changed"
        plan.to_kill.append(KillContainer(record.id, record.name, message))
        plan.to_start.append(index)
    elif failed == "liveness":
        message = f"Init container {container.name} failed liveness probe"
        probe = container.liveness_probe
        grace = probe.termination_grace_period_seconds if probe is not None else None
        plan.to_kill.append(KillContainer(record.id, record.name, message, grace))
        plan.to_start.append(index)
    elif resized is not None:
        plan.to_kill.append(KillContainer(record.id, record.name, resized))
        plan.to_start.append(index)
    return last


def compute_init_container_actions(
    pod: Pod,
    state: PodRuntimeState,
    startup: StartupResults | None = None,
    failed_probes: Mapping[str, str] | None = None,
    resize_restarts: Mapping[str, str] | None = None,
) -> _InitPlan:
    """The kubelet's ``computeInitContainerActions``: init containers run one after the
    other; a sidecar lets the next one start once it is started and is kept running (and
    restarted whatever the pod's restartPolicy, or when an in-place resize says so:
    ``resize_restarts``); a failed plain init container is retried, or ends the pod under
    ``restartPolicy: Never``."""
    plan = _InitPlan(to_start=[], to_kill=[])
    inits = pod.spec.init_containers
    if not inits:
        plan.initialized = True
        return plan
    initialized = False
    for container in pod.spec.containers:
        record = state.find(container.name)
        if record is not None and record.state in (ContainerState.CREATED, ContainerState.RUNNING):
            initialized = True
            break
    previously = initialized
    restart_on_failure = should_restart_on_failure(pod)
    for index in range(len(inits) - 1, -1, -1):
        container = inits[index]
        sidecar = is_sidecar(container)
        record = state.find(container.name)
        if record is None:
            if previously and sidecar:
                plan.to_start.append(index)
            continue
        if previously and not sidecar:
            continue
        if record.state is ContainerState.CREATED:
            plan.to_start.append(index)
        elif record.state is ContainerState.RUNNING:
            if sidecar and _running_sidecar(
                plan,
                container,
                record,
                index,
                last=index == len(inits) - 1,
                previously=previously,
                startup=startup,
                failed=(failed_probes or {}).get(record.id),
                resized=(resize_restarts or {}).get(container.name),
            ):
                initialized = True
        elif record.state is ContainerState.EXITED:
            if sidecar:
                plan.to_start.append(index)
            elif is_init_container_failed(record):
                if not restart_on_failure:
                    plan.kill_pod = True
                    plan.to_start = []
                    return plan
                plan.to_start.append(index)
            elif index == len(inits) - 1:
                initialized = True
            else:
                plan.to_start.append(index + 1)
        else:  # unknown
            if not sidecar and not restart_on_failure:
                plan.kill_pod = True
                plan.to_start = []
                return plan
            plan.to_kill.append(KillContainer(record.id, record.name, UNKNOWN_INIT_KILL))
            plan.to_start.append(index)
        previously = True
    if not previously:
        plan.to_start.append(0)
    plan.to_start.reverse()
    plan.initialized = initialized
    return plan


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
    pod: Pod,
    state: PodRuntimeState,
    failed_probes: Mapping[str, str] | None = None,
    *,
    startup: StartupResults | None = None,
    resize_restarts: Mapping[str, str] | None = None,
) -> PodActions:
    """``failed_probes``: container ID -> ``liveness``/``startup`` from the prober;
    ``startup``: the startup probes' results by container id (sidecars with a startup probe
    let the next init container start once theirs succeeded); ``resize_restarts``: running
    containers and sidecars (by name) an in-place resize restarts (``resizePolicy:
    RestartContainer``), with the Killing message."""
    if pod.deleted:
        newest = state.sandboxes[0].id if state.sandboxes else ""
        return PodActions(kill_pod=True, sandbox_id=newest)
    create, attempt, sandbox_id = sandbox_changed(pod, state)
    if create:
        return _new_sandbox_actions(pod, state, attempt, sandbox_id)

    ephemeral = ephemeral_containers_to_start(pod, state)
    init = compute_init_container_actions(pod, state, startup, failed_probes, resize_restarts)
    inits = pod.spec.init_containers
    init_to_start = tuple(dict.fromkeys(inits[i].name for i in init.to_start))
    if init.kill_pod:
        return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    if not init.initialized:
        return PodActions(
            sandbox_id=sandbox_id,
            attempt=attempt,
            init_containers_to_start=init_to_start,
            containers_to_kill=tuple(init.to_kill),
            ephemeral_containers_to_start=ephemeral,
        )

    to_start: list[str] = []
    to_kill: list[KillContainer] = list(init.to_kill)
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
        resized = (resize_restarts or {}).get(container.name)
        if resized is not None:
            to_kill.append(KillContainer(record.id, record.name, resized))
            to_start.append(container.name)
            continue
        keep += 1
    if keep == 0 and not to_start:
        # Nothing of the app runs or will: the sidecars must not keep the pod alive.
        return PodActions(
            kill_pod=True,
            sandbox_id=sandbox_id,
            attempt=attempt,
            containers_to_kill=tuple(to_kill),
        )
    return PodActions(
        sandbox_id=sandbox_id,
        attempt=attempt,
        init_containers_to_start=init_to_start,
        containers_to_start=tuple(to_start),
        containers_to_kill=tuple(to_kill),
        ephemeral_containers_to_start=ephemeral,
    )


def ephemeral_containers_to_start(pod: Pod, state: PodRuntimeState) -> tuple[str, ...]:
    """The ephemeral containers the runtime has no container for, in spec order. One that
    exists in any state (running, exited, created, unknown) is never started again: the
    kubelet never restarts an ephemeral container."""
    return tuple(c.name for c in pod.spec.ephemeral_containers if state.find(c.name) is None)


def has_any_regular_container_created(pod: Pod, state: PodRuntimeState) -> bool:
    for container in pod.spec.containers:
        record = state.find(container.name)
        if record is not None and record.state is not ContainerState.UNKNOWN:
            return True
    return False


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
    initialized = not pod.spec.init_containers or has_any_regular_container_created(pod, state)
    if not to_start and initialized:
        return PodActions(kill_pod=True, sandbox_id=sandbox_id, attempt=attempt)
    if pod.spec.init_containers:
        return PodActions(
            kill_pod=True,
            create_sandbox=True,
            sandbox_id=sandbox_id,
            attempt=attempt,
            init_containers_to_start=(pod.spec.init_containers[0].name,),
        )
    return PodActions(
        kill_pod=True,
        create_sandbox=True,
        sandbox_id=sandbox_id,
        attempt=attempt,
        containers_to_start=to_start,
    )

"""The runtime manager: reads a pod's runtime state and carries out the plan of
``actions.compute_pod_actions`` in the kubelet's SyncPod order.

1. compute the plan; 2. kill the pod when its sandbox must go (or nothing should run any more);
3. kill unwanted containers; 4. RunPodSandbox, then PodSandboxStatus for the IPs; 5. start the
next init container (one at a time, and nothing else); 6. start the regular containers in spec
order. Starting one: crash-loop back-off check, image presence, CreateContainer, StartContainer,
then the ``/var/log/containers`` symlink and removal of dead instances beyond the last one.
Failures are recorded per container in the :class:`SyncResult` with the kubelet's reasons; they
never stop the other containers. The manager holds no pod state besides the back-offs.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

from nodeagent.clock import Clock
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.actions import compute_pod_actions
from nodeagent.kuberuntime.backoff import (
    IMAGE_BACKOFF_INITIAL,
    IMAGE_BACKOFF_MAX,
    Backoff,
    container_key,
)
from nodeagent.kuberuntime.container import build_container_config
from nodeagent.kuberuntime.dns import PodDNSError
from nodeagent.kuberuntime.env import ContainerConfigError, EnvInputs
from nodeagent.kuberuntime.errors import CriError, CriNotFound
from nodeagent.kuberuntime.images import ImageFailure, ImageManager
from nodeagent.kuberuntime.labels import POD_UID, container_hash
from nodeagent.kuberuntime.podfiles import Files, PodFiles, legacy_log_symlink
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import (
    CONFIG_POD_SANDBOX_ERROR,
    CRASH_LOOP_BACK_OFF,
    CREATE_CONTAINER_CONFIG_ERROR,
    CREATE_CONTAINER_ERROR,
    CREATE_POD_SANDBOX_ERROR,
    RUN_CONTAINER_ERROR,
    ContainerFailure,
    PodEvent,
    SyncResult,
    go_seconds,
)
from nodeagent.kuberuntime.runtime_state import (
    ContainerRecord,
    ContainerState,
    PodRuntimeState,
    container_record,
    listed_sandbox_record,
    newest_first,
    sandbox_record,
)
from nodeagent.kuberuntime.sandbox import build_sandbox_config
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Container, Pod, format_pod, termination_grace_period

MIN_GRACE_PERIOD: Final = 2  # minimumGracePeriodInSeconds
# Event messages of 1.35+ (kubernetes/kubernetes#134043 took the container name out of the
# message: the event's fieldPath names the container).
CREATED_MESSAGE: Final = "Container created"
STARTED_MESSAGE: Final = "Container started"
SANDBOX_CHANGED_MESSAGE: Final = "Pod sandbox changed, it will be killed and re-created."


def grpc_message(e: CriError) -> str:
    """What the kubelet reports of a failed CreateContainer/StartContainer: the status's
    message (``status.FromError(err).Message()``), without the ``rpc error: code = ...``."""
    return e.details or str(e)


class RuntimeManager:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        images: ImageService,
        settings: PodRuntimeSettings,
        clock: Clock,
        files: Files | None = None,
        backoff: Backoff | None = None,
        cgroup_driver: Callable[[], Awaitable[CgroupDriver]] | None = None,
        log: Logger | None = None,
    ) -> None:
        """``cgroup_driver``: the driver the runtime uses (the connection asks it once);
        ``settings.cgroup_driver`` is used as it is when omitted."""

        def wall() -> float:
            return clock.now().timestamp()

        self._runtime = runtime
        self._settings = settings
        self._cgroup_driver = cgroup_driver
        self._files: Files = files or PodFiles()
        self._backoff = backoff or Backoff(now=wall)
        image_backoff = Backoff(now=wall, initial=IMAGE_BACKOFF_INITIAL, cap=IMAGE_BACKOFF_MAX)
        self._images = ImageManager(images=images, backoff=image_backoff, monotonic=clock.monotonic)
        self._log = log or get_logger("kuberuntime")

    @property
    def settings(self) -> PodRuntimeSettings:
        return self._settings

    async def _resolved_settings(self) -> PodRuntimeSettings:
        """The settings with the runtime's cgroup driver, once it is known."""
        if self._cgroup_driver is not None:
            driver = await self._cgroup_driver()
            self._cgroup_driver = None
            if driver != self._settings.cgroup_driver:
                self._settings = dataclasses.replace(self._settings, cgroup_driver=driver)
        return self._settings

    def forget(self, uid: str) -> None:
        """Drop a deleted pod's back-offs."""
        self._backoff.forget(uid)
        self._images.forget(uid)

    # --- reading ------------------------------------------------------------------------

    async def pod_state(self, uid: str) -> PodRuntimeState:
        """Sandboxes and containers labelled with ``uid``, newest first, with their statuses."""
        selector = {POD_UID: uid}
        listed = await self._runtime.list_pod_sandbox(cri.PodSandboxFilter(label_selector=selector))
        sandboxes = list(newest_first(listed_sandbox_record(s) for s in listed))
        name = namespace = ""
        if listed:
            newest = max(listed, key=lambda s: s.created_at)
            name, namespace = newest.metadata.name, newest.metadata.namespace
        if sandboxes:
            try:
                response = await self._runtime.pod_sandbox_status(sandboxes[0].id)
                sandboxes[0] = sandbox_record(response.status)
            except CriNotFound:
                sandboxes.pop(0)
        containers = []
        filt = cri.ContainerFilter(label_selector=selector)
        for listed_container in await self._runtime.list_containers(filt):
            try:
                status = (await self._runtime.container_status(listed_container.id)).status
            except CriNotFound:
                continue
            containers.append(container_record(status, listed_container.pod_sandbox_id))
        return PodRuntimeState(
            uid=uid,
            name=name,
            namespace=namespace,
            sandboxes=tuple(sandboxes),
            containers=newest_first(containers),
        )

    # --- syncing ------------------------------------------------------------------------

    async def sync_pod(
        self,
        pod: Pod,
        state: PodRuntimeState,
        *,
        inputs: EnvInputs,
        host_dns: ResolvConf,
        on_event: Callable[[PodEvent], None] | None = None,
        failed_probes: Mapping[str, str] | None = None,
    ) -> SyncResult:
        """Carry out the plan; ``on_event`` gets each event as it happens; ``failed_probes``
        (container ID -> ``liveness``/``startup``) names the containers the prober condemned."""
        result = SyncResult(on_event=on_event)
        actions = compute_pod_actions(pod, state, failed_probes)
        self._log.v(4).info(
            "Computed pod actions",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            actions=str(actions),
        )
        grace = termination_grace_period(pod)
        if actions.create_sandbox and actions.sandbox_id:
            result.event("Normal", "SandboxChanged", SANDBOX_CHANGED_MESSAGE)
        if actions.kill_pod:
            await self.kill_pod(pod, state, grace=grace, result=result)
            if not actions.create_sandbox:
                return result
            await self._purge_init_containers(pod, state)
        else:
            for kill in actions.containers_to_kill:
                message = kill.message or f"Stopping container {kill.name}"
                result.event("Normal", "Killing", message, container=kill.name)
                kill_grace = grace if kill.grace is None or pod.deleted else kill.grace
                await self._stop_container(pod, kill.container_id, kill.name, kill_grace)

        settings = await self._resolved_settings()
        try:
            sandbox_config, warnings = build_sandbox_config(
                pod, settings=settings, attempt=actions.attempt, host_dns=host_dns
            )
        except PodDNSError as e:
            result.sandbox_error = ContainerFailure(CONFIG_POD_SANDBOX_ERROR, str(e))
            return result
        for warning in warnings:
            result.event("Warning", "DNSConfigForming", warning)
        sandbox_id = actions.sandbox_id
        pod_ips: Sequence[str] = state.sandboxes[0].ips if state.sandboxes else ()
        if actions.create_sandbox:
            created = await self._create_sandbox(pod, sandbox_config, result)
            if created is None:
                return result
            sandbox_id, pod_ips = created
        if pod.spec.host_network:
            pod_ips = pod_ips or inputs.host_ips
        inputs = dataclasses.replace(inputs, pod_ips=tuple(pod_ips))
        start = [actions.next_init_container] if actions.next_init_container else []
        start += list(actions.containers_to_start)
        by_name = {c.name: c for c in (*pod.spec.init_containers, *pod.spec.containers)}
        for name in start:
            await self._start_container(
                pod,
                by_name[name],
                state=state,
                sandbox_id=sandbox_id,
                sandbox_config=sandbox_config,
                inputs=inputs,
                result=result,
            )
        return result

    async def _create_sandbox(
        self, pod: Pod, config: cri.PodSandboxConfig, result: SyncResult
    ) -> tuple[str, Sequence[str]] | None:
        try:
            await self._files.ensure_dir(config.log_directory)
            sandbox_id = await self._runtime.run_pod_sandbox(config, self._settings.runtime_handler)
            status = (await self._runtime.pod_sandbox_status(sandbox_id)).status
        except (CriError, OSError) as e:
            text = e.status_text if isinstance(e, CriError) else str(e)
            message = f"Failed to create pod sandbox: {text}"
            result.sandbox_error = ContainerFailure(CREATE_POD_SANDBOX_ERROR, message)
            result.event("Warning", "FailedCreatePodSandBox", message)
            self._log.warning(
                "Cannot create pod sandbox",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                error=text,
            )
            return None
        record = sandbox_record(status)
        self._log.v(2).info(
            "Created pod sandbox",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            sandbox_id=sandbox_id,
            ip=record.ip,
        )
        return sandbox_id, record.ips

    async def _start_container(
        self,
        pod: Pod,
        container: Container,
        *,
        state: PodRuntimeState,
        sandbox_id: str,
        sandbox_config: cri.PodSandboxConfig,
        inputs: EnvInputs,
        result: SyncResult,
    ) -> None:
        def failed(message: str) -> None:
            result.event("Warning", "Failed", message, container=container.name)

        previous = state.find(container.name)
        # doBackOff: the newest *exited* instance, so a container killed while running (a
        # failed liveness probe) restarts at once the first time and backs off after that
        exited = next(
            (
                c
                for c in state.containers
                if c.name == container.name and c.state is ContainerState.EXITED
            ),
            None,
        )
        if exited is not None:
            key = container_key(
                namespace=pod.namespace,
                name=pod.name,
                uid=pod.uid,
                container=container.name,
                hash=container_hash(container),
            )
            finished = exited.finished_at / 1e9
            wait = self._backoff.remaining(key, finished)
            if wait > 0:
                message = (
                    f"back-off {go_seconds(self._backoff.get(key))} restarting failed "
                    f"container={container.name} pod={format_pod(pod)}"
                )
                result.failures[container.name] = ContainerFailure(CRASH_LOOP_BACK_OFF, message)
                result.event(
                    "Warning",
                    "BackOff",
                    "Back-off restarting failed container "
                    f"{container.name} in pod {format_pod(pod)}",
                    container=container.name,
                )
                result.retry_after(wait)
                return
            self._backoff.next(key, finished)
        try:
            image_ref = await self._images.ensure_image(pod, container, sandbox_config, result)
        except ImageFailure as e:
            result.failures[container.name] = e.failure
            failed(f"Error: {e.failure.reason}")
            if e.retry_in is not None:
                result.retry_after(e.retry_in)
            return
        restart_count = previous.restart_count + 1 if previous is not None else 0
        try:
            config = build_container_config(
                pod,
                container,
                image_ref=image_ref,
                restart_count=restart_count,
                settings=self._settings,
                inputs=inputs,
                image_user=self._images.user_of(image_ref),
            )
        except ContainerConfigError as e:
            result.failures[container.name] = ContainerFailure(
                CREATE_CONTAINER_CONFIG_ERROR, str(e)
            )
            failed(f"Error: {e}")
            return
        log_dir = sandbox_config.log_directory
        try:
            await self._files.ensure_dir(f"{log_dir}/{container.name}")
            container_id = await self._runtime.create_container(sandbox_id, config, sandbox_config)
        except (CriError, OSError) as e:
            text = grpc_message(e) if isinstance(e, CriError) else str(e)
            result.failures[container.name] = ContainerFailure(CREATE_CONTAINER_ERROR, text)
            failed(f"Error: {text}")
            return
        result.event("Normal", "Created", CREATED_MESSAGE, container=container.name)
        try:
            await self._runtime.start_container(container_id)
        except CriError as e:
            text = grpc_message(e)
            result.failures[container.name] = ContainerFailure(RUN_CONTAINER_ERROR, text)
            failed(f"Error: {text}")
            return
        result.started.append(container.name)
        result.event("Normal", "Started", STARTED_MESSAGE, container=container.name)
        self._log.v(2).info(
            "Started container",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            container_name=container.name,
            container_id=container_id,
            restart_count=restart_count,
        )
        await self._files.link(
            f"{log_dir}/{config.log_path}",
            legacy_log_symlink(
                self._settings.container_logs_dir,
                pod=pod.name,
                namespace=pod.namespace,
                container=container.name,
                container_id=container_id,
            ),
        )
        await self._prune_dead(pod, state, container.name)

    async def _prune_dead(self, pod: Pod, state: PodRuntimeState, name: str) -> None:
        """Keep one dead instance of a container (its ``lastState``), as container GC does
        with ``maxPerPodContainer: 1``."""
        dead = [c for c in state.containers if c.name == name and c.state is ContainerState.EXITED]
        for record in dead[1:]:
            await self._remove_container(pod.name, pod.namespace, record)

    async def _purge_init_containers(self, pod: Pod, state: PodRuntimeState) -> None:
        """A new sandbox runs init containers from scratch: remove the old instances."""
        names = {c.name for c in pod.spec.init_containers}
        for record in state.containers:
            if record.name in names and record.state is not ContainerState.RUNNING:
                await self._remove_container(pod.name, pod.namespace, record)

    async def _remove_container(self, pod: str, namespace: str, record: ContainerRecord) -> None:
        try:
            await self._runtime.remove_container(record.id)
        except CriNotFound:
            pass
        except CriError as e:
            self._log.warning("Cannot remove container", container_id=record.id, error=str(e))
            return
        await self._files.unlink(
            legacy_log_symlink(
                self._settings.container_logs_dir,
                pod=pod,
                namespace=namespace,
                container=record.name,
                container_id=record.id,
            )
        )

    # --- killing ------------------------------------------------------------------------

    async def _stop_container(
        self, pod: Pod | None, container_id: str, name: str, grace: int
    ) -> None:
        try:
            await self._runtime.stop_container(container_id, grace)
        except CriNotFound:
            return
        fields = (
            {"pod_namespace": pod.namespace, "pod_name": pod.name, "pod_uid": pod.uid}
            if pod
            else {}
        )
        self._log.v(2).info(
            "Stopped container",
            container_name=name,
            container_id=container_id,
            grace_period=grace,
            **fields,
        )

    async def kill_pod(
        self,
        pod: Pod | None,
        state: PodRuntimeState,
        *,
        grace: int,
        override: bool = False,
        result: SyncResult | None = None,
    ) -> None:
        """Stop every running container with ``grace`` seconds (at least 2 unless
        ``override``), in parallel, then every ready sandbox."""
        seconds = grace if override else max(grace, MIN_GRACE_PERIOD)
        running = [
            c
            for c in state.containers
            if c.state in (ContainerState.RUNNING, ContainerState.UNKNOWN)
        ]
        if result is not None:
            for record in running:
                message = f"Stopping container {record.name}"
                result.event("Normal", "Killing", message, container=record.name)
        async with asyncio.TaskGroup() as tg:
            for record in running:
                tg.create_task(self._stop_container(pod, record.id, record.name, seconds))
        for sandbox in state.sandboxes:
            if sandbox.ready:
                try:
                    await self._runtime.stop_pod_sandbox(sandbox.id)
                except CriNotFound:
                    continue

    async def remove_pod(self, state: PodRuntimeState) -> None:
        """Remove what is left of a pod that is gone: containers, sandboxes, logs."""
        for record in state.containers:
            await self._remove_container(state.name, state.namespace, record)
        for sandbox in state.sandboxes:
            try:
                await self._runtime.stop_pod_sandbox(sandbox.id)
                await self._runtime.remove_pod_sandbox(sandbox.id)
            except CriNotFound:
                continue
        if state.name:
            log_dir = self._settings.pod_log_dir(
                namespace=state.namespace, name=state.name, uid=state.uid
            )
            await self._files.remove_tree(log_dir)
            await self._files.remove_links_to(self._settings.container_logs_dir, log_dir + "/")

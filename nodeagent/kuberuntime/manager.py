"""The runtime manager: reads a pod's runtime state and carries out the plan of
``actions.compute_pod_actions`` in the kubelet's SyncPod order.

1. compute the plan; 2. kill the pod when its sandbox must go (or nothing should run any more);
3. kill unwanted containers; 4. RunPodSandbox, then PodSandboxStatus for the IPs; 5. start the
ephemeral containers never created yet (``targetContainerName`` -> CRI ``pid: TARGET``), then the
next init container (one at a time, and nothing else); 6. start the regular containers in spec
order. Starting one: crash-loop back-off check, image presence, the pod's managed /etc/hosts
(``etchosts``, rewritten for each container once the pod has IPs), CreateContainer, StartContainer,
then the ``/var/log/containers`` symlink and removal of dead instances beyond the last one.
Failures are recorded per container in the :class:`SyncResult` with the kubelet's reasons; they
never stop the other containers. The manager holds no pod state besides the back-offs and the
last state read of each pod: ``pod_state(uid, reuse=True)`` (a pod's periodic sync) returns it
again, without a CRI request, when a relist that started after it was read saw the same
sandboxes and containers in the same states and the manager has not acted on the pod since
(what a container or sandbox status holds besides its state does not change while it keeps
its state, except the resources the manager itself updates).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Final

from nodeagent.clock import Clock
from nodeagent.kuberuntime import etchosts, metrics
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.actions import StartupResults, compute_pod_actions, is_sidecar
from nodeagent.kuberuntime.backoff import (
    IMAGE_BACKOFF_INITIAL,
    IMAGE_BACKOFF_MAX,
    Backoff,
    container_key,
)
from nodeagent.kuberuntime.container import build_container_config, linux_resources
from nodeagent.kuberuntime.dns import PodDNSError, pod_hostname
from nodeagent.kuberuntime.env import (
    SERVICES_NOT_READ,
    ContainerConfigError,
    EnvInputs,
    make_environment,
)
from nodeagent.kuberuntime.errors import CriError, CriNotFound
from nodeagent.kuberuntime.hooks import (
    FAILED_POST_START_HOOK,
    FAILED_PRE_STOP_HOOK,
    LIFECYCLE_HTTP_FALLBACK,
    POST_START_EVENT_MESSAGE,
    POST_START_HOOK_ERROR,
    PRE_STOP_EVENT_MESSAGE,
    HookRunner,
    grace_after_pre_stop,
    stop_grace,
)
from nodeagent.kuberuntime.images import ImageFailure, ImageManager
from nodeagent.kuberuntime.labels import POD_UID, container_hash
from nodeagent.kuberuntime.mounts import NoVolumes, PodMounts, to_cri
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
    RelistView,
    container_record,
    listed_sandbox_record,
    listing_of,
    newest_first,
    sandbox_record,
)
from nodeagent.kuberuntime.sandbox import build_sandbox_config
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.kuberuntime.termination import (
    FILE_MODE,
    MAX_LOG_BYTES,
    MAX_MESSAGE_BYTES,
    MessageFile,
    containers_dir,
    log_tail_message,
    message_source,
    new_instance_id,
    read_error_message,
    termination_message_file,
    termination_message_mounts,
    with_message,
)
from nodeagent.kuberuntime.termination_order import TerminationOrdering
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import (
    Container,
    EphemeralContainer,
    Pod,
    ephemeral_forbidden_field,
    format_pod,
    termination_grace_period,
)

MIN_GRACE_PERIOD: Final = 2  # minimumGracePeriodInSeconds
LOG_TAIL_READ: Final = 64 * 1024
SERVICES_RETRY: Final = 10.0  # after "services have not yet been read": the kubelet's backOffPeriod
"""How much of a container log is read for ``FallbackToLogsOnError`` (80 lines' worth)."""
# Event messages of 1.35+ (kubernetes/kubernetes#134043 took the container name out of the
# message: the event's fieldPath names the container).
CREATED_MESSAGE: Final = "Container created"
STARTED_MESSAGE: Final = "Container started"
SANDBOX_CHANGED_MESSAGE: Final = "Pod sandbox changed, it will be killed and re-created."


def go_os_error(op: str, path: str, e: OSError) -> str:
    """An ``OSError`` as Go's ``*PathError`` reads: ``open /etc/hosts: no such file or
    directory``."""
    reason = e.strerror.lower() if e.strerror else str(e)
    return f"{op} {path}: {reason}"


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
        hooks: HookRunner | None = None,
        relisted: RelistView | None = None,
        log: Logger | None = None,
    ) -> None:
        """``cgroup_driver``: the driver the runtime uses (the connection asks it once);
        ``settings.cgroup_driver`` is used as it is when omitted. ``relisted``: the PLEG's
        view of its last relist (without it every ``pod_state`` asks the runtime)."""

        def wall() -> float:
            return clock.now().timestamp()

        self._runtime = runtime
        self._clock = clock
        self._hooks = hooks or HookRunner(runtime=runtime)
        self._messages: dict[str, dict[str, str]] = {}
        """Pod uid -> exited container id -> its termination message (read once)."""
        self._settings = settings
        self._cgroup_driver = cgroup_driver
        self._files: Files = files or PodFiles()
        self._backoff = backoff or Backoff(now=wall)
        image_backoff = Backoff(now=wall, initial=IMAGE_BACKOFF_INITIAL, cap=IMAGE_BACKOFF_MAX)
        self._images = ImageManager(images=images, backoff=image_backoff, monotonic=clock.monotonic)
        self._relisted = relisted
        self._states: dict[str, tuple[float, PodRuntimeState]] = {}
        """Pod uid -> (event-loop time it was read, the state read)."""
        self._acts = 0
        self.resources_updated = 0
        """Moves before and after each UpdateContainerResources (for the stats sampler)."""
        """How many times the manager acted on a pod (a read racing an action is not kept)."""
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
        self._messages.pop(uid, None)
        self._states.pop(uid, None)

    def _acting(self, uid: str) -> None:
        """The manager is about to change the pod in the runtime: its state must be read again."""
        self._states.pop(uid, None)
        self._acts += 1

    # --- reading ------------------------------------------------------------------------

    async def pod_state(self, uid: str, *, reuse: bool = False) -> PodRuntimeState:
        """Sandboxes and containers labelled with ``uid``, newest first, with their statuses.
        ``reuse``: the state read last, when the PLEG's newest relist started after that read
        and saw the same sandboxes and containers in the same states."""
        if reuse and self._relisted is not None:
            kept = self._states.get(uid)
            view = self._relisted(uid)
            if (
                kept is not None
                and view is not None
                and view[0] > kept[0]
                and view[1] == listing_of(kept[1])
            ):
                return kept[1]
        acts = self._acts
        state = await self._read_state(uid)
        if self._relisted is not None:
            if state.empty or self._acts != acts:
                self._states.pop(uid, None)
            else:
                self._states[uid] = (asyncio.get_running_loop().time(), state)
        return state

    async def _read_state(self, uid: str) -> PodRuntimeState:
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
            record = container_record(status, listed_container.pod_sandbox_id)
            if record.state is ContainerState.EXITED:
                message = await self._termination_message(uid, status)
                record = dataclasses.replace(record, message=with_message(record.message, message))
            containers.append(record)
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
        inputs: EnvInputs | Callable[[], Awaitable[EnvInputs]],
        host_dns: ResolvConf,
        on_event: Callable[[PodEvent], None] | None = None,
        volumes: PodMounts | None = None,
        startup: StartupResults | None = None,
        failed_probes: Mapping[str, str] | None = None,
        resize_restarts: Mapping[str, str] | None = None,
    ) -> SyncResult:
        """Carry out the plan; ``on_event`` gets each event as it happens; ``volumes``
        gives each container's mounts (none set up: a container that mounts one fails);
        ``startup``: the startup probes' results by container id; ``failed_probes``
        (container ID -> ``liveness``/``startup``) names the containers the prober condemned.
        ``inputs``: the containers' environment inputs, or how to get them: asked only when a
        container is to start (a periodic sync of a running pod fetches none)."""
        result = SyncResult(on_event=on_event)
        actions = compute_pod_actions(
            pod, state, failed_probes, startup=startup, resize_restarts=resize_restarts
        )
        self._log.v(4).info(
            "Computed pod actions",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            actions=str(actions),
        )
        if (
            actions.create_sandbox
            or actions.kill_pod
            or actions.containers_to_kill
            or actions.ephemeral_containers_to_start
            or actions.init_containers_to_start
            or actions.containers_to_start
        ):
            self._acting(pod.uid)
        grace = termination_grace_period(pod)
        if actions.create_sandbox and actions.sandbox_id:
            result.event("Normal", "SandboxChanged", SANDBOX_CHANGED_MESSAGE)
        if actions.kill_pod:
            await self.kill_pod(pod, state, grace=grace, result=result)
            if not actions.create_sandbox:
                return result
            await self._purge_init_containers(pod, state)
        else:
            kill_ips = state.sandboxes[0].ips if state.sandboxes else ()
            for kill in actions.containers_to_kill:
                await self.kill_container(
                    pod,
                    kill.container_id,
                    kill.name,
                    grace=grace if kill.grace is None or pod.deleted else kill.grace,
                    message=kill.message,
                    result=result,
                    pod_ips=kill_ips,
                )

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
        if not (
            actions.ephemeral_containers_to_start
            or actions.init_containers_to_start
            or actions.containers_to_start
        ):
            return result
        env = inputs if isinstance(inputs, EnvInputs) else await inputs()
        if pod.spec.host_network:
            pod_ips = pod_ips or env.host_ips
        env = dataclasses.replace(env, pod_ips=tuple(pod_ips))
        # The kubelet's step 5: ephemeral containers first, so that a debug container runs
        # even while an init container keeps failing.
        ephemeral = {c.name: c for c in pod.spec.ephemeral_containers}

        async def start(container: Container, kind: str) -> bool:
            started = await self._start_container(
                pod,
                container,
                state=state,
                sandbox_id=sandbox_id,
                sandbox_config=sandbox_config,
                inputs=env,
                result=result,
                volumes=volumes or NoVolumes(),
            )
            failure = None if started else result.failures.get(container.name)
            metrics.count_start(kind, failure.reason if failure is not None else None)
            return started

        for name in actions.ephemeral_containers_to_start:
            await start(ephemeral[name], metrics.EPHEMERAL_CONTAINER)
        by_name = {c.name: c for c in (*pod.spec.init_containers, *pod.spec.containers)}
        for name in actions.init_containers_to_start:
            container = by_name[name]
            started = await start(container, metrics.INIT_CONTAINER)
            if not started and not is_sidecar(container):
                return result  # a failed init container: nothing after it starts
        for name in actions.containers_to_start:
            await start(by_name[name], metrics.CONTAINER)
        return result

    async def _create_sandbox(
        self, pod: Pod, config: cri.PodSandboxConfig, result: SyncResult
    ) -> tuple[str, Sequence[str]] | None:
        metrics.STARTED_PODS.inc()
        try:
            await self._files.ensure_dir(config.log_directory)
            sandbox_id = await self._run_pod_sandbox(config)
            status = (await self._runtime.pod_sandbox_status(sandbox_id)).status
        except (CriError, OSError) as e:
            if not pod.deleted:  # a pod deleted while its sandbox was made: no real error
                metrics.STARTED_PODS_ERRORS.inc()
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

    async def _run_pod_sandbox(self, config: cri.PodSandboxConfig) -> str:
        handler = self._settings.runtime_handler
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            return await self._runtime.run_pod_sandbox(config, handler)
        except CriError:
            metrics.RUN_PODSANDBOX_ERRORS.labels(handler).inc()
            raise
        finally:
            metrics.RUN_PODSANDBOX_DURATION.labels(handler).observe(loop.time() - began)

    def _backing_off(
        self, pod: Pod, container: Container, state: PodRuntimeState, result: SyncResult
    ) -> bool:
        """True (with ``CrashLoopBackOff`` and the ``BackOff`` event) while the container's
        restart back-off runs; else the next restart is counted. doBackOff looks at the
        newest *exited* instance, so a container killed while running (a failed liveness
        probe) restarts at once the first time and backs off after that."""
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
                return True
            self._backoff.next(key, finished)
        return False

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
        volumes: PodMounts,
    ) -> bool:
        """Start one container (and run its postStart hook); False when it did not start.
        An ephemeral container joins its target's PID namespace (``targetContainerName``)."""

        def failed(message: str) -> None:
            result.event("Warning", "Failed", message, container=container.name)

        if (refused := ephemeral_refusal(pod, container)) is not None:
            result.failures[container.name] = ContainerFailure(
                CREATE_CONTAINER_CONFIG_ERROR, refused
            )
            failed(f"Error: {refused}")
            return False
        previous = state.find(container.name)
        if self._backing_off(pod, container, state, result):
            return False
        try:
            image_ref = await self._images.ensure_image(pod, container, sandbox_config, result)
        except ImageFailure as e:
            result.failures[container.name] = e.failure
            failed(f"Error: {e.failure.reason}")
            if e.retry_in is not None:
                result.retry_after(e.retry_in)
            return False
        restart_count = previous.restart_count + 1 if previous is not None else 0
        message_file = termination_message_file(self._settings, pod, container, new_instance_id())
        try:
            target_id = namespace_target(container, state)
            env = dict(make_environment(pod, container, inputs))
            mounts = await volumes.container_mounts(container, env)
            hosts = await self._hosts_mounts(pod, container, inputs.pod_ips)
            config = build_container_config(
                pod,
                container,
                image_ref=image_ref,
                restart_count=restart_count,
                settings=self._settings,
                inputs=inputs,
                mounts=[
                    *(to_cri(m) for m in mounts),
                    *hosts,
                    *termination_message_mounts(message_file),
                ],
                image_user=self._images.user_of(image_ref),
                target_id=target_id,
            )
        except ContainerConfigError as e:
            result.failures[container.name] = ContainerFailure(
                CREATE_CONTAINER_CONFIG_ERROR, str(e)
            )
            failed(f"Error: {e}")
            if str(e) == SERVICES_NOT_READ:
                result.retry_after(SERVICES_RETRY)  # the kubelet's pod worker back-off
            return False
        log_dir = sandbox_config.log_directory
        try:
            await self._files.ensure_dir(f"{log_dir}/{container.name}")
            await self._create_message_file(message_file)
            container_id = await self._runtime.create_container(sandbox_id, config, sandbox_config)
        except (CriError, OSError) as e:
            text = grpc_message(e) if isinstance(e, CriError) else str(e)
            result.failures[container.name] = ContainerFailure(CREATE_CONTAINER_ERROR, text)
            failed(f"Error: {text}")
            return False
        result.event("Normal", "Created", CREATED_MESSAGE, container=container.name)
        try:
            await self._runtime.start_container(container_id)
        except CriError as e:
            text = grpc_message(e)
            result.failures[container.name] = ContainerFailure(RUN_CONTAINER_ERROR, text)
            failed(f"Error: {text}")
            return False
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
        if not await self._post_start(pod, container, container_id, inputs.pod_ips, result):
            return False
        result.started.append(container.name)
        return True

    async def _hosts_mounts(
        self, pod: Pod, container: Container, pod_ips: Sequence[str]
    ) -> list[cri.Mount]:
        """The pod's managed /etc/hosts, written now, as the container's mount; none before
        the pod has an IP or when the container mounts its own /etc/hosts. Raises
        ``ContainerConfigError`` (a bad hostname, an unreadable node hosts file)."""
        if not etchosts.should_mount_hosts_file(pod, pod_ips):
            return []
        if etchosts.mounts_own_hosts_file(container):
            return []
        settings = self._settings
        try:
            hostname, domain = pod_hostname(
                pod,
                cluster_domain=settings.cluster_domain,
                hostname_override=settings.hostname_override,
            )
        except PodDNSError as e:
            raise ContainerConfigError(str(e)) from e
        path = etchosts.hosts_file_path(settings, pod.uid)
        aliases = pod.spec.host_aliases
        if pod.spec.host_network:
            try:
                node_hosts = await self._files.read_file(settings.node_hosts_file)
            except OSError as e:
                raise ContainerConfigError(go_os_error("open", settings.node_hosts_file, e)) from e
            content = etchosts.host_network_hosts_content(node_hosts, aliases)
        else:
            content = etchosts.managed_hosts_content(pod_ips, hostname, domain, aliases)
        try:
            await self._files.write_file(path, content, etchosts.FILE_MODE)
        except OSError as e:
            raise ContainerConfigError(go_os_error("open", path, e)) from e
        return [etchosts.hosts_mount(path)]

    async def _create_message_file(self, message_file: MessageFile | None) -> None:
        """The empty, world-writable file the container's termination message goes to."""
        if message_file is not None:
            await self._files.create_file(message_file.host_path, FILE_MODE)

    async def _post_start(
        self,
        pod: Pod,
        container: Container,
        container_id: str,
        pod_ips: Sequence[str],
        result: SyncResult,
    ) -> bool:
        """Run the postStart hook; when it fails, the ``FailedPostStartHook`` event, the
        container killed and ``PostStartHookError`` with the hook's message. False then."""
        post_start = container.lifecycle.post_start if container.lifecycle else None
        if post_start is None:
            return True
        message = await self._hooks.run(
            pod,
            container,
            container_id,
            post_start,
            pod_ips=pod_ips,
            on_fallback=lambda text: result.event("Warning", LIFECYCLE_HTTP_FALLBACK, text),
        )
        if message is None:
            return True
        self._log.error(
            "Failed to execute PostStartHook",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            container_name=container.name,
            container_id=container_id,
            error=message,
        )
        result.event(
            "Warning", FAILED_POST_START_HOOK, POST_START_EVENT_MESSAGE, container=container.name
        )
        await self.kill_container(
            pod,
            container_id,
            container.name,
            grace=termination_grace_period(pod),
            message=FAILED_POST_START_HOOK,
            result=result,
            pod_ips=pod_ips,
        )
        result.failures[container.name] = ContainerFailure(POST_START_HOOK_ERROR, message)
        return False

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

    # --- in-place resize -----------------------------------------------------------------

    async def update_container_resources(
        self, pod: Pod, container: Container, container_id: str
    ) -> cri.LinuxContainerResources:
        """CRI ``UpdateContainerResources`` with what the container would be created with
        now (``container.linux_resources``: the same cpu shares, CFS quota, memory limit,
        OOM score and unified values); raises ``CriError``/``ContainerConfigError``."""
        settings = await self._resolved_settings()
        linux = linux_resources(pod, container, settings)
        self._acting(pod.uid)
        self.resources_updated += 1
        try:
            await self._runtime.update_container_resources(container_id, linux)
        finally:
            self.resources_updated += 1
        self._log.v(2).info(
            "Updated container resources",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            container_name=container.name,
            container_id=container_id,
            cpu_shares=linux.cpu_shares,
            cpu_quota=linux.cpu_quota,
            memory_limit=linux.memory_limit_in_bytes,
        )
        return linux

    def desired_resources(self, pod: Pod, container: Container) -> cri.LinuxContainerResources:
        return linux_resources(pod, container, self._settings)

    # --- killing ------------------------------------------------------------------------

    async def _termination_message(self, uid: str, status: cri.ContainerStatus) -> str:
        """What an exited container wrote to its termination message file (or its log's
        tail under ``FallbackToLogsOnError``); read once per container."""
        cache = self._messages.setdefault(uid, {})
        if status.id in cache:
            return cache[status.id]
        source = message_source(status)
        message = ""
        fallback = source.fallback_to_logs
        if source.host_path is not None:
            try:
                data = await self._files.read_tail(source.host_path, MAX_MESSAGE_BYTES)
            except OSError as e:
                data, fallback = None, False
                message = read_error_message(source.host_path, str(e))
            if data:
                message, fallback = data.decode(errors="replace"), False
        if fallback and source.log_path:
            try:
                log = await self._files.read_tail(source.log_path, LOG_TAIL_READ)
            except OSError:
                log = None
            message = log_tail_message(log or b"")[-MAX_LOG_BYTES:]
        cache[status.id] = message
        return message

    async def kill_container(
        self,
        pod: Pod | None,
        container_id: str,
        name: str,
        *,
        grace: int,
        message: str = "",
        override: int | None = None,
        result: SyncResult | None = None,
        pod_ips: Sequence[str] = (),
        ordering: TerminationOrdering | None = None,
    ) -> None:
        """The one place a container is stopped, as the kubelet's ``killContainer``: the
        ``Killing`` event, the preStop hook within ``grace`` (the time it takes is deducted),
        the wait for the containers that must stop first (sidecars), then StopContainer with
        what is left (at least 2 s, unless ``override``)."""
        spec = _container_spec(pod, name) if pod is not None else None
        if pod is not None:
            self._acting(pod.uid)
        if result is not None:
            result.event(
                "Normal", "Killing", message or f"Stopping container {name}", container=name
            )
        pre_stop = spec.lifecycle.pre_stop if spec is not None and spec.lifecycle else None
        if pod is not None and spec is not None and pre_stop is not None and grace > 0:
            started = self._clock.monotonic()
            try:
                hook = self._hooks.run(
                    pod,
                    spec,
                    container_id,
                    pre_stop,
                    pod_ips=pod_ips,
                    on_fallback=lambda text: (
                        result.event("Warning", LIFECYCLE_HTTP_FALLBACK, text) if result else None
                    ),
                )
                failure = await asyncio.wait_for(hook, grace)
            except TimeoutError:
                failure = None
                self._log.v(2).info(
                    "PreStop hook not completed in grace period",
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    container_name=name,
                    grace_period=grace,
                )
            if failure is not None:
                self._log.error(
                    "PreStop hook failed",
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    container_name=name,
                    container_id=container_id,
                    error=failure,
                )
                if result is not None:
                    result.event(
                        "Warning", FAILED_PRE_STOP_HOOK, PRE_STOP_EVENT_MESSAGE, container=name
                    )
            grace = grace_after_pre_stop(grace, self._clock.monotonic() - started)
        if ordering is not None and grace > 0:
            grace -= int(await ordering.wait_for_turn(name, grace))
        seconds = stop_grace(grace, override=override)
        try:
            await self._stop_container(pod, container_id, name, seconds)
        finally:
            if ordering is not None:
                ordering.terminated(name)

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
        """Stop every running container within ``grace`` seconds (at least 2 unless
        ``override``), in parallel: app containers first, then sidecars in reverse order,
        all sharing the grace period; then every ready sandbox — also when a container's
        stop failed, as the kubelet's ``killPodWithSyncResult`` does (StopPodSandbox stops
        what is left in it): a runtime past its deadline on StopContainer would otherwise
        hold the sandbox until the next attempt. Raises the runtime's errors together
        afterwards, so the pod worker tries again."""
        self._acting(state.uid)
        running = [
            c
            for c in state.containers
            if c.state in (ContainerState.RUNNING, ContainerState.UNKNOWN)
        ]
        ordering = None
        if pod is not None and any(is_sidecar(c) for c in pod.spec.init_containers):
            names = [c.name for c in running]
            ordering = TerminationOrdering(pod, names, monotonic=self._clock.monotonic)
        pod_ips = state.sandboxes[0].ips if state.sandboxes else ()
        failures: list[CriError] = []

        async def kill(record: ContainerRecord) -> None:
            owner = pod
            if owner is None and record.restored is not None:
                owner = record.restored[0]  # its pod is gone: the preStop hook still runs
            try:
                await self.kill_container(
                    owner,
                    record.id,
                    record.name,
                    grace=grace,
                    override=grace if override else None,
                    result=result,
                    pod_ips=pod_ips,
                    ordering=ordering,
                )
            except CriError as e:
                failures.append(e)

        async with asyncio.TaskGroup() as tg:
            for record in running:
                tg.create_task(kill(record))
        for sandbox in state.sandboxes:
            if sandbox.ready:
                try:
                    await self._runtime.stop_pod_sandbox(sandbox.id)
                except CriNotFound:
                    continue
                except CriError as e:
                    failures.append(e)
        if failures:
            raise ExceptionGroup("error killing pod", failures)

    async def remove_pod(self, state: PodRuntimeState) -> None:
        """Remove what is left of a pod that is gone: containers, sandboxes, logs, its
        managed /etc/hosts."""
        self._acting(state.uid)
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
        await self._files.remove_tree(containers_dir(self._settings, state.uid))
        await self._files.unlink(etchosts.hosts_file_path(self._settings, state.uid))


def ephemeral_refusal(pod: Pod, container: Container) -> str | None:
    """Why an ephemeral container must not run: a field the apiserver refuses on one (it
    validates them, so only a spec that bypassed it gets here); None for any other container."""
    if not isinstance(container, EphemeralContainer):
        return None
    forbidden = ephemeral_forbidden_field(container)
    if forbidden is None:
        return None
    index = pod.spec.ephemeral_containers.index(container)
    return (
        f"spec.ephemeralContainers[{index}].{forbidden}: Forbidden: "
        "cannot be set for an Ephemeral Container"
    )


def namespace_target(container: Container, state: PodRuntimeState) -> str:
    """The id of the container whose PID namespace an ephemeral container joins (its
    ``targetContainerName``), "" for none; the kubelet's ``getTargetID``: raises
    ``ContainerConfigError`` when the runtime has no such container."""
    if not isinstance(container, EphemeralContainer) or not container.target_container_name:
        return ""
    target = state.find(container.target_container_name)
    if target is None:
        raise ContainerConfigError(
            f"unable to find target container {container.target_container_name}"
        )
    return target.id


def _container_spec(pod: Pod, name: str) -> Container | None:
    return next(
        (c for c in (*pod.spec.init_containers, *pod.spec.containers) if c.name == name), None
    )

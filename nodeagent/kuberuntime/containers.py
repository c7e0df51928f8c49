"""Starting and removing one container, as the kubelet's ``kuberuntime_container.go``.

:class:`ContainerRunner` does what the runtime manager's plan asks of a single container.
Starting one: crash-loop back-off check, image presence, the pod's managed /etc/hosts
(``etchosts``, rewritten for each container once the pod has IPs), CreateContainer,
StartContainer, then the ``/var/log/containers`` symlink, removal of dead instances beyond the
last one and the postStart hook (a failed one kills the container through
:class:`~nodeagent.kuberuntime.killing.ContainerKiller`, the one place a container is
stopped; an exited container's termination message is read by :mod:`.messages`). Failures
are recorded per container in the :class:`SyncResult` with the kubelet's reasons; they never
stop the other containers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from nodeagent.clock import Clock
from nodeagent.gotext import duration_seconds
from nodeagent.kuberuntime import etchosts
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.backoff import (
    IMAGE_BACKOFF_INITIAL,
    IMAGE_BACKOFF_MAX,
    Backoff,
    container_key,
)
from nodeagent.kuberuntime.container import build_container_config
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
    LIFECYCLE_HTTP_FALLBACK,
    POST_START_EVENT_MESSAGE,
    POST_START_HOOK_ERROR,
    HookRunner,
)
from nodeagent.kuberuntime.images import (
    ImageManager,
    ImageOptions,
    SecretsLoader,
    no_secrets,
)
from nodeagent.kuberuntime.imagevolumes import (
    ImageVolumes,
    image_volume_mounts,
    prepare_images,
    pull_image_volumes,
)
from nodeagent.kuberuntime.killing import ContainerKiller
from nodeagent.kuberuntime.labels import container_hash
from nodeagent.kuberuntime.mounts import PodMounts, device_to_cri, to_cri
from nodeagent.kuberuntime.podfiles import Files, legacy_log_symlink
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.kuberuntime.results import (
    CRASH_LOOP_BACK_OFF,
    CREATE_CONTAINER_CONFIG_ERROR,
    CREATE_CONTAINER_ERROR,
    RUN_CONTAINER_ERROR,
    ContainerFailure,
    SyncResult,
)
from nodeagent.kuberuntime.runtime_state import ContainerRecord, ContainerState, PodRuntimeState
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.kuberuntime.termination import (
    FILE_MODE,
    MessageFile,
    new_instance_id,
    termination_message_file,
    termination_message_mounts,
)
from nodeagent.log import Logger
from nodeagent.podspec import (
    Container,
    EphemeralContainer,
    Pod,
    ephemeral_forbidden_field,
    format_pod,
    termination_grace_period,
)

SERVICES_RETRY: Final = 10.0  # after "services have not yet been read": the kubelet's backOffPeriod
# Event messages of 1.35+ (kubernetes/kubernetes#134043 took the container name out of the
# message: the event's fieldPath names the container).
CREATED_MESSAGE: Final = "Container created"
STARTED_MESSAGE: Final = "Container started"


def go_os_error(op: str, path: str, e: OSError) -> str:
    """An ``OSError`` as Go's ``*PathError`` reads: ``open /etc/hosts: no such file or
    directory``."""
    reason = e.strerror.lower() if e.strerror else str(e)
    return f"{op} {path}: {reason}"


def grpc_message(e: CriError) -> str:
    """What the kubelet reports of a failed CreateContainer/StartContainer: the status's
    message (``status.FromError(err).Message()``), without the ``rpc error: code = ...``."""
    return e.details or str(e)


class ContainerRunner:
    """The runtime manager's single-container operations. It holds the crash-loop and image
    back-offs and the termination messages read; ``settings`` gives the runtime manager's
    settings as they are now (the cgroup driver is learnt after the first sync); ``acting``
    tells the runtime manager that a pod is about to change in the runtime."""

    def __init__(
        self,
        *,
        runtime: RuntimeService,
        images: ImageService,
        settings: Callable[[], PodRuntimeSettings],
        acting: Callable[[str], None],
        clock: Clock,
        files: Files,
        backoff: Backoff,
        hooks: HookRunner,
        killer: ContainerKiller,
        log: Logger,
        image_options: ImageOptions | None = None,
    ) -> None:
        def wall() -> float:
            return clock.now().timestamp()

        self._runtime = runtime
        self._clock = clock
        self._hooks = hooks
        self._killer = killer
        self._get_settings = settings
        self._acting = acting
        self._files = files
        self._backoff = backoff
        image_backoff = Backoff(now=wall, initial=IMAGE_BACKOFF_INITIAL, cap=IMAGE_BACKOFF_MAX)
        self._images = ImageManager(
            images=images, backoff=image_backoff, monotonic=clock.monotonic, options=image_options
        )
        self._log = log

    @property
    def _settings(self) -> PodRuntimeSettings:
        return self._get_settings()

    async def ensure_image_volumes(
        self,
        pod: Pod,
        sandbox_config: cri.PodSandboxConfig,
        result: SyncResult,
        secrets: SecretsLoader,
    ) -> ImageVolumes:
        """Pull the pod's image volumes (see :mod:`.imagevolumes`)."""
        return await pull_image_volumes(self._images, pod, sandbox_config, result, secrets)

    def forget(self, uid: str) -> None:
        """Drop a deleted pod's back-offs."""
        self._backoff.forget(uid)
        self._images.forget(uid)

    # --- starting -----------------------------------------------------------------------

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
                    f"back-off {duration_seconds(self._backoff.get(key))} restarting failed "
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

    async def start_container(
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
        pull_secrets: SecretsLoader = no_secrets,
        image_volumes: ImageVolumes | None = None,
    ) -> bool:
        """Start one container (and run its postStart hook); False when it did not start.
        An ephemeral container joins its target's PID namespace (``targetContainerName``).
        ``image_volumes``: the pod's image volumes as :meth:`ensure_image_volumes` pulled
        them; a container mounting one that failed fails with its pull error."""

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
        prepared = await prepare_images(
            self._images,
            pod,
            container,
            sandbox_config=sandbox_config,
            result=result,
            secrets=pull_secrets,
            image_volumes=image_volumes,
        )
        if prepared is None:
            return False
        image_ref, container, image_mounts = prepared
        restart_count = previous.restart_count + 1 if previous is not None else 0
        message_file = termination_message_file(self._settings, pod, container, new_instance_id())
        try:
            target_id = namespace_target(container, state)
            env = dict(make_environment(pod, container, inputs))
            mounts = await volumes.container_mounts(container, env)
            devices = volumes.container_devices(container)
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
                    *image_volume_mounts(image_mounts, image_volumes or {}, pod),
                    *hosts,
                    *termination_message_mounts(message_file),
                ],
                devices=[device_to_cri(d) for d in devices],
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
        await self._killer.kill_container(
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

    # --- removing -----------------------------------------------------------------------

    async def _prune_dead(self, pod: Pod, state: PodRuntimeState, name: str) -> None:
        """Keep one dead instance of a container (its ``lastState``), as container GC does
        with ``maxPerPodContainer: 1``."""
        dead = [c for c in state.containers if c.name == name and c.state is ContainerState.EXITED]
        for record in dead[1:]:
            await self.remove_container(pod.name, pod.namespace, record)

    async def purge_init_containers(self, pod: Pod, state: PodRuntimeState) -> None:
        """A new sandbox runs init containers from scratch: remove the old instances."""
        names = {c.name for c in pod.spec.init_containers}
        for record in state.containers:
            if record.name in names and record.state is not ContainerState.RUNNING:
                await self.remove_container(pod.name, pod.namespace, record)

    async def remove_container(self, pod: str, namespace: str, record: ContainerRecord) -> None:
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

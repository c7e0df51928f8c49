"""The runtime manager: reads a pod's runtime state and carries out the plan of
``actions.compute_pod_actions`` in the kubelet's SyncPod order (``kuberuntime_manager.go``).

1. compute the plan; 2. kill the pod when its sandbox must go (or nothing should run any more);
3. kill unwanted containers; 4. RunPodSandbox, then PodSandboxStatus for the IPs; 5. start the
ephemeral containers never created yet (``targetContainerName`` -> CRI ``pid: TARGET``), then the
next init container (one at a time, and nothing else); 6. start the regular containers in spec
order. Starting and removing one container is :mod:`.containers`', stopping one
:mod:`.killing`'s (the kubelet's ``kuberuntime_container.go``). The manager holds no pod
state besides the back-offs and the last state read of each pod: ``pod_state(uid,
reuse=True)`` (a pod's periodic sync) returns it again, without a CRI request, when a relist
that started after it was read saw the same sandboxes and containers in the same states and
the manager has not acted on the pod since
(what a container or sandbox status holds besides its state does not change while it keeps
its state, except the resources the manager itself updates); a settled state (every
container exited, no sandbox ready: a killed pod) is returned again as long as the manager
has not acted on the pod, relist or not, so a deleted pod's terminated sync and its removal
do not read again what its kill read last.
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
from nodeagent.kuberuntime.backoff import Backoff
from nodeagent.kuberuntime.container import linux_resources
from nodeagent.kuberuntime.containers import ContainerRunner
from nodeagent.kuberuntime.dns import PodDNSError
from nodeagent.kuberuntime.env import EnvInputs
from nodeagent.kuberuntime.errors import CriError, CriNotFound
from nodeagent.kuberuntime.hooks import HookRunner
from nodeagent.kuberuntime.images import ImageOptions, SecretsLoader, no_secrets, once
from nodeagent.kuberuntime.killing import ContainerKiller
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.kuberuntime.messages import TerminationMessages
from nodeagent.kuberuntime.mounts import NoVolumes, PodMounts
from nodeagent.kuberuntime.oomreason import oom_report_may_lag, settle_left
from nodeagent.kuberuntime.podfiles import Files, PodFiles
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import (
    CONFIG_POD_SANDBOX_ERROR,
    CREATE_POD_SANDBOX_ERROR,
    ContainerFailure,
    PodEvent,
    SyncResult,
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
from nodeagent.kuberuntime.termination import containers_dir, with_message
from nodeagent.kuberuntime.termination_order import TerminationOrdering
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Container, Pod, termination_grace_period

MIN_GRACE_PERIOD: Final = 2  # minimumGracePeriodInSeconds
SANDBOX_CHANGED_MESSAGE: Final = "Pod sandbox changed, it will be killed and re-created."


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
        image_options: ImageOptions | None = None,
    ) -> None:
        """``cgroup_driver``: the driver the runtime uses (the connection asks it once);
        ``settings.cgroup_driver`` is used as it is when omitted. ``relisted``: the PLEG's
        view of its last relist (without it every ``pod_state`` asks the runtime).
        ``image_options``: how images are pulled (parallelism, credentials, pull records)."""

        def wall() -> float:
            return clock.now().timestamp()

        self._runtime = runtime
        self._clock = clock
        self._settings = settings
        self._cgroup_driver = cgroup_driver
        self._files: Files = files or PodFiles()
        self._log = log or get_logger("kuberuntime")
        hooks = hooks or HookRunner(runtime=runtime)
        self._killer = ContainerKiller(
            runtime=runtime, clock=clock, hooks=hooks, acting=self._acting, log=self._log
        )
        self._containers = ContainerRunner(
            runtime=runtime,
            images=images,
            settings=lambda: self._settings,
            acting=self._acting,
            clock=clock,
            files=self._files,
            backoff=backoff or Backoff(now=wall),
            hooks=hooks,
            killer=self._killer,
            log=self._log,
            image_options=image_options,
        )
        self._messages = TerminationMessages(files=self._files)
        self._relisted = relisted
        self._states: dict[str, tuple[float, PodRuntimeState]] = {}
        """Pod uid -> (event-loop time it was read, the state read)."""
        self._acts = 0
        """How many times the manager acted on a pod (a read racing an action is not kept)."""
        self.resources_updated = 0
        """Moves before and after each UpdateContainerResources (for the stats sampler)."""

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
        self._containers.forget(uid)
        self._messages.forget(uid)
        self._states.pop(uid, None)

    def _acting(self, uid: str) -> None:
        """The manager is about to change the pod in the runtime: its state must be read again."""
        self._states.pop(uid, None)
        self._acts += 1

    # --- reading ------------------------------------------------------------------------

    async def pod_state(self, uid: str, *, reuse: bool = False) -> PodRuntimeState:
        """Sandboxes and containers labelled with ``uid``, newest first, with their statuses.
        ``reuse``: the state read last, when the PLEG's newest relist started after that read
        and saw the same sandboxes and containers in the same states, or when it is settled
        (nothing of it can change until the manager acts on the pod)."""
        if reuse and self._relisted is not None:
            kept = self._states.get(uid)
            if kept is not None and kept[1].settled:
                return kept[1]
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
            status = await self._settled(status)
            record = container_record(status, listed_container.pod_sandbox_id)
            if record.state is ContainerState.EXITED:
                message = await self._messages.read(uid, status)
                record = dataclasses.replace(record, message=with_message(record.message, message))
            containers.append(record)
        return PodRuntimeState(
            uid=uid,
            name=name,
            namespace=namespace,
            sandboxes=tuple(sandboxes),
            containers=newest_first(containers),
        )

    async def _settled(self, status: cri.ContainerStatus) -> cri.ContainerStatus:
        """``status``, or read once more when the runtime's OOM event may still be on its way
        (:mod:`nodeagent.kuberuntime.oomreason`)."""
        now_ns = int(self._clock.now().timestamp() * 1e9)
        if not oom_report_may_lag(status, now_ns) or self._killer.stopped(status.id):
            return status
        await asyncio.sleep(settle_left(status, now_ns))
        try:
            return (await self._runtime.container_status(status.id)).status
        except CriNotFound:
            return status

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
        pull_secrets: SecretsLoader = no_secrets,
    ) -> SyncResult:
        """Carry out the plan; ``on_event`` gets each event as it happens; ``volumes``
        gives each container's mounts (none set up: a container that mounts one fails);
        ``startup``: the startup probes' results by container id; ``failed_probes``
        (container ID -> ``liveness``/``startup``) names the containers the prober condemned.
        ``inputs``: the containers' environment inputs, or how to get them: asked only when a
        container is to start (a periodic sync of a running pod fetches none); so are the
        ``pull_secrets`` (once per sync, and only when an image needs credentials)."""
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
            await self._containers.purge_init_containers(pod, state)
        else:
            kill_ips = state.sandboxes[0].ips if state.sandboxes else ()
            for kill in actions.containers_to_kill:
                await self._killer.kill_container(
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
        secrets = once(pull_secrets)
        image_volumes = None
        if any(v.image is not None for v in pod.spec.volumes):
            image_volumes = await self._containers.ensure_image_volumes(
                pod, sandbox_config, result, secrets
            )

        async def start(container: Container, kind: str) -> bool:
            started = await self._containers.start_container(
                pod,
                container,
                state=state,
                sandbox_id=sandbox_id,
                sandbox_config=sandbox_config,
                inputs=env,
                result=result,
                volumes=volumes or NoVolumes(),
                pull_secrets=secrets,
                image_volumes=image_volumes,
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
                await self._killer.kill_container(
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
            await self._containers.remove_container(state.name, state.namespace, record)
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

"""Wiring of the pod managers: one builder that the daemon and the tests call.

The pod pipeline itself (sources, sync loop, PLEG, pod workers, pod sync, status, prober,
allocation, mirror pods) is wired by :func:`nodeagent.pods.pipeline.wire_pods` over
collaborators it is given. :func:`pod_managers` builds the daemon's collaborators (the CRI
connection, the watch caches, the static pod files, the volume and container managers, the
garbage collectors) around it, for ``agent.build`` and the integration tests. Its managers,
in start order: the CRI connection, the container manager, the watch caches, the static pod
file source, the sync loop (which runs the PLEG, the pod workers and the status manager in
its own TaskGroup) over both sources, the prober, the mirror pod manager and the garbage
collectors. Stopped in reverse: the garbage collectors first, the CRI connection last.
Without an API (``api=None``, standalone) there are no watch caches and no mirror pod
manager.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nodeagent import cgroups
from nodeagent.allocation import AllocationManager
from nodeagent.allocation.manager import STATE_FILE as ALLOCATION_STATE_FILE
from nodeagent.apiserver import PODS, SERVICES, Api, WatchCache
from nodeagent.clock import Clock
from nodeagent.cm.host import swap_capacity, swap_controller_present
from nodeagent.cm.manager import ContainerManager, container_manager
from nodeagent.config import Config, features
from nodeagent.events import EventSink, ObjectEventSink
from nodeagent.eviction import Eviction
from nodeagent.gc import GarbageCollectors, PodPresence, gc_managers
from nodeagent.kuberuntime.connection import RuntimeConnection
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.kuberuntime.resources import SwapInputs
from nodeagent.manager import Manager
from nodeagent.nodestatus.allocatable import allocatable_memory as node_allocatable_memory
from nodeagent.objectmanager import config_map_manager, secret_manager
from nodeagent.pluginmanager import PluginManager
from nodeagent.pods.imagepulls import image_options
from nodeagent.pods.pipeline import PROBE_USER_AGENT, wire_pods
from nodeagent.pods.pleg import GenericPleg
from nodeagent.pods.sync import FinalStatus, PodSync
from nodeagent.pods.syncloop import (
    PodStore,
    SyncLoop,
    node_allocatable,
)
from nodeagent.pods.workers import PodWorkers, Stage
from nodeagent.podspec import Pod
from nodeagent.prober import ProbeIO, ProberManager
from nodeagent.prober.grpchealth import grpc_checker
from nodeagent.staticpods import (
    FileSource,
    MirrorPods,
    NoApiServer,
)
from nodeagent.status import StatusManager
from nodeagent.status.manager import PodDeleter
from nodeagent.sysctl import node_allowlist
from nodeagent.volumemanager.content import content_source
from nodeagent.volumemanager.csi import CSI_PLUGIN_TYPE, CsiPlugin
from nodeagent.volumemanager.manager import VolumeManager


def _memory_bytes() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def runtime_settings(
    config: Config,
    *,
    node_name: str,
    node_ips: tuple[str, ...] = (),
    memory_capacity: int | None = None,
    container_logs_dir: str = "/var/log/containers",
) -> PodRuntimeSettings:
    k = config.kubelet
    v2 = cgroups.host_cgroup_fs() == "cgroup2"
    memory = memory_capacity if memory_capacity is not None else _memory_bytes()
    return PodRuntimeSettings(
        node_name=node_name,
        root_dir=config.node.root_dir,
        pod_logs_dir=k.pod_logs_dir,
        container_logs_dir=container_logs_dir,
        cluster_dns=tuple(k.cluster_dns),
        cluster_domain=k.cluster_domain,
        resolv_conf=k.resolv_conf,
        node_ips=node_ips,
        cgroup_driver=k.cgroup_driver,
        cgroups_per_qos=k.cgroups_per_qos,
        cgroup_root=k.cgroup_root or "/",
        cgroup_v2=v2,
        memory_capacity=memory,
        runtime_name="containerd",
        seccomp_default=k.seccomp_default,
        single_process_oom_kill=k.single_process_oom_kill,
        hostname_override=features.effective(k.feature_gates)["HostnameOverride"],
        swap=SwapInputs(
            behavior=k.memory_swap.swap_behavior,
            cgroup_v2=v2,
            controller=v2 and swap_controller_present(),
            memory_capacity=memory,
            swap_capacity=swap_capacity(),
        ),
    )


@dataclass(frozen=True)
class PodManagers:
    connection: RuntimeConnection
    pods_cache: WatchCache | None
    sync_loop: SyncLoop
    pleg: GenericPleg
    status: StatusManager
    gc: GarbageCollectors
    static_pods: FileSource
    mirrors: MirrorPods | None
    prober: ProberManager
    sources: PodStore
    workers: PodWorkers
    podsync: PodSync
    services_cache: WatchCache | None = None
    cm: ContainerManager | None = None
    allocation: AllocationManager | None = None
    runtime: RuntimeManager | None = None
    csi: CsiPlugin | None = None
    plugins: PluginManager | None = None
    volumes: VolumeManager | None = None

    def limits_generation(self) -> int:
        """Moves whenever the agent writes a pod cgroup's limits or resizes a container (the
        stats sampler then reads every pod's and container's limits again)."""
        written = self.cm.limits_written if self.cm is not None else 0
        updated = self.runtime.resources_updated if self.runtime is not None else 0
        return written + updated

    async def evict(self, pod: Pod, eviction: Eviction) -> None:
        """The eviction manager's terminator (see :func:`evict_pod`)."""
        evict_pod(self.podsync, self.workers, pod, eviction)

    def cleaned_up(self, uid: str) -> bool:
        """The pod's containers are stopped (its worker finished terminating, or is gone)."""
        return self.workers.stage(uid) in (None, Stage.TERMINATED)

    def terminated(self, uid: str) -> bool:
        """The pod's containers were stopped for good (it finished or was evicted), though
        the pod may still be in the API."""
        return self.workers.stage(uid) is Stage.TERMINATED

    def active_pods(self) -> list[Pod]:
        """Pods that run or may run (admitted, not terminating)."""
        return self.workers.active_pods()

    def allocated_pods(self) -> list[Pod]:
        """The active pods with the resources the node allocated them (the kubelet's
        ``getAllocatedPods``): a resize not yet accepted (``PodResizePending``) does not
        change what they request. What eviction ranks and describes."""
        pods = self.workers.active_pods()
        return self.allocation.allocated_pods(pods) if self.allocation is not None else pods

    async def kill_pod(
        self, pod: Pod, grace: int, mutate: Callable[[dict[str, Any]], dict[str, Any]]
    ) -> None:
        """Kill ``pod`` through its worker with at most ``grace`` seconds (preStop hooks
        included) and ``mutate`` applied to its statuses from now on; return once its
        containers are stopped (node shutdown)."""
        self.podsync.override_status(pod.uid, mutate)
        await self.workers.kill(pod.uid, grace)

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The pod as this node knows it, with the newest status the agent computed for it
        (the kubelet API's view: ``/containerLogs``, ``/pods``)."""
        for pod in self.sources.items():
            meta = pod.get("metadata") or {}
            if meta.get("name") == name and meta.get("namespace", "default") == namespace:
                status = self.status.last_status(str(meta.get("uid", "")))
                return {**pod, "status": status} if status is not None else dict(pod)
        return None

    @property
    def managers(self) -> list[Manager]:
        api_side = [c for c in (self.pods_cache, self.services_cache) if c is not None]
        mirrors = [self.mirrors] if self.mirrors is not None else []
        return [
            self.connection,
            *([self.cm] if self.cm is not None else []),
            *api_side,
            self.static_pods,
            *[m for m in (self.csi, self.plugins) if m is not None],
            self.sync_loop,
            self.prober,
            *mirrors,
            *self.gc.managers,
        ]


def evict_pod(podsync: PodSync, workers: PodWorkers, pod: Pod, eviction: Eviction) -> None:
    """The pod's status becomes Failed with the eviction's reason, message and
    ``DisruptionTarget`` condition, and its containers are killed with the eviction's grace
    period (the kubelet's ``TerminatePodAbnormally`` through the pod workers)."""
    podsync.set_final_status(
        pod.uid,
        FinalStatus(reason=eviction.reason, message=eviction.message, condition=eviction.condition),
    )
    workers.terminate(pod.uid, eviction.grace_period)


def pod_managers(
    config: Config,
    *,
    api: Api | None,
    clock: Clock,
    node_name: str,
    get_node: Callable[[], Mapping[str, Any] | None],
    node_ips: tuple[str, ...] = (),
    settings: PodRuntimeSettings | None = None,
    deleter: PodDeleter | None = None,
    events: ObjectEventSink | None = None,
    node_events: EventSink | None = None,
    shutting_down: Callable[[], bool] = lambda: False,
    network_errors: Callable[[], Sequence[str]] = tuple,
    kernel_release: str | None = None,
) -> PodManagers:
    """The pod managers for ``config``: the daemon's collaborators (the CRI connection, the
    API's watch caches, the static pod files, the volume and container managers, the garbage
    collectors) around the pipeline :func:`wire_pods` builds. ``get_node`` reads this node's
    Node object from the node cache. ``deleter``: how a terminated pod leaves the API — give
    ``GracePeriodZeroDeleter(api=api_client)`` for the real client (the kubelet's call).
    ``events``: where the pods' Events go (the node's ``EventRecorder``); none if omitted.
    ``node_events``: where the Node's Events go (garbage collection failures).
    ``api=None``: a standalone node, static pods only (no API source, no mirror pods).
    ``shutting_down``: while it holds, admission refuses new pods (node shutdown).
    ``network_errors``: the runtime's network errors; while any, only host-network pods start.
    ``kernel_release``: which safe sysctls pods may set (``uname -r`` when omitted)."""
    settings = settings or runtime_settings(config, node_name=node_name, node_ips=node_ips)
    connection = RuntimeConnection(
        endpoint=config.kubelet.container_runtime_endpoint,
        runtime_request_timeout=config.kubelet.runtime_request_timeout.seconds,
        cgroup_driver=settings.cgroup_driver,
    )
    pods_cache = (
        WatchCache(
            api=api,
            resource=PODS,
            field_selector=f"spec.nodeName={node_name}",
            name="cache:pods",
        )
        if api is not None
        else None
    )
    # The kubelet's own Service informer: every container gets the ``KUBERNETES_SERVICE_*``
    # variables of the `kubernetes` Service (and, with enableServiceLinks, its namespace's).
    services_cache = (
        WatchCache(api=api, resource=SERVICES, name="cache:pod-services")
        if api is not None
        else None
    )
    static_pods = FileSource(
        path=config.kubelet.static_pod_path,
        node_name=node_name,
        clock=clock,
        period=config.kubelet.file_check_frequency.seconds,
    )

    def allocatable_memory() -> int | None:
        found = node_allocatable_memory(get_node())
        return found if found is not None else settings.memory_capacity

    # One ConfigMap and one Secret manager for the volumes and the containers' environment
    # (standalone: NoApiServer says why a pod cannot read one).
    server: Api = api if api is not None else NoApiServer()
    config_maps = config_map_manager(api=server, clock=clock)
    secrets = secret_manager(api=server, clock=clock)
    csi = CsiPlugin(root_dir=settings.root_dir, node_name=node_name, api=api)
    plugins = PluginManager(
        root_dir=settings.root_dir, handlers={CSI_PLUGIN_TYPE: csi.registration}
    )
    volumes = VolumeManager(
        root_dir=settings.root_dir,
        csi=csi.volumes,
        content=content_source(
            api=api,
            clock=clock,
            allocatable=lambda: node_allocatable(get_node()) or {},
            config_maps=config_maps,
            secrets=secrets,
        ),
        allocatable_memory=allocatable_memory,
        api=api,
        node_name=node_name,
        node_labels=lambda: ((get_node() or {}).get("metadata") or {}).get("labels") or {},
    )
    cm = container_manager(
        config, settings=settings, driver=connection.cgroup_driver, events=node_events
    )
    pulls = image_options(config, api=api, clock=clock, root_dir=settings.root_dir)
    pipeline = wire_pods(
        node_name=node_name,
        clock=clock,
        settings=settings,
        runtime=connection,
        api=api,
        pods_cache=pods_cache,
        static_pods=static_pods,
        get_node=get_node,
        node_ips=node_ips,
        probe_io=ProbeIO(
            runtime=connection,
            user_agent=PROBE_USER_AGENT,
            grpc_check=grpc_checker(PROBE_USER_AGENT),
        ),
        cgroup_driver=connection.cgroup_driver,
        services_cache=services_cache,
        volumes=volumes,
        cgroups=cm,
        allocation_state=Path(settings.root_dir) / ALLOCATION_STATE_FILE,
        deleter=deleter,
        events=events,
        config_maps=config_maps,
        secrets=secrets,
        shutting_down=shutting_down,
        network_errors=network_errors,
        comparison_operators=features.effective(config.kubelet.feature_gates)[
            "TaintTolerationComparisonOperators"
        ],
        sysctls=node_allowlist(
            platform.release() if kernel_release is None else kernel_release,
            config.kubelet.allowed_unsafe_sysctls,
        ),
        image_options=pulls,
    )
    sources = pipeline.sources
    workers = pipeline.workers
    gc = gc_managers(
        config,
        runtime=connection,
        images=connection,
        pods=PodPresence(
            synced=lambda: sources.synced, api_pods=sources.items, known=workers.known
        ),
        clock=clock,
        pod_logs_dir=settings.pod_logs_dir,
        container_logs_dir=settings.container_logs_dir,
        events=node_events,
        # The pull records of images garbage collection removed go with them.
        post_image_gc=[pulls.pull_manager.prune_unknown_records] if pulls.pull_manager else [],
    )
    return PodManagers(
        connection=connection,
        pods_cache=pods_cache,
        sync_loop=pipeline.sync_loop,
        pleg=pipeline.pleg,
        status=pipeline.status,
        gc=gc,
        static_pods=static_pods,
        mirrors=pipeline.mirrors,
        prober=pipeline.prober,
        sources=sources,
        workers=workers,
        podsync=pipeline.podsync,
        services_cache=services_cache,
        cm=cm,
        allocation=pipeline.allocation,
        runtime=pipeline.runtime,
        csi=csi,
        plugins=plugins,
        volumes=volumes,
    )

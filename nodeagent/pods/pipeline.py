"""The pod pipeline's wiring: :func:`wire_pods` builds the sources, sync loop, PLEG, pod
workers, pod sync, status, prober, allocation and mirror pods over collaborators it is given:
the container runtime, the API, the pod sources, the host's edges. It touches nothing itself,
so a test gives it ``FakeRuntime`` and ``FakeApiServer`` and runs the very wiring the daemon
runs (:func:`nodeagent.pods.managers.pod_managers` gives it the daemon's collaborators).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nodeagent.allocation import AllocationManager
from nodeagent.apiserver import Api, WatchCache
from nodeagent.clock import Clock
from nodeagent.events import DiscardEvents, ObjectEventSink
from nodeagent.kuberuntime.images import ImageOptions
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podfiles import Files
from nodeagent.kuberuntime.podsettings import CgroupDriver, PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.service import ImageService, RuntimeService
from nodeagent.nodestatus.compute import KUBERNETES_VERSION
from nodeagent.objectmanager import ObjectManager, config_map_manager, secret_manager
from nodeagent.pods.envsource import ApiEnvSource
from nodeagent.pods.imagepulls import ApiPullSecrets
from nodeagent.pods.pleg import GenericPleg
from nodeagent.pods.resolvconf import HostResolvConf
from nodeagent.pods.sync import PodCgroups, PodSync
from nodeagent.pods.syncloop import (
    ALL_SAFE_SYSCTLS,
    PodStore,
    SyncEvents,
    SyncLoop,
    node_allocatable,
    node_internal_ips,
)
from nodeagent.pods.workers import PodWorkers
from nodeagent.podspec import Pod
from nodeagent.prober import ProbeIO, ProberManager
from nodeagent.staticpods import (
    FileSource,
    MirrorIndex,
    MirrorPods,
    MirrorStatusApi,
    NoApiServer,
    PodSources,
)
from nodeagent.status import StatusManager
from nodeagent.status.manager import PlainDeleter, PodDeleter, drifted
from nodeagent.sysctl import Allowlist
from nodeagent.volumemanager.manager import VolumeManager

PROBE_USER_AGENT = "kube-probe/" + ".".join(KUBERNETES_VERSION.lstrip("v").split(".")[:2])


@dataclass(frozen=True)
class PodPipeline:
    """The pod pipeline :func:`wire_pods` builds: the sync loop over its sources, the PLEG,
    the pod workers and the pod sync with the managers it drives."""

    sources: PodStore
    sync_loop: SyncLoop
    pleg: GenericPleg
    runtime: RuntimeManager
    status: StatusManager
    prober: ProberManager
    podsync: PodSync
    workers: PodWorkers
    allocation: AllocationManager | None
    mirror_status: MirrorStatusApi | None
    mirrors: MirrorPods | None


class CriRuntime(RuntimeService, ImageService, Protocol):
    """The container runtime the pipeline runs pods on: ``RuntimeConnection`` to containerd,
    ``FakeRuntime`` in tests."""


def _ignore(pod: Pod) -> None:
    del pod


def wire_pods(
    *,
    node_name: str,
    clock: Clock,
    settings: PodRuntimeSettings,
    runtime: CriRuntime,
    api: Api | None,
    pods_cache: WatchCache | None,
    static_pods: FileSource | None,
    get_node: Callable[[], Mapping[str, Any] | None] = lambda: None,
    node_ips: tuple[str, ...] = (),
    probe_io: ProbeIO | None = None,
    host_dns: Callable[[], Awaitable[ResolvConf]] | None = None,
    files: Files | None = None,
    cgroup_driver: Callable[[], Awaitable[CgroupDriver]] | None = None,
    services_cache: WatchCache | None = None,
    volumes: VolumeManager | None = None,
    cgroups: PodCgroups | None = None,
    allocation: bool = True,
    allocation_state: Path | None = None,
    deleter: PodDeleter | None = None,
    events: ObjectEventSink | None = None,
    shutting_down: Callable[[], bool] = lambda: False,
    network_errors: Callable[[], Sequence[str]] = tuple,
    sysctls: Allowlist = ALL_SAFE_SYSCTLS,
    image_options: ImageOptions | None = None,
    config_maps: ObjectManager | None = None,
    secrets: ObjectManager | None = None,
    comparison_operators: bool = False,
) -> PodPipeline:
    """Wire the pod pipeline over its collaborators, each injected: the daemon's are built
    by :func:`pod_managers`, a test gives its fakes. Nothing here touches the host.

    ``pods_cache``: this node's pods from the API (None: standalone); ``static_pods``: the
    static pod file source (None: API pods only, their statuses go to ``api`` directly); both:
    the mirror pod manager too. ``get_node`` reads this node's Node object (addresses for
    hostIP, allocatable for admission and the downward API). ``probe_io``, ``host_dns``,
    ``files``: the probes' edges, the host's resolv.conf and the pod files (the real ones
    when omitted). ``volumes``, ``cgroups``: the volume and container managers (without
    them a pod that needs them fails visibly). ``allocation``: in-place resize, with its
    checkpoint at ``allocation_state`` (None: in memory). ``deleter``: how a terminated pod
    leaves the API. ``events``: where the pods' Events go. ``shutting_down``: while it
    holds, admission refuses new pods. ``sysctls``: the sysctls pods may set.
    ``image_options``: how images are pulled (parallelism, plugins, pull records); with an
    API, pods' ``imagePullSecrets`` are read from it.

    ``config_maps``, ``secrets``: the ConfigMap and Secret managers the containers'
    environment shares with the volumes (new ones over ``api`` when omitted).
    ``comparison_operators``: the ``TaintTolerationComparisonOperators`` gate (admission's
    ``Lt``/``Gt`` tolerations of ``NoExecute`` taints)."""
    server: Api = api if api is not None else NoApiServer()
    config_maps = config_maps or config_map_manager(api=server, clock=clock)
    secrets = secrets or secret_manager(api=server, clock=clock)
    mirror_status = None
    sources: PodStore
    if static_pods is not None:
        sources = PodSources(static_pods, *([pods_cache] if pods_cache is not None else []))
        mirror_status = MirrorStatusApi(
            api=server,
            statics=static_pods,
            mirrors=MirrorIndex(api_pods=pods_cache.items if pods_cache is not None else list),
            drifted=drifted,
        )
    elif pods_cache is not None:
        sources = pods_cache
    else:
        raise ValueError("the pod pipeline needs a pod source: the API's or static pods")

    def host_ips() -> tuple[str, ...]:
        return node_internal_ips(get_node(), node_ips)

    def allocatable() -> Mapping[str, str] | None:
        return node_allocatable(get_node())

    sync_events = SyncEvents()
    pleg = GenericPleg(runtime=runtime, on_event=sync_events.pleg_event)
    manager = RuntimeManager(
        runtime=runtime,
        images=runtime,
        settings=settings,
        clock=clock,
        files=files,
        cgroup_driver=cgroup_driver,
        relisted=pleg.listed,
        image_options=image_options,
    )
    status = StatusManager(
        api=mirror_status if mirror_status is not None else server,
        deleter=deleter or PlainDeleter(api=server),
        answered_again=server.answered_again,
    )
    # resize admission counts the pods admission counts (the kubelet's GetActivePods)
    loop_ref: list[SyncLoop] = []
    allocation_manager = (
        AllocationManager(
            path=allocation_state,
            allocatable=allocatable,
            active_pods=lambda: loop_ref[0].active_pods() if loop_ref else [],
            swap=settings.swap,
            events=events,
        )
        if allocation
        else None
    )
    prober = ProberManager(
        io=probe_io or ProbeIO(runtime=runtime, user_agent=PROBE_USER_AGENT),
        pod_status=status.last_status,
        clock=clock,
        on_update=sync_events.probe_result,
        events=events,
    )
    podsync = PodSync(
        runtime=manager,
        status=status,
        clock=clock,
        env=ApiEnvSource(
            api=server,
            host_ips=host_ips,
            allocatable=lambda: allocatable() or {},
            services=services_cache.items if services_cache is not None else list,
            services_synced=lambda: services_cache is None or services_cache.synced,
            wait_services=services_cache.wait_synced if services_cache is not None else None,
            config_maps=config_maps,
            secrets=secrets,
        ),
        host_dns=host_dns or HostResolvConf(path=settings.resolv_conf),
        host_ips=host_ips,
        events=events,
        volumes=volumes,
        probes=prober,
        cgroups=cgroups,
        allocation=allocation_manager,
        pull_secrets=(
            ApiPullSecrets(api=api, events=events or DiscardEvents()) if api is not None else None
        ),
        objects=(config_maps, secrets),
        network_errors=network_errors,
    )
    workers = PodWorkers(syncer=podsync)
    sync_loop = SyncLoop(
        node_name=node_name,
        events=sync_events,
        source=sources,
        workers=workers,
        pleg=pleg,
        podsync=podsync,
        status=status,
        clock=clock,
        allocatable=allocatable,
        event_sink=events,
        shutting_down=shutting_down,
        allocated=allocation_manager.allocated_pods if allocation_manager is not None else list,
        on_admitted=allocation_manager.admitted if allocation_manager is not None else _ignore,
        load_allocations=allocation_manager.load if allocation_manager is not None else None,
        node=get_node,
        comparison_operators=comparison_operators,
        sysctls=sysctls,
    )
    loop_ref.append(sync_loop)
    mirrors = (
        MirrorPods(
            api=server,
            deleter=deleter or PlainDeleter(api=server),
            node_name=node_name,
            statics=static_pods,
            api_pods=pods_cache,
            get_node=get_node,
            terminating=workers.known,
            deliver_statuses=mirror_status.deliver_pending,
        )
        if pods_cache is not None and static_pods is not None and mirror_status is not None
        else None
    )
    return PodPipeline(
        sources=sources,
        sync_loop=sync_loop,
        pleg=pleg,
        runtime=manager,
        status=status,
        prober=prober,
        podsync=podsync,
        workers=workers,
        allocation=allocation_manager,
        mirror_status=mirror_status,
        mirrors=mirrors,
    )

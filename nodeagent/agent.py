"""The composition root: builds the managers from the configuration and hands them to the
:class:`~nodeagent.supervisor.Agent`, which runs them in one ``asyncio.TaskGroup``.

It holds no domain state and no domain code: each helper here only chooses and connects what
the managers' packages provide.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from nodeagent import cgroups, gcpacing, hostinfo, kuberuntime
from nodeagent.apiserver import NODES, Api, ApiClient, WatchCache
from nodeagent.certificate.manager import CredentialSettings, CredentialsManager
from nodeagent.clock import Clock, RealClock
from nodeagent.config import Config, KubeletConfiguration, features
from nodeagent.containerlogs import http as logs_http
from nodeagent.containerlogs import nodelogs
from nodeagent.containerlogs.nodelogs import NodeLogSettings
from nodeagent.containerlogs.rotation import RotationManager, rotation_policy
from nodeagent.containerlogs.service import ContainerLogs
from nodeagent.events import EventRecorder
from nodeagent.eviction import EvictionManager, contention, parse_thresholds
from nodeagent.eviction.contention_monitor import ContentionMonitor
from nodeagent.eviction.thresholds import DISK_SIGNALS
from nodeagent.gc import ImageGC
from nodeagent.lifecycle.admission import AdmitResult
from nodeagent.log import get_logger
from nodeagent.logind import DbusLogind
from nodeagent.manager import Manager, NullManager
from nodeagent.nodelease import NodeLeaseController
from nodeagent.nodeshutdown.manager import NodeShutdownManager
from nodeagent.nodeshutdown.policy import shutdown_groups
from nodeagent.nodestatus.allocatable import allocatable_memory as node_allocatable_memory
from nodeagent.nodestatus.facts import HostFacts
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.nodestatus.metrics import describe_node
from nodeagent.nodestatus.report import STATE_FILE, NodeReport
from nodeagent.nodestatus.setters import Contention, Pressure, RuntimeStatus
from nodeagent.nodestatus.settings import NodeSettings, settings_from_config
from nodeagent.podcidr import PodCIDRManager
from nodeagent.pods.managers import PodManagers, pod_managers
from nodeagent.podspec import Pod
from nodeagent.proxy.service import proxy_managers
from nodeagent.runtimestate import RuntimeState
from nodeagent.server import Extension
from nodeagent.server.service import server_manager
from nodeagent.stats import http as stats_http
from nodeagent.stats import volumemetrics
from nodeagent.stats.cgroupv1 import V1PodCgroups
from nodeagent.stats.housekeeping import CgroupStats
from nodeagent.stats.node import memory_available as node_memory_available
from nodeagent.stats.pressure import psi_summary
from nodeagent.stats.summary import StatsProvider, host_stats_provider
from nodeagent.status import GracePeriodZeroDeleter
from nodeagent.supervisor import Agent
from nodeagent.systemd.notify import Notifier, watchdog_interval


def build(config: Config, *, environ: Mapping[str, str]) -> Agent:
    """Wire the managers for ``config``. The only place that knows every manager."""
    notifier = Notifier.from_environ(environ)
    node = settings_from_config(config, hostname=hostinfo.hostname())
    describe_node(node.node_name, cgroup_version=2 if _cgroup_v2() else 1)
    managers: list[Manager] = []
    if api_server_mode(node):
        managers += _node_managers(node, config=config)
    else:
        # The kubelet's standalone mode: without credentials there is no API server to talk
        # to. Say so loudly; the managers that need no API server still run.
        get_logger("agent").warning(
            "No kubeconfig and no bootstrap kubeconfig: running standalone, the node will not"
            " register with an API server",
            kubeconfig=str(node.kubeconfig),
        )
        managers += _standalone_managers(node, config=config)
    return Agent(
        managers=managers,
        notifier=notifier,
        watchdog_interval=watchdog_interval(environ),
        gc_period=gcpacing.FORCE_PERIOD,
    )


def _standalone_managers(node: NodeSettings, *, config: Config) -> list[Manager]:
    """Standalone with a ``staticPodPath``: the static pods run, as the kubelet runs them
    without an API server (no mirror pods, statuses stay local). Without one: nothing."""
    clock = RealClock()
    if not config.kubelet.static_pod_path:
        # No pods, but the kubelet still holds its inhibitor lock (and a shutdown is
        # delayed only by the time the empty groups take: none).
        return [
            NullManager(name="standalone"),
            _shutdown_manager(config, node, clock=clock, pods=None, on_change=lambda: None),
        ]
    pods = pod_managers(
        config,
        api=None,
        clock=clock,
        node_name=node.node_name,
        get_node=lambda: None,
        node_ips=tuple(str(ip) for ip in node.node_ips),
    )
    shutdown = _shutdown_manager(config, node, clock=clock, pods=pods, on_change=lambda: None)
    logs = RotationManager(runtime=pods.connection, clock=clock, policy=rotation_policy(config))
    needs_api = [
        field
        for field, on in (
            ("kubelet.authorization.mode: Webhook", config.kubelet.authorization.mode == "Webhook"),
            ("kubelet.serverTLSBootstrap: true", config.kubelet.server_tls_bootstrap),
        )
        if on
    ]
    if needs_api:
        # Both need an API server; the kubelet refuses to start this way.
        get_logger("agent").warning(
            "Standalone: the kubelet API is not served: "
            + ", ".join(needs_api)
            + " need an API server",
        )
        return [*pods.managers, shutdown, logs]
    stats, sampler = node_stats(config, pods=pods, clock=clock, node_name=node.node_name)
    server = _kubelet_api(config, node, api=None, clock=clock, pods=pods, stats=stats)
    return [*pods.managers, shutdown, sampler, logs, server]


def _shutdown_manager(
    config: Config,
    node: NodeSettings,
    *,
    clock: Clock,
    pods: PodManagers | None,
    on_change: Callable[[], None],
    events: EventRecorder | None = None,
) -> NodeShutdownManager:
    """Graceful node shutdown through logind (the kubelet's ``nodeshutdown`` manager)."""

    async def no_kill(pod: Pod, grace: int, mutate: Callable[[Any], Any]) -> None:
        del pod, grace, mutate

    return NodeShutdownManager(
        logind=DbusLogind(),
        groups=shutdown_groups(config.kubelet),
        clock=clock,
        state_dir=node.root_dir,
        active_pods=pods.active_pods if pods is not None else list,
        kill_pod=pods.kill_pod if pods is not None else no_kill,
        status_pending=pods.status.pending if pods is not None else lambda: False,
        on_change=on_change,
        events=events,
    )


def node_stats(
    config: Config, *, pods: PodManagers, clock: Clock, node_name: str
) -> tuple[StatsProvider, CgroupStats]:
    """The Summary provider and, on a cgroup v2 host, the cgroup sampler behind it."""
    sampler = CgroupStats(
        clock=clock,
        enabled=_cgroup_v2(),
        interval=config.kubelet.housekeeping_interval.seconds,
        limits_generation=pods.limits_generation,
    )
    stats = host_stats_provider(
        runtime=pods.connection,
        clock=clock,
        node_name=node_name,
        fs_path=config.node.root_dir,
        cgroups=sampler,
        image_fs=pods.connection.image_fs_info,
        pod_logs_dir=config.kubelet.pod_logs_dir,
        persistent_volumes=pods.volumes.persistent_volume_stats if pods.volumes else None,
        v1_pods=_v1_pod_cgroups(config.kubelet, v2=sampler.enabled),
    )
    volumemetrics.set_source(stats.persistent_entries)
    return stats, sampler


def _v1_pod_cgroups(kubelet: KubeletConfiguration, *, v2: bool) -> V1PodCgroups | None:
    """The pod cgroups' reader on a cgroup v1 host with the layout it knows (cgroupfs, QoS)."""
    if v2 or kubelet.cgroup_driver != "cgroupfs" or not kubelet.cgroups_per_qos:
        return None
    return V1PodCgroups(cgroup_root=kubelet.cgroup_root)


def _cgroup_v2() -> bool:
    try:
        return cgroups.host_cgroup_fs() == "cgroup2"
    except OSError:
        return False


def eviction_manager(
    config: Config,
    *,
    pods: PodManagers,
    stats: StatsProvider,
    clock: Clock,
    events: EventRecorder,
    get_node: Callable[[], Mapping[str, Any] | None],
    on_change: Callable[[], None],
) -> EvictionManager:
    """The eviction manager over the summary, the pod workers and GC; its admit handler is
    installed in the pod sync loop."""
    k = config.kubelet
    thresholds = parse_thresholds(
        hard=k.eviction_hard,
        soft=k.eviction_soft,
        soft_grace={s: d.seconds for s, d in k.eviction_soft_grace_period.items()},
        min_reclaim=k.eviction_minimum_reclaim,
    )

    async def delete_unused_containers() -> None:
        await pods.gc.containers.garbage_collect(terminated=pods.terminated)

    async def delete_unused_images() -> None:
        if isinstance(pods.gc.images, ImageGC):
            await pods.gc.images.delete_unused_images()

    disk = [delete_unused_containers, delete_unused_images]
    reclaim = dict.fromkeys(DISK_SIGNALS, disk)

    async def memory_available() -> int | None:
        return node_memory_available()

    manager = EvictionManager(
        thresholds=thresholds,
        transition_period=k.eviction_pressure_transition_period.seconds,
        max_pod_grace_period=k.eviction_max_pod_grace_period,
        summary=stats.summary,
        # the kubelet's getAllocatedPods: ranked and described with their allocations
        active_pods=pods.allocated_pods,
        terminator=pods,
        clock=clock,
        pod_cleaned_up=pods.cleaned_up,
        reclaim=reclaim,
        allocatable_memory=lambda: node_allocatable_memory(get_node()),
        memory_available=memory_available,
        node_events=events,
        pod_events=events,
        on_change=on_change,
        local_storage=k.local_storage_capacity_isolation,
        dedicated_image_fs=stats.dedicated_image_fs,
    )

    def admit(pod: Pod) -> AdmitResult | None:
        refusal = manager.admit(pod)
        return None if refusal is None else AdmitResult(False, refusal.reason, refusal.message)

    pods.sync_loop.admit_handlers.append(admit)
    return manager


def contention_monitor(
    config: Config,
    *,
    sampler: CgroupStats,
    events: EventRecorder,
    on_change: Callable[[], None],
) -> ContentionMonitor | None:
    """The PSI contention monitor (KEP-5394) when the ``PSINodeCondition`` gate is on. It reads
    the cgroup sampler's newest pass (``/proc/pressure`` and kubepods), not the whole summary:
    no CRI call, nothing read twice."""
    k = config.kubelet
    if not features.effective(k.feature_gates).get("PSINodeCondition"):
        return None
    interval = k.housekeeping_interval.seconds

    async def psi() -> dict[str, Any]:
        return psi_summary(await sampler.current(max_age=2 * interval))

    return ContentionMonitor(
        thresholds={
            contention.SYSTEM_MEMORY: k.system_memory_contention_threshold,
            contention.SYSTEM_DISK: k.system_disk_contention_threshold,
            contention.KUBEPODS_MEMORY: k.kubepods_memory_contention_threshold,
            contention.KUBEPODS_DISK: k.kubepods_disk_contention_threshold,
        },
        summary=psi,
        interval=interval,
        events=events,
        on_change=on_change,
    )


def _contention(monitor: ContentionMonitor | None) -> tuple[Contention, ...]:
    if monitor is None:
        return ()
    return tuple(Contention(c.type, c.status, c.reason, c.message) for c in monitor.conditions())


def _kubelet_api(
    config: Config,
    node: NodeSettings,
    *,
    api: Api | None,
    clock: Clock,
    pods: PodManagers,
    get_node: Callable[[], dict[str, Any] | None] = lambda: None,
    stats: StatsProvider | None = None,
) -> Manager:
    """The kubelet API server on ``port`` with its extensions (logs, stats, node logs)."""
    return server_manager(
        config,
        api=api,
        clock=clock,
        node_name=node.node_name,
        hostname=node.hostname,
        node_ips=tuple(str(ip) for ip in node.node_ips if not ip.is_unspecified),
        pki_dir=node.pki_dir,
        pods=pods,
        extensions=_api_extensions(
            config, pods=pods, clock=clock, node_name=node.node_name, stats=stats
        ),
        get_node=get_node,
    )


def _api_extensions(
    config: Config,
    *,
    pods: PodManagers,
    clock: Clock,
    node_name: str,
    stats: StatsProvider | None = None,
) -> list[Extension]:
    """What the kubelet API serves besides the server's own endpoints: container logs, the
    stats (``/stats/summary``, ``/metrics/resource``) and the node's logs (``/logs/``)."""
    logs = ContainerLogs(runtime=pods.connection, pods=pods.pod, clock=clock)
    if stats is None:
        stats = node_stats(config, pods=pods, clock=clock, node_name=node_name)[0]

    def install_logs(app: web.Application) -> None:
        app[logs_http.LOGS] = logs

    def install_stats(app: web.Application) -> None:
        app[stats_http.STATS] = stats

    node_logs = NodeLogSettings(
        enabled=config.kubelet.enable_system_log_handler,
        query_enabled=config.kubelet.enable_system_log_query,
    )

    def install_node_logs(app: web.Application) -> None:
        app[nodelogs.NODE_LOGS] = node_logs

    return [
        Extension(routes=logs_http.routes, install=install_logs),
        Extension(routes=stats_http.routes, install=install_stats),
        Extension(routes=nodelogs.routes, install=install_node_logs),
    ]


def api_server_mode(node: NodeSettings) -> bool:
    """API server mode needs credentials: a kubeconfig file, or a bootstrap kubeconfig to get
    one. A kubeconfig that exists but is unusable is an error reported by the credentials
    manager (the daemon exits non-zero and systemd restarts it), not a silent standalone."""
    return node.kubeconfig.exists() or node.bootstrap_kubeconfig is not None


def _node_managers(node: NodeSettings, *, config: Config) -> list[Manager]:
    """The node in the cluster (registration, Lease, status), its pods and the service proxy.
    Stopped in reverse order: the proxy and the pods first (the proxy's rules stay in the
    kernel), the API client last; the Lease keeps renewing until everything after it has
    stopped."""
    clock = RealClock()
    api = ApiClient()  # its identity arrives from the credentials manager (TLS bootstrap)
    report = NodeReport(path=node.root_dir / STATE_FILE, node_name=node.node_name, clock=clock)
    lease = NodeLeaseController(
        api=api,
        clock=clock,
        node_name=node.node_name,
        lease_duration_seconds=node.lease_duration_seconds,
        on_repeated_failure=api.reset_connections,
        on_renewed=report.lease_renewed,
    )
    credentials = CredentialsManager(
        api=api,
        clock=clock,
        on_credentials=report.credentials,
        settings=CredentialSettings(
            node_name=node.node_name,
            kubeconfig=node.kubeconfig,
            bootstrap_kubeconfig=node.bootstrap_kubeconfig,
            pki_dir=node.pki_dir,
            rotate_certificates=node.rotate_certificates,
        ),
    )
    node_cache = WatchCache(
        api=api,
        resource=NODES,
        field_selector=f"metadata.name={node.node_name}",
        name="cache:node",
    )
    events = EventRecorder(api=api, clock=clock, node_name=node.node_name)
    status = NodeStatusManager(
        api=api,
        settings=node,
        node_cache=node_cache,
        events=events,
        facts=HostFacts(
            settings=node,
            clock=clock,
            runtime_status=lambda: RuntimeStatus(
                errors=(*runtime.errors(), *filter(None, [pods.pleg.health()])),
                version=runtime.version(),
            ),
            images=lambda: pods.gc.image_list.images(),  # noqa: PLW0108 - pods is built below
            volumes_in_use=lambda: pods.csi.volumes.volumes_in_use() if pods.csi else [],
            other_errors=lambda: shutdown.errors(),  # noqa: PLW0108 - shutdown is built below
            pressure=lambda: Pressure(
                memory=eviction.under_memory_pressure(),
                disk=eviction.under_disk_pressure(),
                pid=eviction.under_pid_pressure(),
                contention=_contention(psi),
            ),
        ),
        on_repeated_failure=api.reset_connections,
        on_reported=report.status_reported,
    )
    # The runtime's health feeds Ready; a change re-evaluates the node status at once.
    runtime = RuntimeState(
        endpoint=config.kubelet.container_runtime_endpoint,
        connect=kuberuntime.connect,
        on_change=status.poke,
    )
    pods = pod_managers(
        config,
        api=api,
        clock=clock,
        node_name=node.node_name,
        get_node=lambda: node_cache.get(node.node_name),
        node_ips=tuple(str(ip) for ip in node.node_ips),
        deleter=GracePeriodZeroDeleter(api=api),
        events=events,
        node_events=events,
        shutting_down=lambda: shutdown.shutdown_in_progress(),  # noqa: PLW0108 - built below
        network_errors=runtime.network_errors,
    )
    shutdown = _shutdown_manager(
        config, node, clock=clock, pods=pods, on_change=status.poke, events=events
    )
    proxy = proxy_managers(
        config,
        api=api,
        clock=clock,
        node_name=node.node_name,
        node_ips=tuple(str(ip) for ip in node.node_ips if not ip.is_unspecified),
        node_cache=node_cache,
        local_ips=lambda: (str(ip) for ip in hostinfo.read_host_network().all_addresses()),
    )

    def pod_cidr_applied() -> None:  # the kubelet's fastStatusUpdateOnce
        runtime.poke()
        status.poke()

    podcidr = PodCIDRManager(
        node_name=node.node_name,
        node_cache=node_cache,
        update=pods.connection.update_runtime_config,
        on_change=pod_cidr_applied,
    )
    logs = RotationManager(runtime=pods.connection, clock=clock, policy=rotation_policy(config))
    stats, sampler = node_stats(config, pods=pods, clock=clock, node_name=node.node_name)
    eviction = eviction_manager(
        config,
        pods=pods,
        stats=stats,
        clock=clock,
        events=events,
        get_node=lambda: node_cache.get(node.node_name),
        on_change=status.poke,
    )
    psi = contention_monitor(config, sampler=sampler, events=events, on_change=status.poke)
    server = _kubelet_api(
        config,
        node,
        api=api,
        clock=clock,
        pods=pods,
        get_node=lambda: node_cache.get(node.node_name),
        stats=stats,
    )
    return [
        *(api, lease, credentials, node_cache, events, runtime, status, report),
        *pods.managers,
        podcidr,
        shutdown,
        sampler,
        eviction,
        *([psi] if psi is not None else []),
        logs,
        server,
        *proxy,
    ]

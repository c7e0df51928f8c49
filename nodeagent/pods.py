"""Wiring of the pod managers (issue 5), called by ``agent.build`` and by the integration tests.

:func:`pod_managers` returns, in start order: the CRI connection, the watch cache of this
node's pods, and the sync loop (which runs the PLEG, the pod workers and the status manager in
its own TaskGroup). Stopped in reverse: the sync loop first, the CRI connection last.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.apiserver import Api, WatchCache
from nodeagent.clock import Clock
from nodeagent.config import Config
from nodeagent.kuberuntime.connection import RuntimeConnection
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.manager import Manager
from nodeagent.pleg import GenericPleg
from nodeagent.podsync import ALL_PODS, ApiEnvSource, HostResolvConf, PodSync
from nodeagent.podworkers import PodWorkers
from nodeagent.status import StatusManager
from nodeagent.status.manager import PodDeleter
from nodeagent.syncloop import SyncEvents, SyncLoop, node_allocatable, node_internal_ips

CGROUP2_SUPER_MAGIC_PATH = "/sys/fs/cgroup/cgroup.controllers"


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
        cgroup_v2=os.path.exists(CGROUP2_SUPER_MAGIC_PATH),
        memory_capacity=(
            memory_capacity
            if memory_capacity is not None
            else os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        ),
        runtime_name="containerd",
    )


@dataclass(frozen=True)
class PodManagers:
    connection: RuntimeConnection
    pods_cache: WatchCache
    sync_loop: SyncLoop
    pleg: GenericPleg
    status: StatusManager

    @property
    def managers(self) -> list[Manager]:
        return [self.connection, self.pods_cache, self.sync_loop]


def pod_managers(
    config: Config,
    *,
    api: Api,
    clock: Clock,
    node_name: str,
    get_node: Callable[[], Mapping[str, Any] | None],
    node_ips: tuple[str, ...] = (),
    settings: PodRuntimeSettings | None = None,
    deleter: PodDeleter | None = None,
) -> PodManagers:
    """The pod managers for ``config``; ``get_node`` reads this node's Node object from the
    node cache (addresses for hostIP, allocatable for admission and the downward API).
    ``deleter``: how a terminated pod leaves the API — give
    ``GracePeriodZeroDeleter(api=api_client)`` for the real client (the kubelet's call)."""
    settings = settings or runtime_settings(config, node_name=node_name, node_ips=node_ips)
    connection = RuntimeConnection(
        endpoint=config.kubelet.container_runtime_endpoint,
        runtime_request_timeout=config.kubelet.runtime_request_timeout.seconds,
    )
    pods_cache = WatchCache(
        api=api, resource=ALL_PODS, field_selector=f"spec.nodeName={node_name}", name="cache:pods"
    )

    def host_ips() -> tuple[str, ...]:
        return node_internal_ips(get_node(), node_ips)

    def allocatable() -> Mapping[str, str] | None:
        return node_allocatable(get_node())

    runtime = RuntimeManager(runtime=connection, images=connection, settings=settings, clock=clock)
    status = StatusManager(api=api, deleter=deleter)
    podsync = PodSync(
        runtime=runtime,
        status=status,
        clock=clock,
        env=ApiEnvSource(api=api, host_ips=host_ips, allocatable=lambda: allocatable() or {}),
        host_dns=HostResolvConf(path=settings.resolv_conf),
        host_ips=host_ips,
    )
    events = SyncEvents()
    pleg = GenericPleg(runtime=connection, on_event=events.pleg_event)
    sync_loop = SyncLoop(
        node_name=node_name,
        events=events,
        source=pods_cache,
        workers=PodWorkers(syncer=podsync),
        pleg=pleg,
        podsync=podsync,
        status=status,
        clock=clock,
        allocatable=allocatable,
    )
    return PodManagers(
        connection=connection, pods_cache=pods_cache, sync_loop=sync_loop, pleg=pleg, status=status
    )

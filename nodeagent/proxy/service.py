"""The service proxy as the agent runs it: the watch caches of Services and EndpointSlices and
a :class:`ProxyManager` programming this host's nftables, built once the node's addresses are
known.

The NodePort addresses and the address families come from ``--node-ip`` when it is given, else
from the InternalIP addresses the node status reported (kube-proxy reads them from the Node
object too). Until then nothing is programmed; rules left by an earlier run stay in place.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import prometheus_client

from nodeagent.apiserver import SERVICES, Api, WatchCache
from nodeagent.clock import Clock
from nodeagent.config import Config
from nodeagent.log import Logger, get_logger
from nodeagent.manager import Manager
from nodeagent.nft.interface import NFTablesInterface
from nodeagent.nft.objects import Family
from nodeagent.nft.runner import NFTables
from nodeagent.proxy.api import (
    ENDPOINTSLICES_ALL,
    ENDPOINTSLICES_LABEL_SELECTOR,
    SERVICES_FIELD_SELECTOR,
    SERVICES_LABEL_SELECTOR,
)
from nodeagent.proxy.conntrack import Conntrack, ConntrackTool
from nodeagent.proxy.health import ProxyHealth
from nodeagent.proxy.healthserver import ServiceEvents, ServiceHealthServers, serve_proxy_health
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.metricsserver import ProxyCollector, serve_proxy_metrics
from nodeagent.proxy.recorder import ProxyEventRecorder, reporting_instance
from nodeagent.proxy.settings import TABLE, settings_from_config
from nodeagent.proxy.tracking import ObjectStore

RBAC_HINT = (
    "the node's identity may not read Services and EndpointSlices: kubectl create clusterrole"
    " nodeagent:service-proxy --verb=get,list,watch"
    " --resource=services,endpointslices.discovery.k8s.io"
    " && kubectl create clusterrolebinding nodeagent:service-proxy"
    " --clusterrole=nodeagent:service-proxy --group=system:nodes (or set proxy.enabled: false)"
)


ZONE_LABEL = "topology.kubernetes.io/zone"


def node_zone(node: Mapping[str, Any] | None) -> str:
    """The node's ``topology.kubernetes.io/zone`` label ("" without one)."""
    labels = ((node or {}).get("metadata") or {}).get("labels") or {}
    return str(labels.get(ZONE_LABEL) or "")


def pod_cidrs(node: Mapping[str, Any] | None) -> tuple[str, ...]:
    spec = (node or {}).get("spec") or {}
    return tuple(spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []))


def internal_ips(node: Mapping[str, Any] | None) -> tuple[str, ...]:
    addresses = ((node or {}).get("status") or {}).get("addresses") or []
    return tuple(a["address"] for a in addresses if a.get("type") == "InternalIP")


class ServiceProxy:
    """Waits for the node's addresses, then runs the proxy manager until cancelled."""

    def __init__(
        self,
        *,
        config: Config,
        node_name: str,
        node_ips: tuple[str, ...],
        get_node: Callable[[], Mapping[str, Any] | None],
        node_changed: Callable[[Callable[[Any], bool]], Any],
        local_ips: Callable[[], Iterable[str]],
        services: ObjectStore,
        slices: ObjectStore,
        clock: Clock,
        nft: Callable[[Family], NFTablesInterface] | None = None,
        conntrack: Conntrack | None = None,
        events: ServiceEvents | None = None,
        log: Logger | None = None,
    ) -> None:
        self._config = config
        self._node_name = node_name
        self._node_ips = node_ips
        self._get_node = get_node
        self._node_changed = node_changed
        self._local_ips = local_ips
        self._services = services
        self._slices = slices
        self._clock = clock
        self._nft = nft or (lambda family: NFTables(family=family, table=TABLE))
        self._conntrack = conntrack or ConntrackTool()
        self._events = events
        self._log = log or get_logger("proxy")
        self.manager: ProxyManager | None = None

    @property
    def name(self) -> str:
        return "proxy"

    async def _addresses(self) -> tuple[str, ...]:
        if self._node_ips:
            return self._node_ips
        await self._node_changed(lambda _cache: bool(internal_ips(self._get_node())))
        return internal_ips(self._get_node())

    async def _pod_cidrs(self) -> tuple[str, ...]:
        """The Node's ``spec.podCIDRs`` (``NodeCIDR`` mode waits for them, as kube-proxy)."""
        if self._config.proxy.detect_local_mode != "NodeCIDR":
            return ()
        if not pod_cidrs(self._get_node()):
            self._log.info("Waiting for the node's podCIDRs (proxy.detectLocalMode NodeCIDR)")
            await self._node_changed(lambda _cache: bool(pod_cidrs(self._get_node())))
        return pod_cidrs(self._get_node())

    async def run(self) -> None:
        node_ips = await self._addresses()
        cidrs = await self._pod_cidrs()
        local = await asyncio.to_thread(lambda: tuple(self._local_ips()))
        p = self._config.proxy
        settings = settings_from_config(
            self._config,
            node_name=self._node_name,
            node_ips=node_ips,
            local_ips=local,
            service_cidrs=tuple(c.strip() for c in p.service_cidr.split(",") if c.strip()),
            pod_cidrs=cidrs,
        )
        self._log.info(
            "Service proxy starting",
            node_ips=",".join(node_ips),
            nodeport_ips=",".join(settings.nodeport_ips),
            families=",".join(settings.families),
            local_cidrs=",".join(settings.cluster_cidrs),
            detect_local_mode=p.detect_local_mode,
        )
        # kube-proxy's health timeout: twice the sync period
        health = ProxyHealth(now=self._clock.now, health_timeout=2 * settings.sync_period)
        service_health = {
            family: ServiceHealthServers(
                addresses=settings.of_family(settings.nodeport_ips, family),
                health=health,
                node_name=self._node_name,
                events=self._events,
                any_address="::" if family == "ip6" else "0.0.0.0",
                log=self._log,
            )
            for family in settings.families
        }
        self.manager = ProxyManager(
            settings=settings,
            services=self._services,
            slices=self._slices,
            nft={f: self._nft(f) for f in settings.families},
            conntrack=self._conntrack,
            clock=self._clock,
            zone=lambda: node_zone(self._get_node()),
            zone_changed=self._node_changed,
            health=health,
            service_health=service_health,
        )
        try:
            async with asyncio.TaskGroup() as tasks:
                if p.healthz_bind_address:
                    tasks.create_task(
                        serve_proxy_health(
                            p.healthz_bind_address,
                            health,
                            counted=self.manager.metrics.count_health,
                            log=self._log,
                        )
                    )
                if p.metrics_bind_address:
                    registry = prometheus_client.CollectorRegistry(auto_describe=False)
                    manager = self.manager
                    registry.register(ProxyCollector(lambda: manager.metrics, settings.families))
                    tasks.create_task(
                        serve_proxy_metrics(p.metrics_bind_address, registry, log=self._log)
                    )
                tasks.create_task(self._watch_node(health))
                await self.manager.run()
        finally:
            for servers in service_health.values():
                await servers.close()

    async def _watch_node(self, health: ProxyHealth) -> None:
        """The node's eligibility for the health server: deleted, being deleted or tainted
        ToBeDeletedByClusterAutoscaler makes ``/healthz`` answer 503."""
        seen = False
        while True:
            node = self._get_node()
            if node is not None or seen:  # not yet in the cache at start: still eligible
                health.sync_node(node)
            seen = seen or node is not None

            def changed(_cache: object, was: object = node) -> bool:
                return self._get_node() is not was

            await self._node_changed(changed)


def proxy_caches(api: Api) -> tuple[WatchCache, WatchCache]:
    """The proxy's own watch caches of Services and EndpointSlices, with kube-proxy's selectors:
    no Service labelled ``service.kubernetes.io/service-proxy-name`` or headless, no
    EndpointSlice labelled ``service.kubernetes.io/headless``. (The pods' Service environment
    variables come from a cache of their own, unfiltered, as the kubelet's.)"""
    services = WatchCache(
        api=api,
        resource=SERVICES,
        label_selector=SERVICES_LABEL_SELECTOR,
        field_selector=SERVICES_FIELD_SELECTOR,
        name="cache:services",
        forbidden_hint=RBAC_HINT,
    )
    slices = WatchCache(
        api=api,
        resource=ENDPOINTSLICES_ALL,
        label_selector=ENDPOINTSLICES_LABEL_SELECTOR,
        name="cache:endpointslices",
        forbidden_hint=RBAC_HINT,
    )
    return services, slices


def proxy_managers(
    config: Config,
    *,
    api: Api,
    clock: Clock,
    node_name: str,
    node_ips: tuple[str, ...],
    node_cache: WatchCache,
    local_ips: Callable[[], Iterable[str]],
) -> list[Manager]:
    """The Service and EndpointSlice caches, the proxy's Event recorder and the proxy, in
    start order; none when ``proxy.enabled`` is false."""
    if not config.proxy.enabled:
        return []
    services, slices = proxy_caches(api)
    # kube-proxy's recorder names the host, whatever the node is called
    events = ProxyEventRecorder(
        api=api, clock=clock, instance=reporting_instance(socket.gethostname())
    )
    proxy = ServiceProxy(
        config=config,
        node_name=node_name,
        node_ips=node_ips,
        get_node=lambda: node_cache.get(node_name),
        node_changed=node_cache.wait_for,
        local_ips=local_ips,
        services=services,
        slices=slices,
        clock=clock,
        events=events,
    )
    return [services, slices, events, proxy]

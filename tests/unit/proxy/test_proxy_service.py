"""The proxy as the agent wires it: off when disabled, and NodePorts on the node's addresses
(``--node-ip``, else the InternalIPs its status reports) once they are known."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from proxy_builders import FakeStore, endpoint_slice, service

from nodeagent.clock import FrozenClock
from nodeagent.config import Config, ProxyConfiguration
from nodeagent.nft.objects import Family
from nodeagent.proxy.service import ServiceProxy, proxy_managers
from nodeagent.proxy.tracer import Tracer
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_conntrack import FakeConntrack
from nodeagent.testing.fake_nft import FakeNFTables

NODE = "node-a"


def node_with(*ips: str) -> dict[str, Any]:
    addresses = [{"type": "InternalIP", "address": ip} for ip in ips]
    return {"metadata": {"name": NODE}, "status": {"addresses": addresses}}


class Wiring:
    def __init__(self, *, node_ips: tuple[str, ...] = (), **proxy: Any) -> None:
        # no health or metrics server on this host's ports (tests/unit/proxy/test_proxy_health.py)
        proxy = {"healthz_bind_address": "", "metrics_bind_address": ""} | proxy
        self.config = msgspec.structs.replace(Config(), proxy=ProxyConfiguration(**proxy))
        self.node: dict[str, Any] | None = None
        self.nodes = FakeStore()
        self.nft: dict[Family, FakeNFTables] = {}
        nodeport = service("np", "10.96.0.30", type_="NodePort", node_ports={"http": 30080})
        self.proxy = ServiceProxy(
            config=self.config,
            node_name=NODE,
            node_ips=node_ips,
            get_node=lambda: self.node,
            node_changed=self.nodes.wait_for,
            local_ips=lambda: ("127.0.0.1", "192.0.2.10", "198.51.100.7"),
            services=FakeStore([nodeport]),
            slices=FakeStore([endpoint_slice("np", [{"addresses": ["10.244.1.5"]}])]),
            clock=FrozenClock(),
            nft=lambda family: self.nft.setdefault(family, FakeNFTables(family=family)),
            conntrack=FakeConntrack(),
        )

    def set_node(self, node: dict[str, Any]) -> None:
        self.node = node
        self.nodes.put(node | {"metadata": {"name": NODE, "namespace": ""}})

    async def programmed(self) -> None:
        for _ in range(500):
            if self.nft and self.nft["ip"].state() is not None:
                return
            await asyncio.sleep(0.01)
        raise AssertionError("the proxy never programmed its table")

    def reaches(self, dst: str, port: int) -> list[str]:
        state = self.nft["ip"].state()
        assert state is not None
        tracer = Tracer(state, local_ips=("192.0.2.10", "198.51.100.7"))
        return tracer.trace(src="203.0.113.9", dst=dst, proto="tcp", dport=port).endpoints


async def test_a_disabled_proxy_adds_no_managers() -> None:
    config = msgspec.structs.replace(Config(), proxy=ProxyConfiguration(enabled=False))
    api = FakeApiServer()
    cache: Any = object()
    assert proxy_managers(config, api=api, clock=FrozenClock(), node_name=NODE, node_ips=(),
                          node_cache=cache, local_ips=tuple) == []  # fmt: skip


async def test_an_enabled_proxy_watches_services_and_slices_then_runs() -> None:
    cache: Any = FakeStore()
    managers = proxy_managers(Config(), api=FakeApiServer(), clock=FrozenClock(), node_name=NODE,
                              node_ips=(), node_cache=cache, local_ips=tuple)  # fmt: skip
    assert [m.name for m in managers] == [
        "cache:services",
        "cache:endpointslices",
        "proxy-events",
        "proxy",
    ]


async def test_nodeports_wait_for_the_nodes_reported_address_and_use_it() -> None:
    w = Wiring()
    task = asyncio.create_task(w.proxy.run())
    try:
        await asyncio.sleep(0.05)
        assert w.nft == {}  # nothing programmed before the node has an address
        w.set_node(node_with("198.51.100.7"))
        await asyncio.wait_for(w.programmed(), 5)
        assert w.reaches("198.51.100.7", 30080) == ["10.244.1.5:8080"]
        assert w.reaches("192.0.2.10", 30080) == []  # not a node address
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_an_explicit_node_ip_is_used_without_waiting_for_the_node() -> None:
    w = Wiring(node_ips=("192.0.2.10",), service_cidr="10.96.0.0/16")
    task = asyncio.create_task(w.proxy.run())
    try:
        await asyncio.wait_for(w.programmed(), 5)
        assert w.reaches("192.0.2.10", 30080) == ["10.244.1.5:8080"]
        assert w.proxy.manager is not None
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_node_cidr_mode_waits_for_the_nodes_pod_cidrs_and_takes_them_as_local() -> None:
    w = Wiring(cluster_cidr="10.244.0.0/16", detect_local_mode="NodeCIDR")
    task = asyncio.create_task(w.proxy.run())
    try:
        w.set_node(node_with("198.51.100.7"))
        await asyncio.sleep(0.05)
        assert w.nft == {}  # an address, but no podCIDRs yet
        w.set_node(node_with("198.51.100.7") | {"spec": {"podCIDRs": ["10.244.3.0/24"]}})
        await asyncio.wait_for(w.programmed(), 5)
        assert w.proxy.manager is not None
        assert w.proxy.manager.table("ip").layout.cluster_cidrs == ("10.244.3.0/24",)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

"""Builders for Service and EndpointSlice objects, an in-memory object store, and a proxy
wired to FakeNFTables, shared by the proxy unit tests."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from nodeagent.clock import FrozenClock
from nodeagent.nft.objects import Family
from nodeagent.proxy.healthserver import ServiceHealthServers
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.settings import ProxySettings
from nodeagent.proxy.tracer import Trace, Tracer
from nodeagent.testing.fake_conntrack import FakeConntrack
from nodeagent.testing.fake_nft import FakeNFTables

Obj = dict[str, Any]
NODE = "node-a"
NODE_IP = "192.168.10.2"
NODE_IP6 = "fd00:10::2"
EXTERNAL_CLIENT = "203.0.113.7"
POD_CLIENT = "10.244.5.9"
_rv = itertools.count(1)


def service(
    name: str,
    cluster_ip: str,
    *,
    ports: Iterable[tuple[str, int, str]] = (("http", 80, "TCP"),),
    namespace: str = "default",
    type_: str = "ClusterIP",
    node_ports: dict[str, int] | None = None,
    **spec: Any,
) -> Obj:
    port_list = []
    for port_name, number, protocol in ports:
        port: Obj = {"name": port_name, "port": number, "protocol": protocol}
        if node_ports and port_name in node_ports:
            port["nodePort"] = node_ports[port_name]
        port_list.append(port)
    status = spec.pop("status", {})
    return {
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": str(next(_rv))},
        "spec": {"type": type_, "clusterIP": cluster_ip, "ports": port_list, **spec},
        "status": status,
    }


def endpoint(
    ip: str, *, node: str = "node-b", ready: bool = True, serving: bool | None = None,
    terminating: bool | None = None,
) -> Obj:  # fmt: skip
    conditions: Obj = {"ready": ready}
    if serving is not None:
        conditions["serving"] = serving
    if terminating is not None:
        conditions["terminating"] = terminating
    return {"addresses": [ip], "nodeName": node, "conditions": conditions}


def endpoint_slice(
    service_name: str,
    endpoints: Iterable[Obj],
    *,
    ports: Iterable[tuple[str, int, str]] = (("http", 8080, "TCP"),),
    namespace: str = "default",
    name: str | None = None,
    address_type: str = "IPv4",
    annotations: dict[str, str] | None = None,
) -> Obj:
    return {
        "metadata": {
            "name": name or f"{service_name}-abc",
            "namespace": namespace,
            "resourceVersion": str(next(_rv)),
            "labels": {"kubernetes.io/service-name": service_name},
            "annotations": annotations or {},
        },
        "addressType": address_type,
        "endpoints": list(endpoints),
        "ports": [{"name": n, "port": p, "protocol": proto} for n, p, proto in ports],
    }


class FakeStore:
    """A watch cache's read side over a dict, changed by the test."""

    def __init__(self, objects: Iterable[Obj] = ()) -> None:
        self._objects: dict[tuple[str, str], Obj] = {}
        self._rv = 0
        self._changed = asyncio.Event()
        for obj in objects:
            self.put(obj)

    @property
    def resource_version(self) -> str:
        return str(self._rv)

    def items(self) -> list[Obj]:
        return list(self._objects.values())

    async def wait_synced(self) -> None:
        return None

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None:
        while not predicate(self):
            await self._changed.wait()

    def put(self, obj: Obj) -> None:
        meta = obj["metadata"]
        meta["resourceVersion"] = str(next(_rv))
        self._objects[(meta["namespace"], meta["name"])] = obj
        self._bump()

    def remove(self, namespace: str, name: str) -> None:
        del self._objects[(namespace, name)]
        self._bump()

    def _bump(self) -> None:
        self._rv += 1
        self._changed.set()
        self._changed = asyncio.Event()


class Proxy:
    """A ProxyManager on fakes, and a tracer over its table."""

    def __init__(
        self,
        *,
        services: Iterable[Obj] = (),
        slices: Iterable[Obj] = (),
        families: tuple[Family, ...] = ("ip",),
        service_health: Mapping[Family, ServiceHealthServers] | None = None,
        **settings: Any,
    ) -> None:
        settings.setdefault("cluster_cidrs", ("10.244.0.0/16", "fd00:244::/48"))
        settings.setdefault("service_cidrs", ("10.96.0.0/16", "fd00:96::/112"))
        settings.setdefault("nodeport_ips", (NODE_IP, NODE_IP6))
        self.settings = ProxySettings(node_name=NODE, families=families, **settings)
        self.services = FakeStore(services)
        self.slices = FakeStore(slices)
        self.nft = {f: FakeNFTables(family=f) for f in families}
        self.conntrack = FakeConntrack()
        self.clock = FrozenClock()
        self.manager = ProxyManager(
            settings=self.settings,
            services=self.services,
            slices=self.slices,
            nft=self.nft,  # type: ignore[arg-type]  # the fake has the interface, not the type
            conntrack=self.conntrack,
            clock=self.clock,
            service_health=service_health,
        )

    async def sync(self, *, full: bool = False) -> bool:
        return await self.manager.sync(full=full)

    def trace(
        self,
        src: str,
        dst: str,
        dport: int,
        *,
        proto: str = "tcp",
        local: bool = False,
        family: Family = "ip",
        pick: int | None = None,
        record: bool = False,
    ) -> Trace:
        state = self.nft[family].state()
        assert state is not None, "the table was never programmed"
        tracer = Tracer(state, local_ips=(NODE_IP, NODE_IP6), pick=pick, record=record)
        return tracer.trace(src=src, dst=dst, proto=proto, dport=dport, local=local)

    def dump(self, family: Family = "ip") -> str:
        return self.nft[family].dump()

"""Bad Services and EndpointSlices beside good ones, against the real ``nft``.

The apiserver refuses such objects today, so they come from in-memory stores (objects stored
before a validation rule existed look exactly like this to the proxy); the rules go through
ProxyManager.run() into the kernel of a network namespace the test creates and deletes. The
test only polls the kernel table: the manager syncs on its own, as in the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from unit.proxy.proxy_builders import FakeStore, endpoint, endpoint_slice, service

from nodeagent.clock import RealClock
from nodeagent.nft import NFTables
from nodeagent.proxy.conntrack import ConntrackTool
from nodeagent.proxy.manager import ProxyManager
from nodeagent.proxy.settings import ProxySettings
from nodeagent.proxy.tracer import Tracer

pytestmark = pytest.mark.integration

NODE_NAME, NODE_IP, POD_CLIENT = "bad-node", "192.168.77.2", "10.244.9.9"


def ip(*argv: str, check: bool = True) -> str:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True, timeout=30, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace; deleting it removes every table in it, even on failure."""
    name = f"na-pxbad{secrets.token_hex(3)}"
    ip("netns", "add", name)
    try:
        ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        ip("netns", "del", name, check=False)
        assert name not in ip("netns", "list"), f"network namespace {name} left behind"


def with_port(obj: dict[str, Any], **fields: object) -> dict[str, Any]:
    obj["spec"]["ports"][0].update(fields)
    return obj


@contextlib.asynccontextmanager
async def running(netns: str, services: FakeStore, slices: FakeStore) -> AsyncIterator[NFTables]:
    in_ns = ("ip", "netns", "exec", netns)
    nft = NFTables(family="ip", table="nodeagent", argv=(*in_ns, "nft"))
    manager = ProxyManager(
        settings=ProxySettings(
            node_name=NODE_NAME,
            cluster_cidrs=("10.244.0.0/16",),
            service_cidrs=("10.96.0.0/16",),
            nodeport_ips=(NODE_IP,),
            sync_period=1.0,
            min_sync_period=0.1,
        ),
        services=services,
        slices=slices,
        nft={"ip": nft},
        conntrack=ConntrackTool(argv=(*in_ns, "conntrack")),
        clock=RealClock(),
    )
    task = asyncio.create_task(manager.run())
    try:
        yield nft
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def endpoints_in_kernel(nft: NFTables, dst: str, port: int) -> list[str] | None:
    """Where the kernel table sends a pod's connection to ``dst``:``port`` (None: no table)."""
    state = await nft.ruleset()
    if state is None:
        return None
    trace = Tracer(state, local_ips=(NODE_IP,)).trace(
        src=POD_CLIENT, dst=dst, proto="tcp", dport=port
    )
    return trace.endpoints


async def until(nft: NFTables, dst: str, port: int, want: list[str], within: float = 20) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while (got := await endpoints_in_kernel(nft, dst, port)) != want:
        if loop.time() > deadline:
            raise AssertionError(f"{dst}:{port} goes to {got} in the kernel, not {want}")
        await asyncio.sleep(0.2)


async def test_bad_services_and_slices_leave_the_good_ones_programmed_in_the_kernel(
    netns: str,
) -> None:
    services = FakeStore(
        [
            service("good", "10.96.0.10"),
            with_port(service("port-too-big", "10.96.0.11"), port=70000),
            with_port(service("newline-name", "10.96.0.12"), name="ht\ntp"),
            service("negative-affinity", "10.96.0.13", sessionAffinity="ClientIP",
                    sessionAffinityConfig={"clientIP": {"timeoutSeconds": -1}}),
            with_port(service("text-port", "10.96.0.14"), port="eighty"),
            service("zeros", "010.096.000.015"),
        ]
    )  # fmt: skip
    slices = FakeStore(
        [
            endpoint_slice("good", [endpoint("10.244.1.1")]),
            endpoint_slice("port-too-big", [endpoint("10.244.2.1")]),
            endpoint_slice("zeros", [endpoint("010.244.000.005")]),
            endpoint_slice("text-port", [endpoint("10.244.3.1")], ports=[("http", 99999, "TCP")]),
        ]
    )
    async with running(netns, services, slices) as nft:
        await until(nft, "10.96.0.10", 80, ["10.244.1.1:8080"])
        # leading zeros are decimal (Kubernetes' reading), never octal (8.244.0.5, 10.96.0.13)
        await until(nft, "10.96.0.15", 80, ["10.244.0.5:8080"])
        listing = ip("netns", "exec", netns, "nft", "list", "table", "ip", "nodeagent")
        for bad in ("10.96.0.11", "10.96.0.12", "10.96.0.13", "10.96.0.14", "8.244.0.5"):
            assert bad not in listing
        assert "010." not in listing

        # a change after the bad objects: a partial sync programs it, another bad one is skipped
        services.put(service("later", "10.96.0.20"))
        services.put(with_port(service("later-bad", "10.96.0.21"), port=-1))
        slices.put(endpoint_slice("later", [endpoint("10.244.4.1"), endpoint("10.244.4.2")]))
        await until(nft, "10.96.0.20", 80, ["10.244.4.1:8080", "10.244.4.2:8080"])
        await until(nft, "10.96.0.10", 80, ["10.244.1.1:8080"])
        listing = ip("netns", "exec", netns, "nft", "list", "table", "ip", "nodeagent")
        assert "10.96.0.21" not in listing

"""One measured run of `proxy_compare.py`: the API objects, a component in a fresh namespace
from start to its last endpoint change, and the ``nft -f`` floor."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import ipaddress
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import node_measure
from harness import kubeconfig
from harness.controlplane import ControlPlane
from harness.netns import API_PORT, Forwarder, Netns, NftEvents
from harness.processes import Proc, start
from proxy_compare_components import KubeProxy, NodeagentProxy, Scrape

from nodeagent.apiserver import ApiClient, PatchType, Resource
from nodeagent.apiserver.resources import Obj

NAMESPACE = "proxy-bench"
NODE = "proxy-bench-node"
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=True)
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
POD_BASE = int(ipaddress.ip_address("10.244.0.1"))
CHANGE_BASE = int(ipaddress.ip_address("10.244.224.0"))  # past 10.244.0.1 + 10,000 x 5
POLL_S = 0.25


def pod_ip(i: int) -> str:
    return str(ipaddress.ip_address(POD_BASE + i))


def change_ip(k: int) -> str:
    """Fresh addresses whose last octet is 100-254, so none is a prefix of another."""
    return str(ipaddress.ip_address(CHANGE_BASE + (k // 155) * 256 + 100 + k % 155))


def service(i: int) -> Obj:
    return {
        "metadata": {"name": f"svc-{i}"},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]},
    }


def endpoints(ips: list[str]) -> list[Obj]:
    return [{"addresses": [ip], "conditions": {"ready": True}, "nodeName": NODE} for ip in ips]


def endpoint_slice(i: int, ips: list[str]) -> Obj:
    return {
        "metadata": {
            "name": f"svc-{i}-bench",
            "labels": {
                "kubernetes.io/service-name": f"svc-{i}",
                "endpointslice.kubernetes.io/managed-by": "proxy-bench",
            },
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        "endpoints": endpoints(ips),
    }


class ObjectMaker:
    """Services and EndpointSlices through the API: creates up to N, changes one endpoint."""

    def __init__(self, *, api: ApiClient, endpoints: int, concurrency: int) -> None:
        self.api, self.endpoints, self.concurrency = api, endpoints, concurrency
        self.count = 0
        self.changes = 0

    def ips(self, i: int) -> list[str]:
        return [pod_ip(i * self.endpoints + j) for j in range(self.endpoints)]

    async def ensure(self, n: int) -> dict[str, float] | None:
        if n <= self.count:
            return None
        gate = asyncio.Semaphore(self.concurrency)

        async def one(res: Resource, body: Obj) -> None:
            async with gate:
                await self.api.create(res, body, namespace=NAMESPACE)

        started = time.monotonic()
        await asyncio.gather(*(
            one(res, body)
            for i in range(self.count, n)
            for res, body in ((SERVICES, service(i)), (SLICES, endpoint_slice(i, self.ips(i))))
        ))  # fmt: skip
        seconds = time.monotonic() - started
        objects = 2 * (n - self.count)
        self.count = n
        return {"objects": objects, "seconds": seconds, "rate": objects / seconds}

    def next_change(self) -> tuple[int, list[str]]:
        """Which Service changes next, and its new endpoints (the last one a new address)."""
        k = self.changes
        self.changes += 1
        i = (k * 7919) % self.count
        ips = self.ips(i)
        ips[-1] = change_ip(k)
        return i, ips

    async def apply(self, i: int, ips: list[str]) -> float:
        """Write the change; returns the monotonic time just before the API call."""
        now = dt.datetime.now(dt.UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
        patch = {"metadata": {"annotations": {TRIGGER: now}}, "endpoints": endpoints(ips)}
        started = time.monotonic()
        await self.api.patch(SLICES, f"svc-{i}-bench", patch, patch_type=PatchType.MERGE,
                             namespace=NAMESPACE)  # fmt: skip
        return started


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    plane: ControlPlane
    kube_proxy: Path
    changes: int
    gap: float
    sync_timeout: float
    say: Callable[[str], None]


def write_kubeconfig(plane: ControlPlane, path: Path) -> Path:
    config = kubeconfig.render(server=f"https://127.0.0.1:{API_PORT}", ca=plane.ca_path,
                               user="kubernetes-admin", client=plane.pki.admin)  # fmt: skip
    return kubeconfig.write(path, config)


async def scrape_until(
    component: KubeProxy | NodeagentProxy,
    proc: Proc,
    done: Callable[[Scrape], bool],
    *,
    within: float,
    what: str,
    say: Callable[[str], None] | None = None,
) -> Scrape:
    started = time.monotonic()
    last_note = started
    while True:
        if not proc.alive():
            raise RuntimeError(f"{component.name} exited while waiting for {what}:\n{proc.tail()}")
        got = await component.scrape()
        if got is not None and done(got):
            return got
        now = time.monotonic()
        if now - started > within:
            raise TimeoutError(f"{component.name}: no {what} within {within:.0f} s")
        if say is not None and now - last_note >= 15:
            last_note = now
            s = node_measure.sample(proc.pid, now=time.time())
            say(f"  ... {now - started:.0f} s, waiting for {what}; CPU {s.cpu_ticks / 100:.1f} s,"
                f" RSS {s.rss_kib / 1024:.0f} MiB, load {s.load1}")  # fmt: skip
        await asyncio.sleep(POLL_S)


async def run_component(
    name: str, n: int, *, settings: RunSettings, maker: ObjectMaker, work: Path
) -> dict[str, Any]:
    await asyncio.to_thread(work.mkdir, parents=True, exist_ok=True)
    ns = Netns(f"{name[:2]}{n}")
    component: KubeProxy | NodeagentProxy = (
        KubeProxy(binary=settings.kube_proxy, ns=ns.name, work=work)
        if name == "kube-proxy"
        else NodeagentProxy(ns=ns.name, work=work)
    )
    plane = settings.plane
    argv = component.argv(
        kubeconfig=write_kubeconfig(plane, work / "kubeconfig"),
        node=NODE,
        cluster_cidr=plane.cluster_cidr,
        service_cidr=plane.service_cidr,
    )
    row: dict[str, Any] = {"component": name, "services": n, "endpoints": maker.endpoints}
    async with contextlib.AsyncExitStack() as stack:
        ns.create()
        stack.callback(ns.delete)
        forwarder = await Forwarder(ns.name, plane.ports.apiserver, host=plane.address).start()
        stack.push_async_callback(forwarder.stop)
        row["load_start"] = node_measure.sample(os.getpid(), now=0).load1
        started_wall = time.time()
        proc = start(name=name, argv=ns.argv(*argv), log=work / f"{name}.log")
        stack.callback(proc.stop)
        first = await scrape_until(component, proc, lambda s: s.syncs >= 1,
                                   within=settings.sync_timeout, what="the first sync",
                                   say=settings.say)  # fmt: skip
        at_sync = node_measure.sample(proc.pid, now=time.time())
        if first.syncs < 1:
            raise RuntimeError(f"{name}: first sync failed; see {proc.log}:\n{proc.tail()}")
        row["start_to_sync_s"] = first.last_sync - started_wall
        row["first_sync_s"] = first.full_sum if first.full_syncs == 1 else None
        row["syncs_at_first"] = first.syncs
        row["start_to_caches_s"] = caches_synced(proc.log, component.caches_synced, started_wall)
        row["cpu_to_sync_s"] = at_sync.cpu_ticks / 100
        row["rss_after_sync_mib"] = at_sync.rss_kib / 1024
        monitor = NftEvents(ns)
        stack.push_async_callback(monitor.stop)
        row["monitor_ready_s"] = await monitor.start()
        # both hold a sync until minSyncPeriod (1 s) after the previous one started (kube-proxy
        # allows a burst of 2, nodeagent 1): changes start a gap after the first sync
        await asyncio.sleep(max(0.0, first.last_sync + settings.gap - time.time()))
        row |= await changes(component, proc, maker, monitor, settings)
        end = node_measure.sample(proc.pid, now=time.time())
        row["rss_mib"] = end.rss_kib / 1024
        row["hwm_mib"] = end.hwm_kib / 1024
        row["cpu_total_s"] = end.cpu_ticks / 100
        row["load_end"] = end.load1
        row |= await table_stats(ns, component.table, work)
        last = await component.scrape()
        if isinstance(component, KubeProxy):
            await asyncio.to_thread((work / "metrics.txt").write_text, component.last_metrics)
        row["events"], row["event_overruns"] = monitor.messages, monitor.overruns
        row["syncs"] = last.syncs if last else None
        row["failures"] = last.failures if last else None
    return row


def caches_synced(log: Path, marker: str, started: float) -> float | None:
    """Seconds from ``started`` to the last klog line containing ``marker`` in ``log``."""
    when = None
    for line in log.read_text(errors="replace").splitlines():
        if marker in line and line[:1] in "IWE" and len(line) > 21:
            when = line[1:21]  # MMDD HH:MM:SS.uuuuuu
    if when is None:
        return None
    year = time.localtime(started).tm_year
    at = dt.datetime.strptime(f"{year}{when}", "%Y%m%d %H:%M:%S.%f").timestamp()
    return at - started


async def changes(
    component: KubeProxy | NodeagentProxy,
    proc: Proc,
    maker: ObjectMaker,
    monitor: NftEvents,
    settings: RunSettings,
) -> dict[str, Any]:
    seen: list[float] = []
    own: list[float] = []
    for _ in range(settings.changes):
        before = await component.scrape() or Scrape()
        i, ips = maker.next_change()
        ip = ips[-1]
        appeared = monitor.expect_address(ip)
        started = await maker.apply(i, ips)
        try:
            applied = await asyncio.wait_for(appeared, timeout=settings.sync_timeout)
        except TimeoutError:
            raise TimeoutError(f"{component.name}: {ip} never appeared in nft") from None
        seen.append(applied - started)
        after = await scrape_until(
            component, proc, lambda s, b=before: s.programming_count > b.programming_count,
            within=60, what="its network programming metric",
        )  # fmt: skip
        if after.programming_count == before.programming_count + 1:
            own.append(after.programming_sum - before.programming_sum)
        await asyncio.sleep(max(0.0, started + settings.gap - time.monotonic()))
    return {
        "change_ms": [round(s * 1000, 1) for s in seen],
        "change_median_ms": statistics.median(seen) * 1000,
        "change_max_ms": max(seen) * 1000,
        "own_programming_ms": [round(s * 1000, 1) for s in own],
        "own_programming_median_ms": statistics.median(own) * 1000 if own else None,
    }


async def table_stats(ns: Netns, table: str, work: Path) -> dict[str, Any]:
    """Chains and maps/sets in the component's IPv4 table, and what listing it costs (after
    every figure is taken); the listing is kept in ``work``."""

    async def timed(*argv: str) -> tuple[float, str]:
        started = time.monotonic()
        done = await asyncio.to_thread(
            subprocess.run, ns.argv("nft", *argv, "list", "table", "ip", table),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return time.monotonic() - started, done.stdout

    seconds, text = await timed()
    json_seconds, _ = await timed("--json", "--terse")  # what knftables' ListAll runs
    words = [line.strip().split(" ", 1)[0] for line in text.splitlines()]
    await asyncio.to_thread((work / f"{table}.nft").write_text, text)
    return {
        "list_s": seconds,
        "list_json_s": json_seconds,
        "chains": words.count("chain"),
        "maps_sets": words.count("map") + words.count("set"),
    }


async def floor(n: int, scripts: Path, *, runs: int) -> dict[str, Any]:
    """``nft -f`` of each of nodeagent's first-sync scripts (``full-<k>.nft``), in order, into
    a fresh namespace; ``runs`` times."""
    found = await asyncio.to_thread(lambda: list(scripts.glob("full-*.nft")))
    files = sorted(found, key=lambda p: int(p.stem.split("-")[1]))
    if not files:
        raise RuntimeError(f"nodeagent left no first-sync script in {scripts}")
    times = []
    for r in range(runs):
        ns = Netns(f"fl{n}-{r}")
        try:
            ns.create()
            started = time.monotonic()
            for f in files:
                await asyncio.to_thread(subprocess.run, ns.argv("nft", "-f", str(f)), check=True)
            times.append(time.monotonic() - started)
        finally:
            ns.delete()
    sizes = [(await asyncio.to_thread(f.stat)).st_size for f in files]
    return {
        "component": "floor",
        "services": n,
        "floor_s": statistics.median(times),
        "floor_min_s": min(times),
        "floor_runs_s": [round(t, 3) for t in times],
        "script_bytes": sum(sizes),
        "transactions": len(files),
    }

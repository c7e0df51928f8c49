"""How long a single write takes to reach a watcher, with other watches open on the same client.

``probe_watch_latency(api, ...)`` opens ``watches`` watches through one ``ApiClient`` (one on
ConfigMaps in its own namespace, the others on the resources the agent watches), then creates
one ConfigMap at a time, ``gap`` seconds apart, and records when the watch delivered each one,
measured from the moment the create returned. It is the quiet-apiserver case, where no
other traffic hides a stalled event (as a watch event once waited up to a minute on a shared
HTTP/2 connection). Used by ``tests/integration/test_api_transport.py`` and
``bench/api_transport.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from nodeagent.apiserver import CONFIGMAPS, NODES, SERVICES, ApiClient, NotFound
from nodeagent.apiserver.resources import NAMESPACES, Resource
from nodeagent.proxy.api import ENDPOINTSLICES_ALL

# Cluster-wide watches, as the agent's caches (Node, Pods, Services, EndpointSlices) and more.
OTHER_WATCHED = (
    NODES,
    Resource("", "v1", "pods", "Pod", namespaced=False),
    SERVICES,
    ENDPOINTSLICES_ALL,
    Resource("coordination.k8s.io", "v1", "leases", "Lease", namespaced=False),
    Resource("", "v1", "configmaps", "ConfigMap", namespaced=False),
)


@dataclass
class Probe:
    latencies: list[float] = field(default_factory=list)  # seconds, one per write, in order
    missed: int = 0  # writes whose event had not arrived within the deadline


async def _drain(api: ApiClient, res: Resource) -> None:
    """A cluster-wide watch whose events nobody looks at (cancelled at the end)."""
    listed = await api.list(res)
    events = api.watch(res, resource_version=listed.resource_version)
    async with contextlib.aclosing(events):
        async for _ in events:
            pass


@contextlib.asynccontextmanager
async def _namespace(api: ApiClient) -> AsyncIterator[str]:
    name = f"watchprobe-{secrets.token_hex(3)}"
    await api.create(NAMESPACES, {"metadata": {"name": name}})
    try:
        yield name
    finally:
        with contextlib.suppress(NotFound):
            await api.delete(NAMESPACES, name)


async def probe_watch_latency(
    api: ApiClient, *, watches: int = 6, writes: int = 5, gap: float = 2.0, deadline: float = 90.0
) -> Probe:
    """``watches`` open (the probed one included); ``writes`` creates, ``gap`` s apart."""
    probe = Probe()
    async with _namespace(api) as ns, asyncio.TaskGroup() as tg:
        others = [
            tg.create_task(_drain(api, OTHER_WATCHED[i % len(OTHER_WATCHED)]))
            for i in range(watches - 1)
        ]
        arrived: dict[str, float] = {}
        seen = asyncio.Event()
        listed = await api.list(CONFIGMAPS, namespace=ns)

        async def watch_probed() -> None:
            events = api.watch(CONFIGMAPS, namespace=ns, resource_version=listed.resource_version)
            async with contextlib.aclosing(events):
                async for event in events:
                    if event.type == "ADDED":
                        arrived[event.object["metadata"]["name"]] = time.monotonic()
                        seen.set()

        probed = tg.create_task(watch_probed())
        await asyncio.sleep(1.0)  # every watch is open and idle before the first write
        for i in range(writes):
            name = f"probe-{i}"
            await api.create(CONFIGMAPS, {"metadata": {"name": name}}, namespace=ns)
            written = time.monotonic()
            try:
                async with asyncio.timeout(deadline):
                    while name not in arrived:
                        seen.clear()
                        await seen.wait()
                probe.latencies.append(arrived[name] - written)
            except TimeoutError:
                probe.missed += 1
            await asyncio.sleep(max(0.0, gap - (time.monotonic() - written)))
        for task in (*others, probed):
            task.cancel()
    return probe

"""The pod-startup bench's own apiserver client: create pods at once, watch them start.

It is the same for both components (nodeagent's API client is not involved), speaks HTTP/2 as
the cluster admin, and times everything with ``time.monotonic()`` in this process:

- ``sent`` / ``created``: when a pod's create request was started / when it returned;
- ``running``: when the watch first delivered the pod with phase ``Running`` and every
  container in state ``running`` (the SLO's "all containers reported started, observed via
  watch");
- ``ready``: when the watch first delivered its ``Ready`` condition ``True``.

Latency of a pod is ``running - created`` (the SLO's start, the pod's creation, with a
sub-second clock instead of ``creationTimestamp``'s whole seconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2 as httpx
from harness.pki import CertPair, tls_client_context

WATCH_TIMEOUT = httpx.Timeout(None, connect=10.0)


@dataclass
class PodTimes:
    sent: float
    created: float
    running: float | None = None
    ready: float | None = None


@dataclass
class Batch:
    """The pods of one burst of creates and when each got where."""

    started: float  # first create sent
    pods: dict[str, PodTimes] = field(default_factory=dict)
    finished: float | None = None  # the last pod observed Running and Ready
    wall_offset: float = field(default_factory=lambda: time.time() - time.monotonic())

    def wall_clock(self) -> dict[str, dict[str, float | None]]:
        """Every pod's times as seconds since the epoch (to line up with other logs)."""
        return {
            name: {k: v + self.wall_offset if v is not None else None for k, v in vars(t).items()}
            for name, t in sorted(self.pods.items())
        }

    def latencies(self, what: str = "running") -> list[float]:
        return sorted(
            getattr(t, what) - t.created for t in self.pods.values() if getattr(t, what) is not None
        )

    @property
    def all_running_s(self) -> float | None:
        times = [t.running for t in self.pods.values()]
        if not times or None in times:
            return None
        return max(t for t in times if t is not None) - self.started


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of sorted ``values`` (p99 of 30 values is the largest)."""
    if not values:
        return math.nan
    rank = max(1, math.ceil(p / 100 * len(values)))
    return sorted(values)[rank - 1]


def is_running(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    wanted = {c["name"] for c in pod["spec"]["containers"]}
    started = {
        s["name"] for s in status.get("containerStatuses") or [] if "running" in s.get("state", {})
    }
    return wanted <= started


def is_ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def sleep_pod(name: str, *, namespace: str, node: str, image: str, by_scheduler: bool) -> dict:
    """A one-container pod that sleeps, pinned to ``node`` through the scheduler (a
    nodeSelector) or directly (``nodeName``). No service account token volume: nodeagent has
    no volume support yet, and the kubelet would otherwise mount one projected volume per pod."""
    placement: dict[str, Any] = (
        {"nodeSelector": {"kubernetes.io/hostname": node}} if by_scheduler else {"nodeName": node}
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "pod-startup"}},
        "spec": {
            **placement,
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "sleep",
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


class Api:
    def __init__(self, *, client: httpx.AsyncClient, watcher: httpx.AsyncClient) -> None:
        self.client, self.watcher = client, watcher

    @classmethod
    @contextlib.asynccontextmanager
    async def open(cls, *, server: str, ca: Path, cert: Path, key: Path) -> AsyncIterator[Api]:
        context = tls_client_context(CertPair(cert=cert, key=key), ca=ca)
        async with (
            httpx.AsyncClient(base_url=server, verify=context, http2=True, timeout=60) as client,
            httpx.AsyncClient(base_url=server, verify=context, timeout=WATCH_TIMEOUT) as watcher,
        ):
            await client.get("/version")  # the TLS handshake, before any timed request
            yield cls(client=client, watcher=watcher)

    async def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        response = await self.client.request(method, path, json=body)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        result: dict[str, Any] = response.json()
        return result

    async def pods(self, namespace: str) -> dict[str, Any]:
        return await self.call("GET", f"/api/v1/namespaces/{namespace}/pods")

    async def watch(
        self, namespace: str, resource_version: str, on_pod: Callable[[dict[str, Any]], None]
    ) -> None:
        """Deliver every pod the watch sends to ``on_pod`` until cancelled; re-watches from
        the last resourceVersion when the apiserver ends the stream."""
        await self.watch_events(namespace, resource_version, lambda _kind, pod: on_pod(pod))

    async def watch_events(
        self,
        namespace: str,
        resource_version: str,
        on_event: Callable[[str, dict[str, Any]], None],
    ) -> None:
        """`watch` with each event's type (ADDED, MODIFIED, DELETED) beside the pod."""
        path = f"/api/v1/namespaces/{namespace}/pods"
        while True:
            params = {"watch": "1", "resourceVersion": resource_version}
            async with self.watcher.stream("GET", path, params=params) as response:
                if response.status_code != 200:
                    raise RuntimeError(f"watch {path}: {response.status_code}")
                async for line in response.aiter_lines():
                    if not line:
                        continue
                    event = json.loads(line)
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"watch {path}: {event.get('object')}")
                    pod = event["object"]
                    resource_version = pod["metadata"]["resourceVersion"]
                    on_event(event["type"], pod)

    async def burst(
        self, namespace: str, bodies: Sequence[dict[str, Any]], *, within: float
    ) -> Batch:
        """Create ``bodies`` all at once and wait until every one is Running and Ready."""
        listed = await self.pods(namespace)
        names = {b["metadata"]["name"] for b in bodies}
        all_seen = asyncio.Event()
        batch = Batch(started=time.monotonic())

        def on_pod(pod: dict[str, Any]) -> None:
            now = time.monotonic()
            times = batch.pods.get(pod["metadata"]["name"])
            if times is None:  # not ours, or its create call has not returned: not running yet
                return
            if times.running is None and is_running(pod):
                times.running = now
            if times.ready is None and is_ready(pod):
                times.ready = now
            if sum(1 for t in batch.pods.values() if t.running and t.ready) == len(names):
                batch.finished = now
                all_seen.set()

        async def create(body: dict[str, Any]) -> None:
            sent = time.monotonic()
            await self.call("POST", f"/api/v1/namespaces/{namespace}/pods", body)
            batch.pods[body["metadata"]["name"]] = PodTimes(sent=sent, created=time.monotonic())

        version = listed["metadata"]["resourceVersion"]
        watching = asyncio.create_task(self.watch(namespace, version, on_pod))
        waiting = asyncio.create_task(all_seen.wait())
        try:
            await asyncio.sleep(0.5)  # the watch is established before the first create
            batch.started = time.monotonic()
            await asyncio.gather(*(create(b) for b in bodies))
            done, _ = await asyncio.wait(
                {waiting, watching}, timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
            if watching in done:
                watching.result()  # raises what ended the watch
        finally:
            for task in (waiting, watching):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        return batch

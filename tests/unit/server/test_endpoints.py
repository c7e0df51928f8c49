"""/healthz (and its syncloop check), /configz and /metrics, as a client reads them; the plain
healthz application needs no credentials."""

from __future__ import annotations

import prometheus_client
from aiohttp.test_utils import TestClient, TestServer

from nodeagent.config import Config
from nodeagent.server import Dependencies, RequestAuth, build_app, build_healthz_app
from nodeagent.server.auth import AlwaysAllow
from nodeagent.server.endpoints import sync_loop_check
from nodeagent.server.service import configz


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_syncloop_check_threshold_is_at_least_five_minutes() -> None:
    clock = Clock()
    beat: list[float | None] = [None]
    check = sync_loop_check(lambda: beat[0], clock, sync_frequency=60, started=lambda: 1000.0)
    clock.t += 300
    assert check() is None
    clock.t += 1
    assert check() == "sync Loop took longer than expected"
    beat[0] = clock.t
    assert check() is None
    slow = sync_loop_check(lambda: 0.0, clock, sync_frequency=600, started=lambda: 0.0)
    clock.t = 1200
    assert slow() is None  # 2 x syncFrequency when that is longer
    clock.t = 1201
    assert slow() is not None


async def test_healthz_as_kubernetes_healthz() -> None:
    failing = {"syncloop": lambda: "sync Loop took longer than expected"}
    app = build_healthz_app(Dependencies(checks=failing))
    async with TestClient(TestServer(app)) as client:
        resp = await client.get("/healthz")
        assert resp.status == 500
        assert await resp.text() == (
            "[+]ping ok\n[+]log ok\n[-]syncloop failed: reason withheld\nhealthz check failed\n"
        )
        resp = await client.get("/healthz/syncloop")
        assert (resp.status, await resp.text()) == (
            500,
            "internal server error: sync Loop took longer than expected\n",
        )
        resp = await client.get("/healthz/ping")
        assert (resp.status, await resp.text()) == (200, "ok")
        assert (await client.get("/healthz/nope")).status == 404
        assert (await client.get("/pods")).status == 404  # only healthz on that port


async def test_healthy_configz_and_metrics() -> None:
    registry = prometheus_client.CollectorRegistry()
    counter = prometheus_client.Counter("prober_probe_total", "Probes.", registry=registry)
    counter.inc()
    config = Config()
    deps = Dependencies(
        configz=configz(config), checks={"syncloop": lambda: None}, registry=registry
    )
    auth = RequestAuth(tokens=None, authorizer=AlwaysAllow(), anonymous=True)
    async with TestClient(TestServer(build_app(auth=auth, deps=deps, stream=None))) as client:
        resp = await client.get("/healthz")
        assert (resp.status, await resp.text()) == (200, "ok")
        resp = await client.get("/healthz?verbose")
        assert "[+]syncloop ok" in await resp.text()
        body = await (await client.get("/configz")).json()
        kubelet = body["kubeletconfig"]
        assert kubelet["kind"] == "KubeletConfiguration"
        assert kubelet["port"] == 10250
        assert kubelet["syncFrequency"] == "1m0s"
        assert kubelet["authentication"]["webhook"]["cacheTTL"] == "2m0s"
        resp = await client.get("/metrics")
        assert resp.headers["Content-Type"].startswith("text/plain; version=")
        assert "prober_probe_total 1.0" in await resp.text()

"""The proxy's HTTP servers of health: kube-proxy's on ``healthzBindAddress`` (``/healthz``,
``/livez``; default ``0.0.0.0:10256``) and one per Service with a ``healthCheckNodePort``
(LoadBalancer Services with ``externalTrafficPolicy: Local``), on each NodePort address, that
load balancers poll to learn which nodes have local endpoints.

A port that cannot be bound is logged and retried (kube-proxy: its health server every 5 s; a
Service's health check at the next sync, each time with a Warning Event
``FailedToStartServiceHealthcheck`` on the Service, action ``Listen``, and kube-proxy's note:
``node <node> failed to start healthcheck "<ns>/<name>" on port <port>: listen tcp4
<address>:<port>: bind: address already in use``); the proxy keeps running either way. The
answers come from :mod:`.health`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from aiohttp import web

from nodeagent.events import ObjectReference
from nodeagent.gotext import quote
from nodeagent.log import Logger, get_logger
from nodeagent.proxy.health import ProxyHealth, service_health_body
from nodeagent.proxy.model import ServiceName

RETRY = 5.0  # seconds between attempts to bind the health server (kube-proxy's wait.Until)
# kube-proxy's headers: no charset
_HEADERS = {"Content-Type": "application/json", "X-Content-Type-Options": "nosniff"}


def split_host_port(address: str) -> tuple[str, int]:
    """``host:port`` / ``[v6]:port`` to (host, port)."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


class ServiceEvents(Protocol):
    """Where the proxy's Events go (:class:`~nodeagent.proxy.recorder.ProxyEventRecorder`)."""

    def eventf(
        self, ref: ObjectReference, type: str, reason: str, action: str, note: str
    ) -> None: ...


def listen_error(address: str, port: int, error: OSError) -> str:
    """A failed bind as Go's ``net.Listen`` words it: ``listen tcp4 0.0.0.0:30000: bind:
    address already in use`` (kube-proxy listens ``tcp4`` or ``tcp6`` by the address's family)."""
    v6 = ipaddress.ip_address(address).version == 6
    where = f"[{address}]:{port}" if v6 else f"{address}:{port}"
    cause = os.strerror(error.errno).lower() if error.errno else str(error)
    return f"listen {'tcp6' if v6 else 'tcp4'} {where}: bind: {cause}"


def _answer(status: int, body: str, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(status=status, body=body.encode(), headers={**_HEADERS, **(headers or {})})


async def serve_proxy_health(
    address: str,
    health: ProxyHealth,
    *,
    counted: Callable[[str, int], None] = lambda _path, _code: None,
    log: Logger | None = None,
) -> None:
    """Serve ``/healthz`` and ``/livez`` on ``address`` until cancelled."""
    log = log or get_logger("proxy")

    async def healthz(_request: web.Request) -> web.Response:
        status, body = health.healthz()
        counted("healthz", status)
        return _answer(status, body)

    async def livez(_request: web.Request) -> web.Response:
        status, body = health.livez()
        counted("livez", status)
        return _answer(status, body)

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/livez", livez)
    await serve_forever(
        app, address, log=log, failed="Healthz server failed", serving="Serving proxy health"
    )


async def serve_forever(
    app: web.Application, address: str, *, log: Logger, failed: str, serving: str
) -> None:
    """Serve ``app`` on ``address`` until cancelled; a port that cannot be bound is logged
    (``failed``, then at verbosity 2) and tried again every :data:`RETRY` seconds."""
    host, port = split_host_port(address)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        failures = 0
        while True:
            try:
                await web.TCPSite(runner, host, port, reuse_address=True).start()
                break
            except OSError as e:
                (log if failures == 0 else log.v(2)).error(failed, address=address, error=str(e))
                failures += 1
                await asyncio.sleep(RETRY)
        log.info(serving, address=address)
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


@dataclass
class _Check:
    port: int
    runner: web.AppRunner
    local_endpoints: int = 0


@dataclass
class ServiceHealthServers:
    """One family's per-Service health checks; :meth:`sync` opens and closes them after each
    sync. As kube-proxy's, one set per IP family: a dual-stack Service's check is opened in
    each family on its own (``tcp4`` and ``tcp6``), and fails, with its own Event, on its own;
    without ``addresses`` of the family it listens on ``any_address``."""

    addresses: tuple[str, ...]
    health: ProxyHealth
    node_name: str = ""
    events: ServiceEvents | None = None
    any_address: str = "0.0.0.0"  # "::" for the IPv6 family
    log: Logger = field(default_factory=lambda: get_logger("proxy"))
    _checks: dict[ServiceName, _Check] = field(default_factory=dict)

    async def sync(
        self, ports: Mapping[ServiceName, int], local_endpoints: Mapping[ServiceName, int]
    ) -> None:
        for name in [n for n, c in self._checks.items() if ports.get(n) != c.port]:
            check = self._checks.pop(name)
            self.log.v(2).info("Closing healthcheck", service=str(name), port=check.port)
            await check.runner.cleanup()
        for name, port in ports.items():
            if name not in self._checks:
                opened = await self._open(name, port)
                if opened is not None:
                    self._checks[name] = opened
        for name, check in self._checks.items():
            check.local_endpoints = local_endpoints.get(name, 0)

    def local_endpoints(self, name: ServiceName) -> int | None:
        check = self._checks.get(name)
        return None if check is None else check.local_endpoints

    async def _open(self, name: ServiceName, port: int) -> _Check | None:
        async def handle(_request: web.Request) -> web.Response:
            count = self.local_endpoints(name)
            if count is None:  # closed while this request came in: kube-proxy writes nothing
                self.log.error("Received request for closed healthcheck", service=str(name))
                return web.Response(status=200)
            healthy = self.health.is_healthy()
            status = 200 if count and healthy else 503
            body = service_health_body(name.namespace, name.name, count, healthy)
            return _answer(status, body, {"X-Load-Balancing-Endpoint-Weight": str(count)})

        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        address = ""
        try:
            for address in self.addresses or (self.any_address,):
                await web.TCPSite(runner, address, port, reuse_address=True).start()
        except OSError as e:
            await runner.cleanup()
            error = listen_error(address, port, e)
            if self.events is not None:
                note = (
                    f"node {self.node_name} failed to start healthcheck {quote(str(name))}"
                    f" on port {port}: {error}"
                )
                ref = ObjectReference(
                    kind="Service", name=name.name, namespace=name.namespace, api_version="v1"
                )
                self.events.eventf(
                    ref, "Warning", "FailedToStartServiceHealthcheck", "Listen", note
                )
            self.log.error("Failed to start healthcheck", service=str(name), port=port, error=error)
            return None
        self.log.v(2).info("Opening healthcheck", service=str(name), port=port)
        return _Check(port=port, runner=runner)

    async def close(self) -> None:
        for check in self._checks.values():
            with contextlib.suppress(Exception):
                await check.runner.cleanup()
        self._checks.clear()

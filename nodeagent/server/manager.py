"""The server manager: serves the kubelet API (HTTPS, ``address:port``) and the plain
``/healthz`` (``healthzBindAddress:healthzPort``) until cancelled.

The serving pair comes from ``tlsCertFile``/``tlsPrivateKeyFile``, else, with
``serverTLSBootstrap``, from the cluster's kubelet-serving signer (HTTPS starts once it is
issued; ``/healthz`` does not wait), else the self-signed pair in ``<rootDir>/pki``. A listen
failure (port taken, bad address) crashes the manager with the address in the message, as the
kubelet exits when it cannot listen. Connections are accepted within the bounds of
:mod:`.listener` (idle and header limits, a cap on open connections).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from aiohttp import web

from nodeagent.clock import Clock
from nodeagent.errors import AgentError
from nodeagent.log import Logger, get_logger
from nodeagent.server import tls
from nodeagent.server.listener import Limits, Listener
from nodeagent.server.servingcert import ServingCertificate

SHUTDOWN_TIMEOUT: Final = 1.0


@dataclass(frozen=True, kw_only=True)
class ServerSettings:
    address: str = "0.0.0.0"
    port: int = 10250
    healthz_address: str = "127.0.0.1"
    healthz_port: int = 10248
    tls_cert_file: str = ""
    tls_private_key_file: str = ""
    client_ca_file: str = ""
    pki_dir: Path = Path("/var/lib/nodeagent/pki")
    hostname: str = "localhost"
    node_ips: tuple[str, ...] = ()


class ServerError(AgentError):
    pass


class KubeletServer:
    def __init__(
        self,
        *,
        settings: ServerSettings,
        app: Callable[[], web.Application],
        healthz_app: Callable[[], web.Application],
        clock: Clock,
        serving: ServingCertificate | None = None,
        limits: Limits | None = None,
        log: Logger | None = None,
    ) -> None:
        """``limits``: idle and header bounds, the cap on connections (:mod:`.listener`)."""
        self._settings = settings
        self._app = app
        self._healthz_app = healthz_app
        self._clock = clock
        self._serving = serving
        self._limits = limits or Limits()
        self._log = log or get_logger("server")
        self.ssl_context: ssl.SSLContext | None = None
        self.ready = asyncio.Event()

    @property
    def name(self) -> str:
        return "server"

    def _serving_pair(self) -> tuple[Path, Path]:
        s = self._settings
        if s.tls_cert_file and s.tls_private_key_file:
            return Path(s.tls_cert_file), Path(s.tls_private_key_file)
        return tls.ensure_self_signed(s.pki_dir, s.hostname, s.node_ips, now=self._clock.now())

    async def run(self) -> None:
        s = self._settings
        runners: list[tuple[web.AppRunner, Listener]] = []
        try:
            if s.healthz_port:
                runners.append(
                    await self._serve(
                        self._healthz_app(), s.healthz_address, s.healthz_port, None, "healthz"
                    )
                )
            if self._serving is not None:
                # serverTLSBootstrap: no HTTPS until the cluster has signed our certificate.
                path = await self._serving.obtain()
                cert, key = path, path
            else:
                cert, key = await asyncio.to_thread(self._serving_pair)
            try:
                context = tls.server_context(cert, key, client_ca_file=s.client_ca_file)
            except (OSError, ssl.SSLError) as e:
                raise ServerError(
                    f"cannot load the serving certificate {cert} / key {key}: {e}"
                ) from e
            self.ssl_context = context
            runners.append(
                await self._serve(self._app(), s.address, s.port, context, "kubelet API")
            )
            self.ready.set()
            if self._serving is not None:
                await self._serving.rotate_forever(
                    lambda p: context.load_cert_chain(p, p)  # new handshakes use it
                )
            await asyncio.Event().wait()
        finally:
            self.ready.clear()
            for runner, listener in reversed(runners):
                await asyncio.shield(listener.close())
                await asyncio.shield(runner.cleanup())

    async def _serve(
        self,
        app: web.Application,
        host: str,
        port: int,
        context: ssl.SSLContext | None,
        what: str,
    ) -> tuple[web.AppRunner, Listener]:
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await runner.setup()
        assert runner.server is not None
        listener = Listener(runner.server, ssl_context=context, limits=self._limits, log=self._log)
        try:
            await listener.start(host, port)
        except OSError as e:
            await runner.cleanup()
            raise ServerError(f"cannot listen on {host}:{port} for the {what}: {e}") from e
        self._log.info("Listening", what=what, address=f"{host}:{port}", tls=context is not None)
        return runner, listener

"""The node's client credentials: TLS bootstrap, then rotation before 80% of the lifetime.

``run()``:

1. If ``node.kubeconfig`` exists and its client certificate is valid now, use it.
2. Otherwise, with ``node.bootstrapKubeconfig``: generate (or reuse the pending) ECDSA key,
   create the CSR (``kubernetes.io/kube-apiserver-client-kubelet``, ``O=system:nodes``,
   ``CN=system:node:<name>``) with the bootstrap credentials, wait for approval and issuance
   (watching the CSR), write cert+key (0600) under ``<rootDir>/pki`` and the node kubeconfig,
   and switch the shared API client to it. The bootstrap credentials are then dropped: the
   node's own certificate is the only identity used from here on.
3. With ``rotateCertificates``, sleep until a jittered 70-80% of the lifetime, then request a
   new certificate the same way using the current one, install it, and swap the client's
   identity. In-flight calls (the Lease renewal among them) finish on the old connection; new
   calls use the new certificate, so the heartbeat is never interrupted.

Failures (apiserver unreachable, CSR denied) are logged and retried with backoff, 2s doubling
to 5 minutes; a denied CSR is retried with a fresh key.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from nodeagent.apiserver import (
    CSRS,
    AlreadyExists,
    Api,
    ApiClient,
    ApiError,
    Backoff,
    Endpoint,
    Obj,
    WatchCache,
    load_kubeconfig,
)
from nodeagent.certificate import csr, isolated
from nodeagent.certificate.csr import CertInfo
from nodeagent.certificate.store import CertStore
from nodeagent.clock import Clock
from nodeagent.errors import AgentError, ConfigError
from nodeagent.log import Logger, get_logger

CSR_WAIT_TIMEOUT: Final = 3600.0
MAX_SLEEP: Final = 600.0


@dataclass(frozen=True, kw_only=True)
class CredentialSettings:
    node_name: str
    kubeconfig: Path
    bootstrap_kubeconfig: Path | None
    pki_dir: Path
    rotate_certificates: bool


class CertificateError(AgentError):
    """The CSR was denied or failed, or what came back does not fit our key."""


class NodeApi(Api, Protocol):
    def set_endpoint(self, endpoint: Endpoint) -> None: ...


class ClosableApi(Api, Protocol):
    async def aclose(self) -> None: ...


def _bootstrap_client(endpoint: Endpoint) -> ClosableApi:
    return ApiClient(endpoint=endpoint)


class CredentialsManager:
    def __init__(
        self,
        *,
        api: NodeApi,
        settings: CredentialSettings,
        clock: Clock,
        bootstrap_client: Callable[[Endpoint], ClosableApi] = _bootstrap_client,
        rand: Callable[[], float] = random.random,
        on_credentials: Callable[[CertInfo | None], None] | None = None,
        log: Logger | None = None,
        isolate: isolated.Isolate = isolated.call,
    ) -> None:
        self._isolate = isolate
        self._api = api
        self._s = settings
        self._clock = clock
        self._bootstrap_client = bootstrap_client
        self._rand = rand
        self._on_credentials = on_credentials
        self._store = CertStore(pki_dir=settings.pki_dir)
        self._log = (log or get_logger("certificate")).bind(node=settings.node_name)

    @property
    def name(self) -> str:
        return "credentials"

    async def run(self) -> None:
        endpoint = await self._with_backoff("obtain node credentials", self._initial)
        self._use(endpoint)
        if not self._s.rotate_certificates or endpoint.client_cert_pem is None:
            await asyncio.Event().wait()
        if not self._manages(endpoint):
            self._log.warning(
                "rotateCertificates is set but the kubeconfig's client certificate "
                "is not managed by nodeagent; not rotating",
                expected=str(self._store.current_path),
            )
            await asyncio.Event().wait()
        while True:
            assert endpoint.client_cert_pem is not None
            info = csr.cert_info(endpoint.client_cert_pem)
            deadline = csr.rotation_deadline(info, self._rand())
            self._log.info(
                "Client certificate rotation scheduled",
                expires=info.not_after.isoformat(),
                rotate_at=deadline.isoformat(),
            )
            await self._sleep_until(deadline)
            endpoint = await self._with_backoff("rotate the client certificate", self._rotate)
            self._use(endpoint)

    # --- steps ------------------------------------------------------------------------------

    async def _initial(self) -> Endpoint:
        path = self._s.kubeconfig
        if path.exists():
            try:
                endpoint = load_kubeconfig(path)
            except ConfigError as e:
                if self._s.bootstrap_kubeconfig is None:
                    raise
                self._log.warning("Cannot use the kubeconfig; bootstrapping", error=str(e))
            else:
                if self._still_valid(endpoint):
                    return endpoint
                self._log.info(
                    "The kubeconfig's client certificate is not valid now", kubeconfig=str(path)
                )
        if self._s.bootstrap_kubeconfig is None:
            raise ConfigError(
                "node.kubeconfig",
                "has no valid client credentials and node.bootstrapKubeconfig is not set",
                str(path),
            )
        return await self._bootstrap()

    def _still_valid(self, endpoint: Endpoint) -> bool:
        if endpoint.client_cert_pem is None:
            return True  # token credentials: nothing to check locally
        return csr.cert_info(endpoint.client_cert_pem).valid_at(self._clock.now())

    async def _bootstrap(self) -> Endpoint:
        assert self._s.bootstrap_kubeconfig is not None
        boot = load_kubeconfig(self._s.bootstrap_kubeconfig)
        self._log.info(
            "Bootstrapping client credentials",
            server=boot.server,
            bootstrap_kubeconfig=str(self._s.bootstrap_kubeconfig),
        )
        client = self._bootstrap_client(boot)
        try:
            await self._request_and_install(client)
        finally:
            await client.aclose()
        self._store.write_kubeconfig(self._s.kubeconfig, server=boot.server, ca_pem=boot.ca_pem)
        self._log.info("Wrote the node kubeconfig", kubeconfig=str(self._s.kubeconfig))
        return load_kubeconfig(self._s.kubeconfig)

    async def _rotate(self) -> Endpoint:
        current = self._store.current()
        if current is None or not csr.cert_info(current[0]).valid_at(self._clock.now()):
            if self._s.bootstrap_kubeconfig is None:
                raise CertificateError(
                    "the client certificate expired before it could be rotated "
                    "and no bootstrap kubeconfig is set"
                )
            self._log.warning("Client certificate expired; bootstrapping again")
            return await self._bootstrap()
        await self._request_and_install(self._api)
        return load_kubeconfig(self._s.kubeconfig)

    async def _request_and_install(self, api: Api) -> None:
        # Made in a child process: the agent never imports cryptography (~10 MiB of RSS).
        key = self._store.pending_key()
        if key is None:
            key = await self._isolate(csr.new_private_key_pem)
        self._store.save_pending_key(key)
        request = await self._isolate(csr.csr_object, key, self._s.node_name)
        name = request["metadata"]["name"]  # type: ignore[index]
        try:
            await api.create(CSRS, request)
            self._log.info("Created certificate signing request", csr=name, signer=csr.SIGNER)
        except AlreadyExists:
            self._log.info("Certificate signing request already exists", csr=name)
        try:
            cert = await self._wait_for_certificate(api, name)
        except CertificateError:
            self._store.discard_pending_key()
            raise
        if not csr.key_matches(cert, key):
            self._store.discard_pending_key()
            raise CertificateError(f"CSR {name}: the issued certificate does not match our key")
        self._store.install(cert, key, self._clock.now())
        info = csr.cert_info(cert)
        self._log.info(
            "Client certificate issued",
            csr=name,
            subject=info.subject,
            expires=info.not_after.isoformat(),
        )

    async def _wait_for_certificate(self, api: Api, name: str) -> bytes:
        cache = WatchCache(
            api=api,
            resource=CSRS,
            field_selector=f"metadata.name={name}",
            name=f"csr:{name}",
            log=self._log,
        )
        async with asyncio.TaskGroup() as tg:
            watcher = tg.create_task(cache.run())
            try:
                async with asyncio.timeout(CSR_WAIT_TIMEOUT):
                    await cache.wait_for(lambda c: _outcome(c.get(name)) is not None)
            except TimeoutError as e:
                raise CertificateError(
                    f"CSR {name}: not issued within {CSR_WAIT_TIMEOUT:g}s"
                ) from e
            finally:
                watcher.cancel()
        outcome = _outcome(cache.get(name))
        if isinstance(outcome, str):
            raise CertificateError(f"CSR {name}: {outcome}")
        assert outcome is not None
        return outcome

    # --- helpers ----------------------------------------------------------------------------

    def _manages(self, endpoint: Endpoint) -> bool:
        current = self._store.current()
        return current is not None and current[0] == endpoint.client_cert_pem

    def _use(self, endpoint: Endpoint) -> None:
        self._api.set_endpoint(endpoint)
        info = csr.cert_info(endpoint.client_cert_pem) if endpoint.client_cert_pem else None
        if self._on_credentials is not None:
            self._on_credentials(info)

    async def _with_backoff(self, what: str, step: Callable[[], Awaitable[Endpoint]]) -> Endpoint:
        backoff = Backoff(initial=2.0, cap=300.0)
        while True:
            try:
                return await step()
            except (ApiError, CertificateError, isolated.IsolatedError) as e:
                delay = backoff.next()
                self._log.error(f"Failed to {what}; will retry", error=str(e), retry_in_s=delay)
                await asyncio.sleep(delay)

    async def _sleep_until(self, deadline: dt.datetime) -> None:
        # Wall-clock deadline: sleep in bounded steps so a clock jump is noticed.
        while (remaining := (deadline - self._clock.now()).total_seconds()) > 0:  # noqa: ASYNC110
            await asyncio.sleep(min(remaining, MAX_SLEEP))


def _outcome(obj: Obj | None) -> bytes | str | None:
    """The issued certificate (PEM), a denial/failure text, or None while pending."""
    if obj is None:
        return None
    status = obj.get("status") or {}
    for cond in status.get("conditions") or []:
        if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
            reason, message = cond.get("reason", ""), cond.get("message", "")
            return f"{cond['type'].lower()}: {reason} {message}".strip()
    encoded = status.get("certificate")
    if not encoded:
        return None
    try:
        return base64.b64decode(encoded, validate=True)
    except binascii.Error:
        return "the issued certificate is not valid base64"

"""The kube-apiserver client: JSON over HTTP/1.1 (httpx2 + h11), TLS always verified.

Every watch has a TCP connection of its own and requests share a keep-alive pool of their own,
as client-go's reflectors and requests are carried when HTTP/2 is off. Nothing is multiplexed:
on one HTTP/2 connection httpcore2 (2.16.2) lets a frame meant for one stream sit unread while
another stream's reader waits on the socket, so a watch event arrived 54-58 s late whenever
five watches shared the connection (``bench/api_transport.py`` measures it,
``tests/integration/test_api_transport.py`` guards it, ``docs/dependencies.md`` records the
choice).

``ApiClient`` implements :class:`nodeagent.apiserver.interface.Api`. It can be built before it
has credentials (``endpoint=None``): calls then wait until :meth:`set_endpoint` is given one, so
the composition root wires every manager without I/O and TLS bootstrap supplies the identity.
:meth:`set_endpoint` swaps identities (certificate rotation) without failing in-flight calls:
new calls use new connections, the old ones close once their last call or watch has finished.
:meth:`reset_connections` drops every connection at once (the kubelet's reaction to repeated
heartbeat failures: a half-dead connection would otherwise stall the next call).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import platform
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from typing import Any

import httpx2 as httpx
import msgspec

from nodeagent import __version__
from nodeagent.apiserver import errors
from nodeagent.apiserver.interface import ObjectList, WatchEvent
from nodeagent.apiserver.kubeconfig import Endpoint
from nodeagent.apiserver.patch import PatchType
from nodeagent.apiserver.reachability import Reachability
from nodeagent.apiserver.resources import Obj, Resource
from nodeagent.log import Logger, get_logger

DEFAULT_TIMEOUT = 10.0
REQUEST_CONNECTIONS = 100
IDLE_CONNECTIONS = 25  # client-go's MaxIdleConnsPerHost
KEEPALIVE_S = 90.0  # Go's IdleConnTimeout
LIST_CHUNK = 500
RESET_MIN_INTERVAL = 1.0
_REQUEST_LIMITS = httpx.Limits(
    max_connections=REQUEST_CONNECTIONS,
    max_keepalive_connections=IDLE_CONNECTIONS,
    keepalive_expiry=KEEPALIVE_S,
)
_WATCH_LIMITS = httpx.Limits(
    max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_S
)
_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}.get(platform.machine(), platform.machine())
USER_AGENT = f"nodeagent/{__version__} (linux/{_ARCH})"


class _Session:
    """The connections for one set of credentials.

    ``client`` is a keep-alive pool for requests (Lease renewals, status patches, gets): up to
    ``REQUEST_CONNECTIONS`` at once, ``IDLE_CONNECTIONS`` of them kept ``KEEPALIVE_S`` once
    idle (client-go's and Go's defaults, so an idle node renews its Lease on one connection).
    ``watch_client`` gives each watch a connection of its own, with no bound: a watch never
    waits behind another watch, and the heartbeat's requests never wait behind a watch.
    """

    def __init__(
        self, endpoint: Endpoint, client: httpx.AsyncClient, watch_client: httpx.AsyncClient
    ) -> None:
        self.endpoint = endpoint
        self.client = client
        self.watch_client = watch_client
        self.active = 0
        self.retired = False

    async def aclose(self) -> None:
        await self.client.aclose()
        await self.watch_client.aclose()


class ApiClient:
    def __init__(
        self,
        *,
        endpoint: Endpoint | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        http2: bool = False,
        log: Logger | None = None,
    ) -> None:
        self._transport = transport
        self._timeout = timeout
        self._http2 = http2
        self._log = log or get_logger("apiserver")
        self._session: _Session | None = None
        self._idle_retired: list[_Session] = []
        self._last_reset = -math.inf
        self._ready = asyncio.Event()
        self._reach = Reachability()
        if endpoint is not None:
            self.set_endpoint(endpoint)

    # --- as a manager: owns the connection's lifetime -----------------------------------------

    @property
    def name(self) -> str:
        return "apiserver"

    async def run(self) -> None:
        """Hold the client open until cancelled, then close it (start it first, stop it last)."""
        try:
            await asyncio.Event().wait()
        finally:
            await self.aclose()

    # --- connection management -----------------------------------------------------------

    @property
    def endpoint(self) -> Endpoint | None:
        return self._session.endpoint if self._session else None

    def set_endpoint(self, endpoint: Endpoint) -> None:
        """Use ``endpoint`` for every call from now on (reads the TLS material, no network)."""
        self._log.info(
            "Using apiserver credentials",
            server=endpoint.server,
            identity=endpoint.identity,
            source=endpoint.source,
        )
        self._new_session(endpoint)

    def _http_client(self, endpoint: Endpoint, limits: httpx.Limits) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=endpoint.server,
            verify=endpoint.ssl_context(),
            http2=self._http2,
            transport=self._transport,
            trust_env=False,
            limits=limits,
            headers={"Accept": "application/json", "User-Agent": USER_AGENT, **endpoint.headers()},
        )

    def _new_session(self, endpoint: Endpoint) -> None:
        session = _Session(
            endpoint,
            self._http_client(endpoint, _REQUEST_LIMITS),
            self._http_client(endpoint, _WATCH_LIMITS),
        )
        old, self._session = self._session, session
        self._ready.set()
        if old is not None:
            old.retired = True
            if old.active == 0:
                self._idle_retired.append(old)

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def reset_connections(self) -> None:
        """Close the current connection now; the next call dials a new one.

        Resets closer than ``RESET_MIN_INTERVAL`` to the previous one are ignored: several
        managers may ask at once after the same outage.
        """
        session = self._session
        now = asyncio.get_running_loop().time()
        if session is None or now - self._last_reset < RESET_MIN_INTERVAL:
            return
        self._last_reset = now
        self._log.info("Closing apiserver connections", server=session.endpoint.server)
        self._new_session(session.endpoint)
        await session.aclose()

    async def aclose(self) -> None:
        session, self._session = self._session, None
        self._ready.clear()
        await self._close_idle_retired()
        if session is not None:
            await session.aclose()

    async def _close_idle_retired(self) -> None:
        # set_endpoint is synchronous, so idle retired sessions are closed by the next call.
        while self._idle_retired:
            await self._idle_retired.pop().aclose()

    @contextlib.asynccontextmanager
    async def _use(self) -> AsyncIterator[_Session]:
        await self._ready.wait()
        await self._close_idle_retired()
        session = self._session
        assert session is not None
        session.active += 1
        try:
            yield session
        finally:
            session.active -= 1
            if session.retired and session.active == 0:
                await session.aclose()

    # --- raw requests -----------------------------------------------------------------------

    async def request(
        self,
        verb: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: object = None,
        content_type: str = "application/json",
        request_timeout: float | None = None,
    ) -> Obj:
        deadline = self._timeout if request_timeout is None else request_timeout
        content = msgspec.json.encode(body) if body is not None else None
        headers = {"Content-Type": content_type} if content is not None else {}
        async with self._use() as session:
            try:
                async with asyncio.timeout(deadline):
                    resp = await session.client.request(
                        verb,
                        path,
                        params=dict(params or {}),
                        content=content,
                        headers=headers,
                        extensions=_sni(session.endpoint),
                    )
            except TimeoutError as e:
                timeout = errors.Timeout(f"no answer within {deadline:g}s", verb=verb, path=path)
                raise self._noted(timeout) from e
            except httpx.HTTPError as e:
                raise self._noted(_transport_error(e, verb, path)) from e
        if resp.status_code >= 400:
            raise self._noted(_status_error(resp, verb, path))
        self._reach.saw(None)
        if not resp.content:
            return {}
        decoded: Obj = msgspec.json.decode(resp.content)
        return decoded

    # --- verbs ----------------------------------------------------------------------------

    async def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("GET", path, request_timeout=request_timeout)

    async def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        return await self.request(
            "POST", res.path(namespace=namespace), body=body, request_timeout=request_timeout
        )

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        body = {"apiVersion": res.api_version, "kind": res.kind, **body}
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        return await self.request("PUT", path, body=body, request_timeout=request_timeout)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: object,
        *,
        patch_type: PatchType = PatchType.STRATEGIC,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        path = res.path(namespace=namespace, name=name, subresource=subresource)
        params = {"fieldManager": field_manager} if field_manager else None
        return await self.request(
            "PATCH",
            path,
            params=params,
            body=patch,
            content_type=patch_type.value,
            request_timeout=request_timeout,
        )

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> None:
        await self.request(
            "DELETE", res.path(namespace=namespace, name=name), request_timeout=request_timeout
        )

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> ObjectList:
        params = _selectors(field_selector, label_selector)
        params["limit"] = str(LIST_CHUNK)
        items: list[Obj] = []
        while True:
            page = await self.request(
                "GET", res.path(namespace=namespace), params=params, request_timeout=request_timeout
            )
            for item in page.get("items") or []:
                items.append({"apiVersion": res.api_version, "kind": res.kind, **item})
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return ObjectList(
                    items=items, resource_version=str(meta.get("resourceVersion", ""))
                )
            params["continue"] = meta["continue"]

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]:
        """Stream events after ``resource_version`` (bookmarks included) until the server ends
        the watch. ``ERROR`` events raise their typed error (410 -> :class:`errors.Gone`)."""
        path = res.path(namespace=namespace)
        params = _selectors(field_selector, label_selector)
        params.update(
            watch="true",
            allowWatchBookmarks="true",
            resourceVersion=resource_version,
            timeoutSeconds=str(timeout_seconds),
        )
        http_timeout = httpx.Timeout(self._timeout, read=timeout_seconds + 30.0)
        async with self._use() as session:
            try:
                async with session.watch_client.stream(
                    "GET",
                    path,
                    params=params,
                    timeout=http_timeout,
                    extensions=_sni(session.endpoint),
                ) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        raise self._noted(_status_error(resp, "WATCH", path))
                    self._reach.saw(None)
                    async for line in resp.aiter_lines():
                        if line.strip():
                            yield _watch_event(line, res, path)
            except httpx.HTTPError as e:
                raise self._noted(_transport_error(e, "WATCH", path)) from e

    async def answered_again(self) -> None:
        await self._reach.answered_again()

    def _noted(self, error: errors.ApiError) -> errors.ApiError:
        self._reach.saw(error)
        return error


def _sni(endpoint: Endpoint) -> dict[str, Any]:
    return {"sni_hostname": endpoint.tls_server_name} if endpoint.tls_server_name else {}


def _selectors(field_selector: str | None, label_selector: str | None) -> dict[str, str]:
    params: dict[str, str] = {}
    if field_selector:
        params["fieldSelector"] = field_selector
    if label_selector:
        params["labelSelector"] = label_selector
    return params


def _watch_event(line: str, res: Resource, path: str) -> WatchEvent:
    try:
        raw = msgspec.json.decode(line)
        kind, obj = raw["type"], raw["object"]
    except (msgspec.DecodeError, KeyError, TypeError) as e:
        raise errors.TransportError(
            f"undecodable watch event: {line[:200]!r}", verb="WATCH", path=path
        ) from e
    if kind == "ERROR":
        code = int(obj.get("code") or 500)
        raise errors.error_for_status(code, obj, verb="WATCH", path=path)
    if kind != "BOOKMARK":
        obj = {"apiVersion": res.api_version, "kind": res.kind, **obj}
    return WatchEvent(type=kind, object=obj)


def _status_error(resp: httpx.Response, verb: str, path: str) -> errors.ApiError:
    status: Mapping[str, Any] | None = None
    try:
        decoded = msgspec.json.decode(resp.content)
        if isinstance(decoded, dict) and decoded.get("kind") == "Status":
            status = decoded
    except msgspec.DecodeError:
        pass
    if status is None:
        text = resp.content.decode("utf-8", "replace").strip()[:300]
        status = {"message": text or resp.reason_phrase}
    retry_after = errors.parse_retry_after(resp.headers.get("Retry-After"))
    return errors.error_for_status(
        resp.status_code, status, verb=verb, path=path, retry_after=retry_after
    )


def _transport_error(e: httpx.HTTPError, verb: str, path: str) -> errors.ApiError:
    if isinstance(e, httpx.TimeoutException):
        return errors.Timeout(f"timed out: {type(e).__name__}", verb=verb, path=path)
    return errors.TransportError(
        f"{type(e).__name__}: {e}" if str(e) else type(e).__name__, verb=verb, path=path
    )

"""Exec credential provider plugins as a credential source (the kubelet's ``pluginProvider``).

A plugin is asked only about images that match one of its ``matchImages`` (the keyring's URL
match). Its answer is cached under the image, its registry or a global key as its
``cacheKeyType`` says, for its ``cacheDuration``, else the provider's
``defaultCacheDuration`` (0: not cached); a lookup tries the image's key, then the registry's,
then the global one. Concurrent lookups of one key share one run.

Service-account token mode (``tokenAttributes``, gate
``KubeletServiceAccountTokenForCredentialProviders``): the pod's service account is read
(its UID and the configured annotations; a missing required annotation skips the plugin), a
token for ``serviceAccountTokenAudience`` bound to the pod is requested and passed to the
plugin, and the answer is cached per service account (``cacheType: ServiceAccount``) or per
token (``Token``). A plugin that echoes the token back as a password is refused unless the
cache type is ``Token``. Credentials obtained this way are tracked with the service account,
so the pull records let another pod of the same service account use the image.

A failing plugin is logged (never with a credential) and gives no credentials: the pull goes
on without them, as the kubelet's does.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from nodeagent.credentialprovider.dockerconfig import DockerConfigEntry
from nodeagent.credentialprovider.keyring import (
    CredentialSource,
    Keyring,
    ServiceAccountCoordinates,
    TrackedAuthConfig,
    urls_match,
)
from nodeagent.credentialprovider.plugin.exec import PluginError, PluginResponse, run_plugin
from nodeagent.credentialprovider.plugin.types import ProviderConfig
from nodeagent.log import Logger, get_logger

GLOBAL_CACHE_KEY: Final = "<global>"
CACHE_PURGE_INTERVAL: Final = 15 * 60.0

Config = dict[str, DockerConfigEntry]


@dataclass(frozen=True, slots=True)
class PodIdentity:
    """Who an image is pulled for: what the service-account token mode needs."""

    namespace: str
    name: str
    uid: str
    service_account: str = ""


@dataclass(frozen=True, slots=True)
class ServiceAccountInfo:
    uid: str
    annotations: Mapping[str, str]


class ServiceAccountAccess(Protocol):
    """The API calls of the service-account token mode (the kubelet's getServiceAccount and
    its token manager)."""

    async def service_account(self, namespace: str, name: str) -> ServiceAccountInfo: ...

    async def token(
        self,
        namespace: str,
        name: str,
        *,
        audience: str,
        pod_name: str,
        pod_uid: str,
        service_account_uid: str,
    ) -> str: ...


class MissingAnnotation(Exception):
    """The service account lacks an annotation the plugin requires: the pull goes on without
    this plugin's credentials."""


Runner = Callable[..., Awaitable[PluginResponse]]


def registry_of(image: str) -> str:
    return image.split("/", 1)[0]


def _token_hash(token: str) -> str:
    return "sha256:" + hashlib.sha256(token.encode()).hexdigest() if token else ""


class PluginProvider:
    def __init__(
        self,
        config: ProviderConfig,
        *,
        monotonic: Callable[[], float],
        service_accounts: ServiceAccountAccess | None = None,
        token_mode: bool = True,
        run: Runner = run_plugin,
        log: Logger | None = None,
    ) -> None:
        self.config = config
        self._monotonic = monotonic
        self._accounts = service_accounts
        self._tokens = config.token_attributes if token_mode else None
        self._run = run
        self._log = log or get_logger("credentialprovider")
        self._cache: dict[tuple[str, ...], tuple[float, Config]] = {}
        self._inflight: dict[tuple[str, ...], asyncio.Future[PluginResponse]] = {}
        self._last_purge: float | None = None  # built before the event loop runs
        self.runs = 0
        """How many times the plugin was run (for tests and the metrics)."""

    def matches(self, image: str) -> bool:
        return any(urls_match(m, image) for m in self.config.match_images)

    async def provide(
        self, image: str, pod: PodIdentity | None
    ) -> tuple[Config, ServiceAccountCoordinates | None]:
        """The plugin's credentials for ``image`` (a repository), and the service account
        they were obtained for; nothing (logged) when the plugin fails."""
        try:
            return await self._provide(image, pod)
        except asyncio.CancelledError:
            raise
        except (PluginError, MissingAnnotation, OSError, ValueError) as e:
            fields: dict[str, object] = {"provider": self.config.name, "image": image}
            if self._tokens is not None and pod is not None:
                fields.update(pod=f"{pod.namespace}/{pod.name}", pod_uid=pod.uid)
                fields["service_account"] = f"{pod.namespace}/{pod.service_account}"
            self._log.error("Failed to provide credentials for image", error=str(e), **fields)
            return {}, None

    async def _provide(
        self, image: str, pod: PodIdentity | None
    ) -> tuple[Config, ServiceAccountCoordinates | None]:
        if not self.matches(image):
            return {}, None
        token = ""
        annotations: dict[str, str] = {}
        sa_key: tuple[str, ...] = ()
        coords = None
        tokens = self._tokens
        if tokens is not None:
            sa_name = pod.service_account if pod is not None else ""
            if not sa_name and tokens.require_service_account:
                self._log.v(5).info(
                    "Service account name is empty", provider=self.config.name, image=image
                )
                return {}, None
            if sa_name and pod is not None:
                if self._accounts is None:
                    raise PluginError("failed to get service account: no API server")
                try:
                    info = await self._accounts.service_account(pod.namespace, sa_name)
                except (OSError, LookupError, RuntimeError) as e:
                    raise PluginError(f"failed to get service account: {e}") from None
                for key in tokens.required_annotation_keys:
                    if key not in info.annotations:
                        self._log.v(5).info(
                            "Failed to get service account data",
                            error=f"required annotation {key} not found",
                            provider=self.config.name,
                            image=image,
                        )
                        return {}, None
                    annotations[key] = info.annotations[key]
                for key in tokens.optional_annotation_keys:
                    if key in info.annotations:
                        annotations[key] = info.annotations[key]
                try:
                    token = await self._accounts.token(
                        pod.namespace,
                        sa_name,
                        audience=tokens.audience,
                        pod_name=pod.name,
                        pod_uid=pod.uid,
                        service_account_uid=info.uid,
                    )
                except (OSError, LookupError, RuntimeError) as e:
                    raise PluginError(f"failed to get service account token: {e}") from None
                sa_key = (pod.namespace, sa_name, info.uid, *_flat(annotations))
                if tokens.cache_type == "Token":
                    sa_key += ("token", _token_hash(token))
                coords = ServiceAccountCoordinates(
                    uid=info.uid, namespace=pod.namespace, name=sa_name
                )
        cached = self._cached(image, sa_key)
        if cached is not None:
            return cached, coords
        flight = (image, *sa_key) if not token else (image, _token_hash(token), *_flat(annotations))
        response = await self._once(flight, image, token, annotations)
        echoed = any(entry.password == token for entry in response.auth.values())
        if token and echoed and tokens is not None and tokens.cache_type != "Token":
            raise PluginError(
                "credential provider plugin returned the service account token as the "
                "password which is not allowed when service account cache type is not "
                "set to 'Token'"
            )
        config = dict(response.auth)
        base = {"Image": image, "Registry": registry_of(image)}.get(
            response.cache_key_type, GLOBAL_CACHE_KEY
        )
        duration = response.cache_duration
        if duration is None:
            duration = self.config.default_cache_duration
        if duration > 0:
            self._cache[(base, *sa_key)] = (self._monotonic() + duration, config)
        return config, coords

    def _cached(self, image: str, sa_key: tuple[str, ...]) -> Config | None:
        now = self._monotonic()
        if self._last_purge is None:
            self._last_purge = now
        if now - self._last_purge > CACHE_PURGE_INTERVAL:
            self._cache = {k: v for k, v in self._cache.items() if v[0] >= now}
            self._last_purge = now
        for base in (image, registry_of(image), GLOBAL_CACHE_KEY):
            entry = self._cache.get((base, *sa_key))
            if entry is None:
                continue
            if entry[0] < now:
                del self._cache[(base, *sa_key)]
                continue
            return entry[1]
        return None

    async def _once(
        self, key: tuple[str, ...], image: str, token: str, annotations: Mapping[str, str]
    ) -> PluginResponse:
        """One run for every concurrent lookup of ``key`` (the kubelet's singleflight)."""
        running = self._inflight.get(key)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[PluginResponse] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            self.runs += 1
            response = await self._run(
                self.config, image=image, token=token, annotations=annotations
            )
        except BaseException as e:
            if not future.cancelled():
                future.set_exception(e if isinstance(e, Exception) else PluginError("cancelled"))
                future.exception()  # retrieved: no "never retrieved" warning without waiters
            raise
        finally:
            self._inflight.pop(key, None)
        future.set_result(response)
        return response


def _flat(annotations: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(x for k in sorted(annotations) for x in (k, annotations[k]))


class PluginProviders:
    """Every configured plugin, asked in order (the kubelet's external keyring)."""

    def __init__(self, providers: Sequence[PluginProvider] = ()) -> None:
        self.providers = tuple(providers)

    async def lookup(self, image: str, pod: PodIdentity | None) -> list[TrackedAuthConfig]:
        if not self.providers:
            return []
        keyring = Keyring()
        for provider in self.providers:
            config, coords = await provider.provide(image, pod)
            source = CredentialSource(service_account=coords) if coords is not None else None
            keyring.add(source, config)
        return keyring.lookup(image)

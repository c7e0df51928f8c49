"""Service-account tokens from the TokenRequest API, as the kubelet's token manager gets them.

A token is requested with ``POST /api/v1/namespaces/<ns>/serviceaccounts/<sa>/token``
(``authentication.k8s.io/v1`` TokenRequest: ``audiences`` when the projection names one, else
the apiserver's; ``expirationSeconds``; ``boundObjectRef`` to the Pod by name and UID), cached
per (namespace, service account, audience, expiration, pod name, pod UID), and requested again
once it is older than 24 h or within 20 % of its lifetime of expiring (both less a random jitter
of up to 10 s), as the kubelet's ``requiresRefresh``. When a refresh fails the cached token is
kept while it is valid; without one the error is ``failed to fetch token: <why>``, and with an
expired one ``token "<ns>/<sa>" expired and refresh failed: <why>``. Expired tokens are dropped at
most once a minute; :meth:`TokenManager.forget` drops a pod's tokens.
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.apiserver import Api, ApiError, Resource
from nodeagent.clock import Clock
from nodeagent.podspec import Pod
from nodeagent.volumemanager.content.errors import VolumeSetupError

MAX_TTL: Final = dt.timedelta(hours=24)
MAX_JITTER: Final = 10.0
REFRESH_FRACTION: Final = 0.2
CLEANUP_PERIOD: Final = 60.0


@dataclass(frozen=True, slots=True)
class TokenRequests(Resource):
    """``serviceaccounts/<name>/token``: a TokenRequest posted to one ServiceAccount."""

    service_account: str = ""

    def path(
        self,
        *,
        namespace: str | None = None,
        name: str | None = None,
        subresource: str | None = None,
    ) -> str:
        del name, subresource
        return f"/api/v1/namespaces/{namespace}/serviceaccounts/{self.service_account}/token"


def token_requests(service_account: str) -> TokenRequests:
    return TokenRequests(
        "authentication.k8s.io",
        "v1",
        "serviceaccounts",
        "TokenRequest",
        namespaced=True,
        service_account=service_account,
    )


@dataclass(frozen=True, slots=True)
class Token:
    token: str
    expiration: dt.datetime
    expiration_seconds: int | None


CacheKey = tuple[str, str, str, int, str, str]
"""(namespace, service account, audience, expirationSeconds, pod name, pod UID)."""


def requires_refresh(token: Token, now: dt.datetime, jitter: float) -> bool:
    """The kubelet's rule: refresh past 24 h since issue or within 20 % of the lifetime of
    the expiry, both brought forward by ``jitter`` seconds."""
    if token.expiration_seconds is None:
        return False
    lifetime = dt.timedelta(seconds=token.expiration_seconds)
    issued = token.expiration - lifetime
    early = dt.timedelta(seconds=int(jitter))
    if now > issued + MAX_TTL - early:
        return True
    margin = dt.timedelta(seconds=token.expiration_seconds * 20 // 100)
    return now > token.expiration - margin - early


def expired(token: Token, now: dt.datetime) -> bool:
    return now > token.expiration


def parse_time(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))


def decode_token_request(obj: dict[str, Any]) -> Token:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    token = status.get("token")
    stamp = status.get("expirationTimestamp")
    if not isinstance(token, str) or not token or not isinstance(stamp, str):
        raise ValueError("the TokenRequest's status has no token or expirationTimestamp")
    seconds = spec.get("expirationSeconds")
    return Token(token, parse_time(stamp), seconds if isinstance(seconds, int) else None)


def request_body(pod: Pod, audience: str, expiration_seconds: int) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "expirationSeconds": expiration_seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid},
    }
    if audience:
        spec["audiences"] = [audience]
    return {"spec": spec}


class TokenManager:
    def __init__(
        self,
        *,
        api: Api | None,
        clock: Clock,
        jitter: Callable[[], float] = lambda: random.uniform(0, MAX_JITTER),
    ) -> None:
        self._api = api
        self._clock = clock
        self._jitter = jitter
        self._cache: dict[CacheKey, Token] = {}
        self._cleaned_at: float | None = None

    def _key(self, pod: Pod, audience: str, expiration_seconds: int) -> CacheKey:
        sa = pod.spec.service_account_name
        return (pod.namespace, sa, audience, expiration_seconds, pod.name, pod.uid)

    async def token(self, pod: Pod, audience: str, expiration_seconds: int) -> bytes:
        """The pod's token for ``audience``; raises :class:`VolumeSetupError`."""
        try:
            return await self._token(pod, audience, expiration_seconds)
        finally:
            self._cleanup()

    async def _token(self, pod: Pod, audience: str, expiration_seconds: int) -> bytes:
        now = self._clock.now()
        key = self._key(pod, audience, expiration_seconds)
        cached = self._cache.get(key)
        if cached is not None and not requires_refresh(cached, now, self._jitter()):
            return cached.token.encode()
        try:
            fresh = await self._request(pod, audience, expiration_seconds)
        except (ApiError, ValueError) as e:
            why = e.message if isinstance(e, ApiError) else str(e)
            if cached is None:
                raise VolumeSetupError(f"failed to fetch token: {why}") from e
            if expired(cached, self._clock.now()):
                shown = f'"{key[0]}/{key[1]}"'
                raise VolumeSetupError(f"token {shown} expired and refresh failed: {why}") from e
            return cached.token.encode()  # still valid: keep it, retry on the next sync
        self._cache[key] = fresh
        return fresh.token.encode()

    async def _request(self, pod: Pod, audience: str, expiration_seconds: int) -> Token:
        if self._api is None:
            raise ValueError("no API server configured")
        sa = pod.spec.service_account_name
        if not sa:
            raise ValueError("the pod has no serviceAccountName")
        obj = await self._api.create(
            token_requests(sa),
            request_body(pod, audience, expiration_seconds),
            namespace=pod.namespace,
        )
        return decode_token_request(obj)

    def forget(self, pod_uid: str) -> None:
        for key in [k for k in self._cache if k[5] == pod_uid]:
            del self._cache[key]

    def _cleanup(self) -> None:
        mono = self._clock.monotonic()
        if self._cleaned_at is not None and mono - self._cleaned_at < CLEANUP_PERIOD:
            return
        self._cleaned_at = mono
        now = self._clock.now()
        for key in [k for k, t in self._cache.items() if expired(t, now)]:
            del self._cache[key]

    def cached(self) -> tuple[CacheKey, ...]:
        return tuple(self._cache)

"""Authentication and authorization of kubelet API requests, as the kubelet does them.

Authentication, first match wins: an x509 client certificate verified against
``authentication.x509.clientCAFile`` (the TLS layer verifies it; the subject's CN is the user,
its O values the groups), then a bearer token through a ``TokenReview`` (cached for
``authentication.webhook.cacheTTL``, answers and refusals alike), then, only if
``authentication.anonymous.enabled``, ``system:anonymous``. Otherwise 401 ``Unauthorized``.

Authorization ``Webhook``: a ``SubjectAccessReview`` per attribute set of
:func:`~nodeagent.server.attributes.request_attributes`, cached for ``cacheAuthorizedTTL``
(allowed) or ``cacheUnauthorizedTTL`` (denied). ``AlwaysAllow`` allows everything.

The caches read the injected clock's monotonic time, so tests move time by hand.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Generic, Protocol, TypeVar

from aiohttp import web

from nodeagent.apiserver import Api, Resource
from nodeagent.server.attributes import Attributes

TOKEN_REVIEWS: Final = Resource(
    "authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False
)
SUBJECT_ACCESS_REVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)

ANONYMOUS: Final = "system:anonymous"
UNAUTHENTICATED: Final = "system:unauthenticated"
AUTHENTICATED: Final = "system:authenticated"

# A bounded cache: the kubelet's webhook caches hold at most a few thousand entries too.
MAX_ENTRIES: Final = 4096


@dataclass(frozen=True, slots=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Entries expire ``ttl`` seconds after they were stored; ``now`` is monotonic seconds."""

    def __init__(self, *, now: Callable[[], float], max_entries: int = MAX_ENTRIES) -> None:
        self._now = now
        self._max = max_entries
        self._entries: dict[K, tuple[float, V]] = {}

    def get(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires, value = entry
        if self._now() >= expires:
            del self._entries[key]
            return None
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return
        if len(self._entries) >= self._max:
            now = self._now()
            for k in [k for k, (exp, _) in self._entries.items() if exp <= now]:
                del self._entries[k]
            while len(self._entries) >= self._max:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = (self._now() + ttl, value)

    def __len__(self) -> int:
        return len(self._entries)


def user_from_subject(subject: Sequence[Any]) -> User | None:
    """The user of a verified client certificate, from ``ssl.getpeercert()['subject']``:
    CN is the name, each O a group (as the apiserver's x509 authenticator)."""
    name = ""
    groups: list[str] = []
    for rdn in subject:
        for key, value in rdn:
            if key == "commonName":
                name = value
            elif key == "organizationName":
                groups.append(value)
    if not name:
        return None
    return User(name=name, groups=tuple(groups))


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


class TokenAuthenticator(Protocol):
    async def authenticate(self, token: str) -> User | None: ...


class Authorizer(Protocol):
    async def authorize(self, user: User, attrs: Attributes) -> bool: ...


class AlwaysAllow:
    async def authorize(self, user: User, attrs: Attributes) -> bool:
        return True


class WebhookTokenAuthenticator:
    """``TokenReview`` through the node's API client, cached both ways for ``ttl``."""

    def __init__(self, *, api: Api, ttl: float, now: Callable[[], float]) -> None:
        self._api = api
        self._ttl = ttl
        self._cache: TtlCache[str, User | bool] = TtlCache(now=now)

    async def authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            return cached if isinstance(cached, User) else None
        review = await self._api.create(TOKEN_REVIEWS, {"spec": {"token": token}})
        status = review.get("status") or {}
        user: User | None = None
        if status.get("authenticated"):
            info = status.get("user") or {}
            user = User(
                name=str(info.get("username", "")),
                uid=str(info.get("uid", "")),
                groups=tuple(info.get("groups") or ()),
                extra={k: tuple(v) for k, v in (info.get("extra") or {}).items()},
            )
        self._cache.put(key, user if user is not None else False, self._ttl)
        return user


class WebhookAuthorizer:
    """``SubjectAccessReview`` per (user, attributes), cached by decision."""

    def __init__(
        self,
        *,
        api: Api,
        authorized_ttl: float,
        unauthorized_ttl: float,
        now: Callable[[], float],
    ) -> None:
        self._api = api
        self._allowed_ttl = authorized_ttl
        self._denied_ttl = unauthorized_ttl
        self._cache: TtlCache[tuple[object, ...], bool] = TtlCache(now=now)

    async def authorize(self, user: User, attrs: Attributes) -> bool:
        # The review's content, as the webhook's cache keys it: not the request path.
        key = (
            user.name,
            user.uid,
            user.groups,
            tuple(sorted(user.extra.items())),
            attrs.verb,
            attrs.resource,
            attrs.subresource,
            attrs.name,
            attrs.api_version,
        )
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        review = await self._api.create(SUBJECT_ACCESS_REVIEWS, subject_access_review(user, attrs))
        allowed = bool((review.get("status") or {}).get("allowed"))
        self._cache.put(key, allowed, self._allowed_ttl if allowed else self._denied_ttl)
        return allowed


def subject_access_review(user: User, attrs: Attributes) -> dict[str, Any]:
    """The body of the review (without apiVersion/kind, which the client adds)."""
    spec: dict[str, Any] = {
        "user": user.name,
        "groups": list(user.groups),
        "resourceAttributes": {
            "verb": attrs.verb,
            "group": "",
            "version": attrs.api_version,
            "resource": attrs.resource,
            "subresource": attrs.subresource,
            "name": attrs.name,
        },
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    return {"spec": spec}


def forbidden_message(user: User, attrs: Attributes) -> str:
    """The kubelet's 403 body."""
    return (
        f"Forbidden (user={user.name}, verb={attrs.verb}, resource={attrs.resource},"
        f" subresource={attrs.subresource})"
    )


@dataclass(frozen=True)
class RequestAuth:
    """What the auth middleware needs: each part may be off (None)."""

    tokens: TokenAuthenticator | None
    authorizer: Authorizer
    anonymous: bool = False
    node_name: str = ""
    fine_grained: bool = True
    streaming_create: bool = True
    """exec/attach/run/portForward need ``create`` whatever the transport (see
    :mod:`.attributes`); False is the kubelet's mapping."""

    async def authenticate(
        self, *, peer_subject: Sequence[Any] | None, authorization: str | None
    ) -> User | None:
        user = user_from_subject(peer_subject) if peer_subject else None
        token = bearer_token(authorization)
        if user is None and token is not None and self.tokens is not None:
            user = await self.tokens.authenticate(token)
        if user is not None:
            # As the apiserver's authenticated-group adder.
            if AUTHENTICATED not in user.groups:
                user = replace(user, groups=(*user.groups, AUTHENTICATED))
            return user
        if self.anonymous:
            return User(name=ANONYMOUS, groups=(UNAUTHENTICATED,))
        return None


AUTH: Final = web.AppKey("nodeagent.server.auth", RequestAuth)

"""ConfigMaps and Secrets for volumes, fetched from the API and cached per object for a TTL.

The kubelet's default ``configMapAndSecretChangeDetectionStrategy`` is ``Watch`` (one watch per
referenced object); nodeagent uses the ``Cache`` strategy instead: a GET per object at most
once a minute (the kubelet's ``defaultTTL`` of that strategy), so an update reaches a running
pod within ``syncFrequency`` + 1 min, at the cost of one GET per object and minute instead of one
open watch per object. Objects that do not exist and failed fetches are not cached: a pod
waiting for its ConfigMap sees it on its next sync. An object no pod references any more
(after :meth:`ObjectCache.release`) is dropped.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from nodeagent.apiserver import CONFIGMAPS, SECRETS, Api, ApiError, NotFound
from nodeagent.clock import Clock
from nodeagent.volumemanager.content.payloads import Fetched, FetchError, ObjectData

OBJECT_TTL: Final = 60.0
"""Seconds a fetched ConfigMap or Secret is reused (the kubelet's ``Cache`` strategy TTL)."""

Kind = Literal["configmap", "secret"]
Key = tuple[Kind, str, str]
"""(kind, namespace, name)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    fetched_at: float
    value: ObjectData


def decode_config_map(obj: Mapping[str, object]) -> ObjectData:
    data: dict[str, bytes] = {}
    binary = obj.get("binaryData") or {}
    if isinstance(binary, dict):
        for key, value in binary.items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True)
            except binascii.Error:
                continue
    text = obj.get("data") or {}
    if isinstance(text, dict):
        data.update({str(k): str(v).encode() for k, v in text.items()})
    return ObjectData(data)


def decode_secret(obj: Mapping[str, object]) -> ObjectData:
    data: dict[str, bytes] = {}
    raw = obj.get("data") or {}
    if isinstance(raw, dict):
        for key, value in raw.items():
            try:
                data[str(key)] = base64.b64decode(str(value), validate=True)
            except binascii.Error:
                continue
    return ObjectData(data)


class ObjectCache:
    def __init__(self, *, api: Api | None, clock: Clock, ttl: float = OBJECT_TTL) -> None:
        self._api = api
        self._clock = clock
        self._ttl = ttl
        self._entries: dict[Key, _Entry] = {}
        self._users: dict[str, set[Key]] = {}

    async def get(self, pod_uid: str, kind: Kind, namespace: str, name: str) -> Fetched:
        """The object's data, None when it does not exist, or a :class:`FetchError` with the
        kubelet's words."""
        key: Key = (kind, namespace, name)
        self._users.setdefault(pod_uid, set()).add(key)
        now = self._clock.monotonic()
        entry = self._entries.get(key)
        if entry is not None and now - entry.fetched_at < self._ttl:
            return entry.value
        if self._api is None:
            return FetchError(f"cannot get {kind} {namespace}/{name}: no API server configured")
        res = CONFIGMAPS if kind == "configmap" else SECRETS
        try:
            obj = await self._api.get(res, name, namespace=namespace)
        except NotFound:
            self._entries.pop(key, None)
            return None
        except ApiError as e:
            if entry is not None:  # the last good copy beats failing a running pod's volume
                return entry.value
            return FetchError(e.message)
        value = decode_config_map(obj) if kind == "configmap" else decode_secret(obj)
        self._entries[key] = _Entry(now, value)
        return value

    def release(self, pod_uid: str) -> None:
        """The pod is gone: drop the objects no other pod uses."""
        self._users.pop(pod_uid, None)
        still_used: set[Key] = set().union(*self._users.values()) if self._users else set()
        for key in [k for k in self._entries if k not in still_used]:
            del self._entries[key]

    def cached(self) -> Iterable[Key]:
        return tuple(self._entries)

"""One kind of API object that pods read (ConfigMaps or Secrets), fetched and cached for the
pods registered with it: the kubelet's ``configmap.Manager`` / ``secret.Manager`` over its
cache-based store (``pkg/kubelet/util/manager``).

``register_pod(pod)`` references the objects the pod names (its containers' environments and
its volumes); an object a pod references for the first time is fetched again on its next
``get``, as the kubelet's ``RegisterPod`` does, so a new pod never reads a copy older than
itself (a ConfigMap changed just before ``kubectl rollout restart``). ``unregister_pod(uid)``
drops the pod's references, and an object no registered pod references any more is dropped.
``get(namespace, name)`` answers from the cache while the copy is younger than the TTL, else
asks the API server. Objects that do not exist are not cached (a pod waiting for its ConfigMap
sees it on its next sync); a failed fetch returns the last good copy when there is one (it
beats failing a running pod's volume), else raises the API's error. An object no registered
pod references is fetched and not kept.

The kubelet's default ``configMapAndSecretChangeDetectionStrategy`` is ``Watch`` (one watch per
referenced object); nodeagent uses the ``Cache`` strategy instead: a GET per object at most
once a minute (the kubelet's ``defaultTTL`` of that strategy), so an update reaches a running
pod within ``syncFrequency`` + 1 min, at the cost of one GET per object and minute instead of one
open watch per object.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from nodeagent.apiserver import Api, ApiError, NotFound, Obj, Resource, TransportError
from nodeagent.clock import Clock
from nodeagent.podspec import Pod

OBJECT_TTL: Final = 60.0
"""Seconds a fetched object is reused (the kubelet's ``Cache`` strategy TTL)."""

Key = tuple[str, str]
"""(namespace, name)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    fetched_at: float
    obj: Obj


class ObjectManager:
    def __init__(
        self,
        *,
        resource: Resource,
        api: Api | None,
        clock: Clock,
        referenced: Callable[[Pod], frozenset[str]],
        ttl: float = OBJECT_TTL,
    ) -> None:
        """``referenced``: the names of this kind of object a pod reads. ``api=None``: a node
        without an API server (every ``get`` fails, saying so)."""
        self._resource = resource
        self._api = api
        self._clock = clock
        self._referenced = referenced
        self._ttl = ttl
        self._pods: dict[str, tuple[str, frozenset[str]]] = {}
        """Pod uid -> (its namespace, the names it references)."""
        self._refs: dict[Key, int] = {}
        self._entries: dict[Key, _Entry] = {}

    @property
    def kind(self) -> str:
        """``configmap`` or ``secret``, as the kubelet names them in messages."""
        return self._resource.kind.lower()

    def register_pod(self, pod: Pod) -> None:
        """Reference the objects ``pod`` reads, each fetched again on its next ``get`` when
        the pod did not read it yet (again: the references follow the spec)."""
        names = self._referenced(pod)
        previous = self._pods.get(pod.uid)
        old = previous[1] if previous is not None else frozenset()
        self._pods[pod.uid] = (pod.namespace, names)
        for name in names - old:
            key = (pod.namespace, name)
            self._refs[key] = self._refs.get(key, 0) + 1
            self._entries.pop(key, None)  # fetched again for the pod that now reads it
        for name in old - names:
            self._release((pod.namespace, name))

    def unregister_pod(self, uid: str) -> None:
        """The pod is gone: drop its references."""
        registered = self._pods.pop(uid, None)
        if registered is not None:
            namespace, names = registered
            for name in names:
                self._release((namespace, name))

    def _release(self, key: Key) -> None:
        count = self._refs.get(key, 0) - 1
        if count > 0:
            self._refs[key] = count
            return
        self._refs.pop(key, None)
        self._entries.pop(key, None)

    async def get(self, namespace: str, name: str) -> Obj | None:
        """The object, None when it does not exist; raises the API's error (an
        :class:`~nodeagent.apiserver.ApiError`) when it cannot be had."""
        key: Key = (namespace, name)
        now = self._clock.monotonic()
        entry = self._entries.get(key)
        if entry is not None and now - entry.fetched_at < self._ttl:
            return entry.obj
        if self._api is None:
            raise TransportError(
                f"cannot get {self.kind} {namespace}/{name}: no API server configured",
                verb="GET",
                path=self._resource.plural,
            )
        try:
            obj = await self._api.get(self._resource, name, namespace=namespace)
        except NotFound:
            self._entries.pop(key, None)
            return None
        except ApiError:
            if entry is not None:
                return entry.obj
            raise
        if key in self._refs:
            self._entries[key] = _Entry(now, obj)
        return obj

    def cached(self) -> tuple[Key, ...]:
        """The objects held now."""
        return tuple(self._entries)

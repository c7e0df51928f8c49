"""A static pod's status goes to its mirror pod, as the kubelet's status manager sends it.

:class:`MirrorStatusApi` is the ``StatusPatcher`` the status manager writes through. A
``pods/<name>/status`` patch of a static pod (its UID came from the file source) is sent to the
pod's mirror with the mirror's UID as precondition; while there is no mirror (the API server is
unreachable, the Node is not registered yet, someone deleted the mirror) the newest status is
held, and :meth:`deliver_pending` — called by the mirror manager whenever the API pods move —
sends it once a mirror exists. It also sends it again when the mirror's status has drifted from
it (``drifted``: the status manager's reconcile test, injected since the managers do not import
each other): the node lifecycle controller sets Ready False on every pod of a node it lost
touch with, mirrors included, and the kubelet's status manager compares a static pod's status
with its mirror's to set that back. Patches of other pods pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from nodeagent.apiserver import PODS, Api, Conflict, NotFound, PatchType
from nodeagent.apiserver.resources import Obj, Resource
from nodeagent.staticpods.mirror import MirrorIndex

Drifted = Callable[[dict[str, Any], dict[str, Any]], bool]
"""``drifted(api_status, sent_status)``: the API's copy needs the sent status again."""


class StaticPodRegistry(Protocol):
    def has(self, uid: str) -> bool: ...

    def issued(self, uid: str) -> bool: ...


@dataclass(slots=True)
class _Held:
    namespace: str
    name: str
    patch: dict[str, Any]
    patch_type: PatchType
    delivered_to: str | None = None


def _sent_status(patch: Mapping[str, Any]) -> dict[str, Any]:
    """The status a held patch sets, without its ``$patch`` directives (what it removes)."""
    status = dict(patch.get("status") or {})
    if "conditions" in status:
        status["conditions"] = [c for c in status["conditions"] if "$patch" not in c]
    return status


def _uid(obj: Mapping[str, Any]) -> str | None:
    return str((obj.get("metadata") or {}).get("uid") or "") or None


def _patch_uid(patch: object) -> str | None:
    if not isinstance(patch, dict):
        return None
    uid = (patch.get("metadata") or {}).get("uid")
    return str(uid) if uid else None


class MirrorStatusApi:
    def __init__(
        self,
        *,
        api: Api,
        statics: StaticPodRegistry,
        mirrors: MirrorIndex,
        drifted: Drifted,
    ) -> None:
        self._api = api
        self._statics = statics
        self._mirrors = mirrors
        self._drifted = drifted
        self._held: dict[str, _Held] = {}

    def held(self, uid: str) -> dict[str, Any] | None:
        """The newest status patch of static pod ``uid`` (sent or not)."""
        entry = self._held.get(uid)
        return entry.patch if entry is not None else None

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
        uid = _patch_uid(patch)
        if (
            res.plural != PODS.plural
            or subresource != "status"
            or uid is None
            or not self._statics.issued(uid)
        ):
            return await self._api.patch(
                res,
                name,
                patch,
                patch_type=patch_type,
                namespace=namespace,
                subresource=subresource,
                field_manager=field_manager,
                request_timeout=request_timeout,
            )
        assert isinstance(patch, dict)
        entry = _Held(namespace or "default", name, patch, patch_type)
        self._held[uid] = entry
        found = self._mirror_of(uid, entry)
        return await self._deliver(entry, None if found is None else _uid(found))

    async def deliver_pending(self) -> None:
        """Send held statuses to mirrors that have not had them or whose status drifted from
        them; forget pods that are gone. Raises the ``ApiError`` of a failed patch (the caller
        retries)."""
        for uid, entry in list(self._held.items()):
            mirror = self._mirror_of(uid, entry)
            if mirror is not None and (
                _uid(mirror) != entry.delivered_to
                or self._drifted(dict(mirror.get("status") or {}), _sent_status(entry.patch))
            ):
                await self._deliver(entry, _uid(mirror))
            elif not self._statics.has(uid):
                del self._held[uid]

    def _mirror_of(self, uid: str, entry: _Held) -> Mapping[str, Any] | None:
        return self._mirrors.mirror(uid, namespace=entry.namespace, name=entry.name)

    async def _deliver(self, entry: _Held, mirror: str | None) -> Obj:
        """Send ``entry`` to the mirror pod with UID ``mirror`` (none yet: held)."""
        if mirror is None:
            return {}
        body = {**entry.patch, "metadata": {**entry.patch.get("metadata", {}), "uid": mirror}}
        try:
            result = await self._api.patch(
                PODS,
                entry.name,
                body,
                patch_type=entry.patch_type,
                namespace=entry.namespace,
                subresource="status",
            )
        except (NotFound, Conflict):
            return {}  # that mirror is gone; its successor gets the status when it appears
        entry.delivered_to = mirror
        return result

"""Sends pod statuses to the API: a PATCH of ``pods/<name>/status`` only when a pod's status
changed (a strategic merge patch whose conditions are only the agent's own: see
:func:`status_patch`), and the final ``DELETE`` of a pod the agent has finished terminating.

Pod workers call :meth:`StatusManager.set_status` after every sync (cheap, never blocks);
``run()`` sends what changed, newest status only, retrying failed calls with back-off
(0.5s doubling to 10s), and at once when another call of the agent gets the apiserver's answer
after an outage (``answered_again``: the Lease retries every 7 s at most). A pod whose API
status others changed in a condition the agent reports (the node lifecycle controller's Ready
False on a node it lost) gets the agent's status again (:meth:`StatusManager.reconcile`, the
kubelet's reconcile). A status patch carries the pod's uid, so a pod deleted and recreated
under the same name is never given the old pod's status.
Once a terminated pod's last status is sent, :meth:`delete_pod` removes the API object, as
the kubelet's status manager does once a pod ``canBeDeleted``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from nodeagent.apiserver import PODS, Api, ApiError, Conflict, NotFound, PatchType
from nodeagent.apiserver.reachability import sleep_or_answer
from nodeagent.apiserver.resources import Obj, Resource
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod
from nodeagent.status.conditions import KUBELET_CONDITIONS
from nodeagent.status.metrics import count_terminations

Status = dict[str, Any]
OWNED_CONDITIONS: Final = frozenset({*KUBELET_CONDITIONS, "DisruptionTarget"})
RETRY_INITIAL: Final = 0.5
RETRY_MAX: Final = 10.0


class PodDeleter(Protocol):
    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        """Remove the API object now; raises NotFound when it is gone already."""
        ...


class StatusPatcher(Protocol):
    """What the status manager needs of the API: the ``pods/<name>/status`` patch. (A static
    pod's status goes through ``staticpods.MirrorStatusApi``, which sends it to the mirror.)"""

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
    ) -> Obj: ...


class Requester(Protocol):
    async def request(
        self, verb: str, path: str, *, params: Any = None, body: object = None
    ) -> dict[str, Any]: ...


class GracePeriodZeroDeleter:
    """The kubelet's final delete: ``gracePeriodSeconds: 0`` with a uid precondition, so a
    pod recreated under the same name is never removed (``ApiClient.request``)."""

    def __init__(self, *, api: Requester) -> None:
        self._api = api

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        options = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": uid},
        }
        path = PODS.path(namespace=namespace, name=name)
        try:
            await self._api.request("DELETE", path, body=options)
        except Conflict:  # the uid precondition failed: another pod by that name now
            return


class PlainDeleter:
    """``Api.delete`` without options (the fake apiserver deletes at once)."""

    def __init__(self, *, api: Api) -> None:
        self._api = api

    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        await self._api.delete(PODS, name, namespace=namespace)


def status_patch(status: Status) -> Status:
    """The strategic merge patch that sends ``status`` without touching what others own:
    ``conditions`` merge by type and carry only the agent's own (the kubelet's, and the
    ``DisruptionTarget`` it sets when it evicts), so a condition a controller writes (a
    readiness gate's) is never overwritten, not even by a stale copy; the IP lists, which
    merge by address upstream, are replaced whole. A condition without a ``reason`` or
    ``message`` sends them as null: merged by type, a Ready turning True would otherwise keep
    the reason and message of the False it was (the kubelet's two-way patch deletes them)."""
    patch = dict(status)
    if "conditions" in patch:
        conditions = [
            {"reason": None, "message": None, **c}
            for c in patch["conditions"]
            if c.get("type") in OWNED_CONDITIONS
        ]
        present = {c.get("type") for c in conditions}
        # a kubelet condition the agent no longer reports (the resize ones come and go) is
        # deleted: a merge by type alone would leave it in the API for ever. DisruptionTarget
        # is not: others (the eviction API, preemption) set it too.
        gone = [{"type": t, "$patch": "delete"} for t in set(KUBELET_CONDITIONS) - present]
        patch["conditions"] = [*conditions, *sorted(gone, key=lambda c: c["type"])]
    for key in ("podIPs", "hostIPs"):
        if key in patch:
            patch[key] = [*patch[key], {"$patch": "replace"}]
    return patch


def drifted(api: Status, sent: Status) -> bool:
    """The kubelet's ``needsReconcile``, on what others change: a condition the agent reports
    (the kubelet's own) has another status in the API than in the status the agent sent last.
    The node lifecycle controller sets Ready False on every pod of a node it lost touch with;
    nothing on the node changes then, so without this the pods stay out of their Services'
    endpoints once the node is back (the kubelet sends its status again at its next 10 s
    status sync). A drift caused by a watch event older than the agent's last patch costs one
    patch more, as with the kubelet."""
    have = {c.get("type"): c.get("status") for c in api.get("conditions") or []}
    return any(
        have.get(c.get("type")) != c.get("status")
        for c in sent.get("conditions") or []
        if c.get("type") in KUBELET_CONDITIONS
    )


@dataclass(slots=True)
class _Entry:
    namespace: str
    name: str
    uid: str
    wanted: Status
    sent: Status | None = None
    delete: bool = False
    deleted: bool = False


class StatusManager:
    def __init__(
        self,
        *,
        api: StatusPatcher,
        deleter: PodDeleter,
        answered_again: Callable[[], Awaitable[None]] | None = None,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._deleter = deleter
        self._answered_again = answered_again
        self._log = log or get_logger("status")
        self._pods: dict[str, _Entry] = {}
        self._wake = asyncio.Event()
        self.patches = 0

    @property
    def name(self) -> str:
        return "status"

    def last_status(self, uid: str) -> Status | None:
        """The newest status set for ``uid`` (sent or not)."""
        entry = self._pods.get(uid)
        return entry.wanted if entry is not None else None

    def set_status(self, pod: Pod, status: Status) -> None:
        entry = self._pods.get(pod.uid)
        count_terminations(entry.wanted if entry is not None else pod.status, status)
        if entry is None:
            entry = _Entry(pod.namespace, pod.name, pod.uid, wanted=status)
            self._pods[pod.uid] = entry
        elif entry.wanted == status:
            return
        entry.wanted = status
        self._wake.set()

    def reconcile(self, pod: Pod) -> None:
        """``pod`` came from the API with only its status moved: when a condition the agent
        reports has another status there than the agent sent (:func:`drifted`), send the
        agent's status again."""
        if pod.is_static:  # its status is not the API's (its mirror pod holds that)
            return
        entry = self._pods.get(pod.uid)
        if entry is None or entry.delete or entry.sent is None or entry.sent != entry.wanted:
            return  # unknown, or a patch is on its way anyway
        if drifted(pod.status, entry.sent):
            self._log.v(3).info(
                "Pod status is inconsistent with cached status for pod, a reconciliation "
                "should be triggered",
                pod_namespace=entry.namespace,
                pod_name=entry.name,
                pod_uid=entry.uid,
            )
            entry.sent = None
            self._wake.set()

    def delete_pod(self, pod: Pod) -> None:
        """Remove the API object once its last status is sent."""
        entry = self._pods.get(pod.uid)
        if entry is None:
            entry = _Entry(pod.namespace, pod.name, pod.uid, wanted={}, sent={})
            self._pods[pod.uid] = entry
        entry.delete = True
        self._wake.set()

    def forget(self, uid: str) -> None:
        self._pods.pop(uid, None)

    def pending(self) -> bool:
        return any(e.sent != e.wanted or (e.delete and not e.deleted) for e in self._pods.values())

    async def run(self) -> None:
        delay = RETRY_INITIAL
        while True:
            await self._wake.wait()
            self._wake.clear()
            if await self.sync_once():
                delay = RETRY_INITIAL
                continue
            self._wake.set()
            if self._answered_again is None:
                await asyncio.sleep(delay)
            elif await sleep_or_answer(delay, self._answered_again):
                self._log.v(2).info("The apiserver answers again; sending pod statuses now")
            delay = min(delay * 2, RETRY_MAX)

    async def sync_once(self) -> bool:
        """Send every pending status and deletion; False when one failed."""
        ok = True
        for entry in list(self._pods.values()):
            try:
                await self._sync(entry)
            except ApiError as e:
                ok = False
                self._log.warning(
                    "Cannot update pod status",
                    pod_namespace=entry.namespace,
                    pod_name=entry.name,
                    pod_uid=entry.uid,
                    error=str(e),
                )
        return ok

    async def _sync(self, entry: _Entry) -> None:
        if entry.wanted and entry.sent != entry.wanted:
            wanted = entry.wanted
            body = {"metadata": {"uid": entry.uid}, "status": status_patch(wanted)}
            try:
                await self._api.patch(
                    PODS,
                    entry.name,
                    body,
                    patch_type=PatchType.STRATEGIC,
                    namespace=entry.namespace,
                    subresource="status",
                )
                self.patches += 1
                self._log.v(2).info(
                    "Patched pod status",
                    pod_namespace=entry.namespace,
                    pod_name=entry.name,
                    pod_uid=entry.uid,
                    phase=wanted.get("phase", ""),
                )
            except NotFound:
                entry.deleted = True
            entry.sent = wanted
        if entry.delete and not entry.deleted and entry.sent == entry.wanted:
            try:
                await self._deleter.delete_pod(
                    namespace=entry.namespace, name=entry.name, uid=entry.uid
                )
                self._log.info(
                    "Deleted pod from the API",
                    pod_namespace=entry.namespace,
                    pod_name=entry.name,
                    pod_uid=entry.uid,
                )
            except NotFound:
                pass
            entry.deleted = True

"""The mirror pod manager: keeps one mirror pod in the API per static pod.

``run()`` waits until the API pods store (the watch on ``spec.nodeName=<node>``) and the file
source have listed, then on every change of either: computes the plan
(:func:`~nodeagent.staticpods.mirror.plan_mirror_pods`), deletes (grace 0, UID precondition)
and creates mirror pods, and lets the status side send statuses held for mirrors that just
appeared. While the Node is not registered yet (or a static pod is still terminating) it looks
again every ``poll`` seconds, so mirrors appear as soon as the Node does (the kubelet's
``fastStaticPodsRegistration``). Failed calls are retried with back-off (1s doubling to 60s).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from nodeagent.apiserver import PODS, AlreadyExists, Api, ApiError, Backoff, NotFound
from nodeagent.log import Logger, get_logger
from nodeagent.staticpods.mirror import (
    MirrorRef,
    config_hash,
    mirror_hash,
    mirror_pod_body,
    plan_mirror_pods,
)
from nodeagent.staticpods.stores import Store, wait_any_moved

POLL: Final = 1.0
RESYNC: Final = 60.0


class MirrorDeleter(Protocol):
    async def delete_pod(self, *, namespace: str, name: str, uid: str) -> None: ...


async def _nothing() -> None:
    return None


def node_uid(node: Mapping[str, Any] | None) -> str | None:
    """The Node's UID when it exists and is not being deleted."""
    meta = (node or {}).get("metadata") or {}
    if not meta or meta.get("deletionTimestamp"):
        return None
    return str(meta.get("uid") or "") or None


class MirrorPods:
    def __init__(
        self,
        *,
        api: Api,
        deleter: MirrorDeleter,
        node_name: str,
        statics: Store,
        api_pods: Store,
        get_node: Callable[[], Mapping[str, Any] | None],
        terminating: Callable[[str], bool] = lambda uid: False,
        deliver_statuses: Callable[[], Awaitable[None]] = _nothing,
        poll: float = POLL,
        resync: float = RESYNC,
        backoff: Backoff | None = None,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._deleter = deleter
        self._node = node_name
        self._statics = statics
        self._api_pods = api_pods
        self._get_node = get_node
        self._terminating = terminating
        self._deliver = deliver_statuses
        self._poll = poll
        self._resync = resync
        self._backoff = backoff or Backoff(initial=1.0, cap=60.0)
        self._log = log or get_logger("staticpods.mirror")
        self._name_taken: set[str] = set()

    @property
    def name(self) -> str:
        return "staticpods:mirror"

    async def run(self) -> None:
        await self._statics.wait_synced()
        await self._api_pods.wait_synced()
        stores = (self._statics, self._api_pods)
        while True:
            since = [s.resource_version for s in stores]
            delay = await self.sync_once()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await wait_any_moved(stores, since)

    async def sync_once(self) -> float:
        """One round; returns how long to wait at most before the next one."""
        uid = node_uid(self._get_node())
        plan = plan_mirror_pods(
            self._statics.items(),
            self._api_pods.items(),
            node_ready=uid is not None,
            terminating=self._terminating,
        )
        ok = True
        for ref in plan.delete:
            ok &= await self._delete(ref)
        for static in plan.create:
            assert uid is not None
            ok &= await self._create(static, uid)
        try:
            await self._deliver()
        except ApiError as e:
            ok = False
            self._log.warning("Cannot send a static pod's status to its mirror pod", error=str(e))
        if not ok:
            return self._backoff.next()
        self._backoff.reset()
        return self._poll if plan.waiting else self._resync

    async def _delete(self, ref: MirrorRef) -> bool:
        log = self._log.bind(pod_namespace=ref.namespace, pod_name=ref.name, pod_uid=ref.uid)
        log.info("Deleting a mirror pod", reason=ref.reason)
        try:
            await self._deleter.delete_pod(namespace=ref.namespace, name=ref.name, uid=ref.uid)
        except NotFound:
            pass
        except ApiError as e:
            log.warning("Failed deleting a mirror pod", error=str(e))
            return False
        return True

    async def _create(self, static: Mapping[str, Any], node_uid: str) -> bool:
        body = mirror_pod_body(static, node_name=self._node, node_uid=node_uid)
        meta = body["metadata"]
        static_uid = config_hash(static)
        log = self._log.bind(
            pod_namespace=meta["namespace"], pod_name=meta["name"], pod_uid=static_uid
        )
        log.info("Creating a mirror pod for static pod")
        try:
            await self._api.create(PODS, body, namespace=meta["namespace"])
        except AlreadyExists as e:
            taken = not await self._is_mirror(meta["namespace"], meta["name"])
            if taken and static_uid not in self._name_taken:
                self._name_taken.add(static_uid)
                log.warning(
                    "Cannot create the mirror pod: an API pod that is not a mirror pod"
                    " has its name",
                    error=str(e),
                )
        except ApiError as e:
            log.warning("Failed creating a mirror pod", error=str(e))
            return False
        return True

    async def _is_mirror(self, namespace: str, name: str) -> bool:
        """The pod that is in the way is a mirror pod (ours, not in the cache yet, or an old
        one the next round deletes)."""
        try:
            existing = await self._api.get(PODS, name, namespace=namespace)
        except ApiError:
            return False
        return mirror_hash(existing) is not None

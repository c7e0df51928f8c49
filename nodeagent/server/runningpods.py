"""``/runningpods/``: the pods the runtime is running, as the kubelet's endpoint lists them
(``getRunningPods``): from the runtime, not the API, so a pod deleted from the API stays
listed until its sandbox and containers are gone; tools and the e2e suite poll it to see pods
leave a node.

As the kubelet's ``GetPods(all=false)``: the ready sandboxes and the running containers, in
CRI order newest first, grouped by pod UID (a container whose sandbox is not ready makes a pod
of its own from its labels), the pods newest sandbox creation first; each pod as
``kubecontainer.Pod.ToAPIPod`` makes it: name, namespace, uid, and per container its name
and the image the runtime reports, nothing else (no labels, no status). A ``v1`` ``PodList``,
authorized as ``nodes/pods`` then ``nodes/proxy`` (:mod:`.attributes`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

import msgspec
from aiohttp import web

from nodeagent.kuberuntime import CriError
from nodeagent.kuberuntime.labels import POD_NAME, POD_NAMESPACE, POD_UID
from nodeagent.kuberuntime.types import (
    CONTAINER_RUNNING,
    SANDBOX_READY,
    Container,
    ContainerFilter,
    ContainerStateValue,
    PodSandbox,
    PodSandboxFilter,
    PodSandboxStateValue,
)


class RuntimeLister(Protocol):
    async def list_pod_sandbox(
        self, filter: PodSandboxFilter | None = None
    ) -> list[PodSandbox]: ...

    async def list_containers(self, filter: ContainerFilter | None = None) -> list[Container]: ...


RUNTIME: Final = web.AppKey("nodeagent.server.runningpods", RuntimeLister)


def running_pods(sandboxes: Sequence[PodSandbox], containers: Sequence[Container]) -> list[Any]:
    """The API pods of ``sandboxes`` (ready) and ``containers`` (running), as the kubelet
    builds them (pure)."""
    pods: dict[str, dict[str, Any]] = {}
    created: dict[str, int] = {}
    for s in sorted(sandboxes, key=lambda s: (-s.metadata.attempt, -s.created_at, s.id)):
        if not s.HasField("metadata"):
            continue
        uid = s.metadata.uid
        if uid not in pods:
            pods[uid] = _pod(s.metadata.name, s.metadata.namespace, uid)
        created[uid] = s.created_at  # the last one set: the oldest, as the kubelet's loop
    for c in sorted(containers, key=lambda c: (-c.created_at, c.id)):
        if not c.HasField("metadata"):
            continue
        labels = c.labels
        uid = labels.get(POD_UID, "")
        if uid not in pods:
            pods[uid] = _pod(labels.get(POD_NAME, ""), labels.get(POD_NAMESPACE, ""), uid)
        container: dict[str, Any] = {"name": c.metadata.name}
        if c.image.image:
            container["image"] = c.image.image
        container["resources"] = {}
        spec = pods[uid]["spec"]
        spec["containers"] = [*(spec["containers"] or []), container]
    order = sorted(pods, key=lambda uid: -created.get(uid, 0))
    return [pods[uid] for uid in order]


def _pod(name: str, namespace: str, uid: str) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    if name:
        meta["name"] = name
    if namespace:
        meta["namespace"] = namespace
    if uid:
        meta["uid"] = uid
    meta["creationTimestamp"] = None
    return {"metadata": meta, "spec": {"containers": None}, "status": {}}


def pod_list(items: list[Any]) -> bytes:
    """A ``v1`` ``PodList`` as the kubelet encodes it (``items`` null when there are none)."""
    body: dict[str, Any] = {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {},
        "items": items or None,
    }
    return msgspec.json.encode(body)


routes = web.RouteTableDef()


@routes.get("/runningpods")
@routes.get("/runningpods/")
async def get_running_pods(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    try:
        sandboxes = await runtime.list_pod_sandbox(
            PodSandboxFilter(state=PodSandboxStateValue(state=SANDBOX_READY))
        )
        containers = await runtime.list_containers(
            ContainerFilter(state=ContainerStateValue(state=CONTAINER_RUNNING))
        )
    except CriError as e:
        return web.Response(status=500, text=f"{e}\n", content_type="text/plain")
    body = pod_list(running_pods(sandboxes, containers))
    return web.Response(body=body, content_type="application/json")

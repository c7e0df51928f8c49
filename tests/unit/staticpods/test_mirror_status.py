"""A static pod's status patch goes to its mirror pod, with the mirror's UID."""

from __future__ import annotations

from typing import Any

from nodeagent.apiserver import PODS, PatchType
from nodeagent.staticpods import MirrorIndex, MirrorStatusApi
from nodeagent.status.manager import drifted
from nodeagent.testing.fake_apiserver import FakeApiServer

STATIC_UID = "0123456789abcdef0123456789abcdef"


class Statics:
    def __init__(self) -> None:
        self.current = {STATIC_UID}

    def has(self, uid: str) -> bool:
        return uid in self.current

    def issued(self, uid: str) -> bool:
        return uid == STATIC_UID


def pod(name: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "kube-system", "annotations": annotations or {}},
        "spec": {"nodeName": "node-a"},
        "status": {"phase": "Pending"},
    }


def status_patch(uid: str, phase: str = "Running") -> dict[str, Any]:
    return {"metadata": {"uid": uid}, "status": {"phase": phase}}


async def send(api: MirrorStatusApi, name: str, uid: str, phase: str = "Running") -> None:
    await api.patch(
        PODS,
        name,
        status_patch(uid, phase),
        patch_type=PatchType.MERGE,
        namespace="kube-system",
        subresource="status",
    )


async def test_a_static_pod_status_waits_for_the_mirror_then_goes_to_it() -> None:
    server = FakeApiServer()
    statics = Statics()
    api = MirrorStatusApi(
        api=server,
        statics=statics,
        mirrors=MirrorIndex(api_pods=lambda: server.objects(PODS)),
        drifted=drifted,
    )
    await send(api, "web-node-a", STATIC_UID, "Pending")
    await send(api, "web-node-a", STATIC_UID)
    assert server.calls_to("patch", "pods") == []

    mirror = server.seed(PODS, pod("web-node-a", {"kubernetes.io/config.mirror": STATIC_UID}))
    await api.deliver_pending()
    await api.deliver_pending()
    [call] = server.calls_to("patch", "pods")
    assert call.body == status_patch(mirror["metadata"]["uid"])  # the newest, with its uid
    stored = server.stored(PODS, "web-node-a", "kube-system")
    assert stored is not None and stored["status"] == {"phase": "Running"}

    statics.current.clear()  # the manifest is gone, its last status was delivered
    await api.deliver_pending()
    assert api.held(STATIC_UID) is None


async def test_other_pods_statuses_pass_through_unchanged() -> None:
    server = FakeApiServer()
    api_pod = server.seed(PODS, pod("api"))
    api = MirrorStatusApi(
        api=server,
        statics=Statics(),
        mirrors=MirrorIndex(api_pods=lambda: server.objects(PODS)),
        drifted=drifted,
    )
    await send(api, "api", api_pod["metadata"]["uid"])
    [call] = server.calls_to("patch", "pods")
    assert call.body == status_patch(api_pod["metadata"]["uid"])


def ready_patch(uid: str) -> dict[str, Any]:
    conditions = [
        {"type": "Ready", "status": "True", "reason": None, "message": None},
        {"type": "PodResizePending", "$patch": "delete"},
    ]
    return {"metadata": {"uid": uid}, "status": {"phase": "Running", "conditions": conditions}}


def mirror_ready(server: FakeApiServer) -> str | None:
    stored = server.stored(PODS, "web-node-a", "kube-system") or {}
    conditions = (stored.get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), None)


async def test_a_mirror_marked_not_ready_by_others_gets_the_static_pods_status_again() -> None:
    server = FakeApiServer()
    api = MirrorStatusApi(
        api=server,
        statics=Statics(),
        mirrors=MirrorIndex(api_pods=lambda: server.objects(PODS)),
        drifted=drifted,
    )
    mirror = server.seed(PODS, pod("web-node-a", {"kubernetes.io/config.mirror": STATIC_UID}))
    await api.patch(
        PODS,
        "web-node-a",
        ready_patch(STATIC_UID),
        patch_type=PatchType.MERGE,
        namespace="kube-system",
        subresource="status",
    )
    assert mirror_ready(server) == "True"
    await api.deliver_pending()  # the mirror shows what was sent: nothing to send
    assert len(server.calls_to("patch", "pods")) == 1

    # the node lifecycle controller, having lost touch with the node
    lost = {"type": "Ready", "status": "False", "reason": "NodeNotReady"}
    server.modify(
        PODS,
        "web-node-a",
        lambda obj: obj.update(status={"phase": "Running", "conditions": [lost]}),
        "kube-system",
    )
    assert mirror_ready(server) == "False"
    await api.deliver_pending()
    assert mirror_ready(server) == "True"
    assert server.calls_to("patch", "pods")[-1].body == ready_patch(mirror["metadata"]["uid"])
    await api.deliver_pending()
    assert len(server.calls_to("patch", "pods")) == 2

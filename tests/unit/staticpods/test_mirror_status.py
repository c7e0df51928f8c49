"""A static pod's status patch goes to its mirror pod, with the mirror's UID."""

from __future__ import annotations

from typing import Any

from nodeagent.apiserver import PODS, PatchType
from nodeagent.staticpods import MirrorIndex, MirrorStatusApi
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
        api=server, statics=statics, mirrors=MirrorIndex(api_pods=lambda: server.objects(PODS))
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
        api=server, statics=Statics(), mirrors=MirrorIndex(api_pods=lambda: server.objects(PODS))
    )
    await send(api, "api", api_pod["metadata"]["uid"])
    [call] = server.calls_to("patch", "pods")
    assert call.body == status_patch(api_pod["metadata"]["uid"])

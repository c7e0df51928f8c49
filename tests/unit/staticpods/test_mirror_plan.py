"""Which mirror pods to create and delete, and what a mirror pod looks like (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.staticpods import mirror_pod_body, parse_manifest, plan_mirror_pods, static_pod
from nodeagent.staticpods.mirror import MirrorIndex, MirrorRef

NODE = "node-a"


def static(name: str = "web", command: str = "sleep 3600") -> dict[str, Any]:
    path = f"/etc/kubernetes/manifests/{name}.yaml"
    text = (
        f"apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers:\n"
        f"  - {{name: app, image: busybox, command: [sh, -c, '{command}']}}\n"
    )
    return static_pod(parse_manifest(text, path=path), path=path, node_name=NODE)


def mirror_of(pod: dict[str, Any], uid: str = "m-1", **meta: Any) -> dict[str, Any]:
    body = mirror_pod_body(pod, node_name=NODE, node_uid="node-uid")
    body["metadata"].update(uid=uid, **meta)
    return body


WEB = static()
WEB_V2 = static(command="sleep 60")
DB = static("db")


def api_pod(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": "api-1"}, "spec": {}}


@pytest.mark.parametrize(
    ("statics", "api_pods", "node_ready", "terminating", "delete", "create", "waiting"),
    [
        pytest.param([WEB], [], True, False, [], [WEB], False, id="missing mirror: create"),
        pytest.param([WEB], [], False, False, [], [], True, id="no node yet: wait"),
        pytest.param([WEB], [mirror_of(WEB)], True, False, [], [], False, id="in sync"),
        pytest.param(
            [WEB_V2],
            [mirror_of(WEB)],
            True,
            False,
            [MirrorRef("default", "web-node-a", "m-1", "its static pod changed")],
            [],
            False,
            id="manifest changed: delete the old mirror, recreate later",
        ),
        pytest.param(
            [WEB],
            [mirror_of(WEB, deletionTimestamp="2026-01-01T00:00:00Z")],
            True,
            False,
            [MirrorRef("default", "web-node-a", "m-1", "it is being deleted")],
            [],
            False,
            id="someone deletes the mirror: delete it now, recreate later",
        ),
        pytest.param(
            [],
            [mirror_of(WEB)],
            True,
            False,
            [MirrorRef("default", "web-node-a", "m-1", "its static pod is gone")],
            [],
            False,
            id="manifest removed: delete the orphaned mirror",
        ),
        pytest.param(
            [], [mirror_of(WEB)], True, True, [], [], True, id="static pod still terminating"
        ),
        pytest.param(
            [WEB],
            [api_pod("web-node-a")],
            True,
            False,
            [],
            [WEB],
            False,
            id="an API pod that is no mirror is left alone",
        ),
        pytest.param(
            [WEB, DB], [mirror_of(DB)], True, False, [], [WEB], False, id="only what is missing"
        ),
    ],
)
def test_mirror_pod_plan(  # noqa: PLR0917 (one argument per table column)
    statics: list[dict[str, Any]],
    api_pods: list[dict[str, Any]],
    node_ready: bool,
    terminating: bool,
    delete: list[MirrorRef],
    create: list[dict[str, Any]],
    waiting: bool,
) -> None:
    plan = plan_mirror_pods(
        statics, api_pods, node_ready=node_ready, terminating=lambda uid: terminating
    )
    assert list(plan.delete) == delete
    assert list(plan.create) == create
    assert plan.waiting is waiting


def test_a_mirror_pod_is_the_static_pod_annotated_and_owned_by_the_node() -> None:
    body = mirror_pod_body(WEB, node_name=NODE, node_uid="node-uid")
    uid = WEB["metadata"]["uid"]
    assert "status" not in body
    assert "uid" not in body["metadata"]
    assert body["metadata"]["name"] == "web-node-a"
    assert body["metadata"]["annotations"] == {
        **WEB["metadata"]["annotations"],
        "kubernetes.io/config.mirror": uid,
    }
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid", "controller": True}
    ]
    assert body["spec"] == WEB["spec"]
    assert "kubernetes.io/config.mirror" not in WEB["metadata"]["annotations"]  # not mutated


def test_the_index_finds_the_live_mirror_of_a_static_pod() -> None:
    uid = WEB["metadata"]["uid"]
    pods = [api_pod("web-node-a"), mirror_of(WEB, uid="m-7")]
    index = MirrorIndex(api_pods=lambda: pods)
    assert index.mirror(uid, namespace="default", name="web-node-a") is pods[1]
    assert index.mirror(uid, namespace="other", name="web-node-a") is None
    assert index.mirror(WEB_V2["metadata"]["uid"], namespace="default", name="web-node-a") is None
    pods[1]["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert index.mirror(uid, namespace="default", name="web-node-a") is None

"""``/runningpods/`` through the real kube-apiserver and containerd: the pods the runtime runs,
in the kubelet's shape (name, namespace, uid, containers with their images; nothing from the
API object), gone once the pod's sandbox is; authorized as ``nodes/pods`` or ``nodes/proxy``
by the apiserver's SubjectAccessReview.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import agent_node, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until
from test_kubelet_api import POD, configure, free_port, https_get, pod_body

pytestmark = pytest.mark.integration


@pytest.fixture
def pods_reader(control_plane: ControlPlane) -> Iterator[str]:
    """A ClusterRole granting only ``get`` on ``nodes/pods``; its name (removed at the end,
    with its binding)."""
    name = f"na-pods-get-{secrets.token_hex(3)}"
    kubectl = control_plane.kubectl
    kubectl("create", "clusterrole", name, "--verb=get", "--resource=nodes/pods")
    try:
        yield name
    finally:
        kubectl("delete", "clusterrolebinding", name, "--ignore-not-found", check=False)
        kubectl("delete", "clusterrole", name, "--ignore-not-found", check=False)


async def test_running_pods_come_from_the_runtime(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, pods_reader: str
) -> None:
    port, healthz = free_port(), free_port()
    kubectl = control_plane.kubectl
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl("create", "-n", ns, "-f", "-", input=json.dumps(pod_body(ns, node.name)))
        uid = control_plane.get_json("pod", "-n", ns, POD)["metadata"]["uid"]
        raw = f"/api/v1/nodes/{node.name}/proxy/runningpods/"

        def entry() -> dict[str, Any] | None:
            done = kubectl("get", "--raw", raw, check=False)
            if done.returncode != 0:  # the node's port not up yet, or a 404
                return {"error": done.stderr}
            body = json.loads(done.stdout)
            assert (body["kind"], body["apiVersion"]) == ("PodList", "v1")
            items = [i for i in body["items"] or [] if i["metadata"].get("uid") == uid]
            return dict(items[0]) if items else None

        def listed() -> dict[str, Any] | None:
            item = entry()
            if item is not None and "error" in item:
                return None
            running = {c["name"] for c in (item or {}).get("spec", {}).get("containers") or []}
            return item if running == {"web", "talker"} else None

        item = await until("the pod in /runningpods/", listed, within=90, every=0.5,
                           explain=entry)  # fmt: skip
        assert item["metadata"] == {
            "name": POD,
            "namespace": ns,
            "uid": uid,
            "creationTimestamp": None,
        }
        assert item["status"] == {}
        for container in item["spec"]["containers"]:
            assert set(container) == {"name", "image", "resources"}
            assert container["image"]  # what the runtime reports it runs

        # Authorized as the kubelet authorizes it: nodes/pods is enough, nothing is not.
        kubectl("create", "serviceaccount", "lister", "-n", ns)
        kubectl("create", "serviceaccount", "nobody", "-n", ns)
        kubectl("create", "clusterrolebinding", pods_reader, f"--clusterrole={pods_reader}",
                f"--serviceaccount={ns}:lister")  # fmt: skip
        lister = kubectl("create", "token", "lister", "-n", ns).stdout.strip()
        nobody = kubectl("create", "token", "nobody", "-n", ns).stdout.strip()
        await until(
            "the nodes/pods grant reading /runningpods/",
            lambda: https_get(port, "/runningpods/", token=lister)[0] == 200,
            within=30,
            every=0.5,
        )
        assert https_get(port, "/runningpods/", token=nobody) == (
            403,
            f"Forbidden (user=system:serviceaccount:{ns}:nobody, verb=get, resource=nodes,"
            " subresource=proxy)\n",
        )

        # Gone from the list once the runtime no longer runs it.
        kubectl("delete", "pod", POD, "-n", ns, "--wait=false")
        await until("the pod gone from /runningpods/", lambda: entry() is None, within=90,
                    every=0.5, explain=node.log_tail)  # fmt: skip

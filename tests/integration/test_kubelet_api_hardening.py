"""The kubelet API against hostile or weak clients, through the real kube-apiserver's
TokenReview and SubjectAccessReview: a token holding only ``get nodes/proxy`` cannot run a
command over a WebSocket exec unless ``node.streamingAuthorization: HTTPMethod`` asks for
the kubelet's mapping.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import ssl
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from agentproc import AgentNode, agent_node, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until
from test_kubelet_api import POD, configure, free_port, https_get, pod_body

pytestmark = pytest.mark.integration

EXEC_QUERY = "command=sh&command=-c&command=echo+from-the-pod&output=1&error=1"


def insecure_context() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def websocket_exec(port: int, path: str, token: str) -> tuple[int, dict[int, bytes]]:
    """A ``v5.channel.k8s.io`` WebSocket exec straight to the node's port with a bearer
    token: (101, bytes per channel) or (refusal status, {})."""
    channels: dict[int, bytes] = {}
    async with aiohttp.ClientSession() as session:
        try:
            async with session.ws_connect(
                f"wss://127.0.0.1:{port}{path}",
                protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"),
                headers={"Authorization": f"Bearer {token}"},
                ssl=insecure_context(),
            ) as ws:
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                        channels[msg.data[0]] = channels.get(msg.data[0], b"") + msg.data[1:]
        except aiohttp.WSServerHandshakeError as e:
            return e.status, {}
    return 101, channels


def pods_status(port: int, token: str) -> int:
    """The status of ``GET /pods`` with ``token``; 0 while nothing listens."""
    try:
        return https_get(port, "/pods", token=token)[0]
    except OSError:
        return 0


@pytest.fixture
def proxy_reader(control_plane: ControlPlane) -> Iterator[str]:
    """A ClusterRole granting only ``get`` on ``nodes/proxy``, as monitoring charts do; its
    name (removed at the end, with its binding)."""
    name = f"na-proxy-get-{secrets.token_hex(3)}"
    kubectl = control_plane.kubectl
    kubectl("create", "clusterrole", name, "--verb=get", "--resource=nodes/proxy")
    try:
        yield name
    finally:
        kubectl("delete", "clusterrolebinding", name, "--ignore-not-found", check=False)
        kubectl("delete", "clusterrole", name, "--ignore-not-found", check=False)


async def running_pod(control_plane: ControlPlane, node: AgentNode) -> None:
    body = json.dumps(pod_body(node.namespace, node.name))
    control_plane.kubectl("create", "-n", node.namespace, "-f", "-", input=body)

    def running() -> bool:
        pod = control_plane.get_json("pod", "-n", node.namespace, POD)
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        return any("running" in s.get("state", {}) for s in statuses)

    await until("the pod running", running, within=90, every=0.5, explain=node.log_tail)


async def test_websocket_exec_with_only_get_on_nodes_proxy(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, proxy_reader: str
) -> None:
    port, healthz = free_port(), free_port()
    kubectl = control_plane.kubectl
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        await running_pod(control_plane, node)
        kubectl("create", "serviceaccount", "monitor", "-n", ns)
        kubectl("create", "clusterrolebinding", proxy_reader, f"--clusterrole={proxy_reader}",
                f"--serviceaccount={ns}:monitor")  # fmt: skip
        token = kubectl("create", "token", "monitor", "-n", ns).stdout.strip()
        user = f"system:serviceaccount:{ns}:monitor"

        # The grant is in force: the token reads /pods (get on nodes/proxy).
        await until(
            "the token reading /pods",
            lambda: pods_status(port, token) == 200,
            within=30,
            every=0.5,
        )
        path = f"/exec/{ns}/{POD}/web?{EXEC_QUERY}"

        # By default a WebSocket exec (a GET) needs create, as an SPDY one (a POST) does.
        status, channels = await websocket_exec(port, path, token)
        assert (status, channels) == (403, {})
        code, body = await asyncio.to_thread(
            https_get, port, f"/exec/{ns}/{POD}/web?{EXEC_QUERY}", token
        )
        assert (code, body) == (
            403,
            f"Forbidden (user={user}, verb=create, resource=nodes, subresource=proxy)\n",
        )

        # With the kubelet's mapping back, the same token runs the command.
        node.stop()
        settings = yaml.safe_load(node.config.read_text())
        settings["node"]["streamingAuthorization"] = "HTTPMethod"
        node.config.write_text(yaml.safe_dump(settings))
        node.start()
        await until(
            "the restarted agent's API",
            lambda: pods_status(port, token) == 200,
            within=60,
            every=0.5,
            explain=node.log_tail,
        )
        status, channels = await websocket_exec(port, path, token)
        assert status == 101
        assert channels.get(1) == b"from-the-pod\n"

"""The kubelet API against hostile or weak clients, through the real kube-apiserver's
TokenReview and SubjectAccessReview: a token holding only ``get nodes/proxy`` cannot run a
command over a WebSocket exec unless ``node.streamingAuthorization: HTTPMethod`` asks for
the kubelet's mapping; connections that say nothing are closed while long streams run on;
a command line as long as the kubelet accepts goes through.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import secrets
import select
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest
import yaml
from agentproc import AgentNode, agent_node, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until
from test_kubelet_api import POD, configure, free_port, https_get, kubectl_argv, pod_body

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


def follow_logs(control_plane: ControlPlane, namespace: str, seconds: float) -> list[float]:
    """``kubectl logs -f`` of the talker container through the apiserver for ``seconds``:
    when each line came (seconds since the start); the command must still be running."""
    argv = kubectl_argv(control_plane, "logs", "-f", "-n", namespace, POD, "-c", "talker")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    start = time.monotonic()
    times: list[float] = []
    try:
        while time.monotonic() - start < seconds:
            ready, _, _ = select.select([proc.stdout], [], [], 1.0)
            if ready:
                if not proc.stdout.readline():
                    break
                times.append(time.monotonic() - start)
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    return times


def idle_tls(port: int) -> tuple[ssl.SSLSocket, float]:
    """A TLS connection to the node that then sends nothing; (socket, when it was opened)."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn = insecure_context().wrap_socket(raw)
    return conn, time.monotonic()


def closed_within(conn: ssl.SSLSocket, seconds: float) -> bool:
    """The node closed ``conn`` within ``seconds`` (read returns EOF)."""
    conn.settimeout(seconds)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except OSError:
        return True
    finally:
        conn.close()


async def test_idle_connections_are_closed_and_long_streams_are_not(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    """Idle TLS connections are closed after the kubelet's IdleTimeout (90 s) while a
    ``kubectl logs -f`` through the apiserver runs on for longer, untouched."""
    port, healthz = free_port(), free_port()
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        await running_pod(control_plane, node)

        idle = [idle_tls(port) for _ in range(5)]
        logs = asyncio.create_task(asyncio.to_thread(follow_logs, control_plane, ns, 100.0))
        closed = await asyncio.gather(
            *(asyncio.to_thread(closed_within, conn, 90 + 20 - (time.monotonic() - t0))
              for conn, t0 in idle)
        )  # fmt: skip
        assert closed == [True] * 5
        times = await logs
        assert times and times[-1] > 95, times[-5:]  # lines to the end: never cut
        gaps = [b - a for a, b in itertools.pairwise([0.0, *times])]
        assert max(gaps) < 10, max(gaps)


async def test_exec_with_a_64_kib_argument_through_the_apiserver(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    """``kubectl exec`` carries the command in the URL: a 64 KiB argument makes a request line
    the kubelet (Go, 1 MiB of head) takes, and so must the node; a head past that is Go's 431."""
    port, healthz = free_port(), free_port()
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        await running_pod(control_plane, node)

        argument = secrets.token_hex(32 * 1024)  # 64 KiB
        done = control_plane.kubectl(
            "exec", "-n", ns, POD, "-c", "web", "--",
            "sh", "-c", 'printf %s "$1" | wc -c; printf %s "$1" | md5sum', "sh", argument,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-500:]
        count, digest = done.stdout.split("\n")[:2]
        assert count.strip() == str(len(argument))
        assert digest.split()[0] == hashlib.md5(argument.encode()).hexdigest()

        # Straight to the node: a head of more than 1 MiB + 4 KiB is refused as Go refuses it.
        conn = insecure_context().wrap_socket(socket.create_connection(("127.0.0.1", port)))
        conn.settimeout(30)
        conn.sendall(b"GET /pods?x=" + b"a" * ((1 << 20) + 8192) + b" HTTP/1.1\r\n\r\n")
        answer = b""
        with contextlib.suppress(OSError):  # the node hangs up after its answer
            while chunk := conn.recv(65536):
                answer += chunk
        conn.close()
        assert answer.startswith(b"HTTP/1.1 431 Request Header Fields Too Large\r\n"), answer

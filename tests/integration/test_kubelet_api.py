"""The kubelet API on a nodeagent node, through the real control plane and
containerd: what ``kubectl exec/attach/port-forward/cp`` users see, the 401/403 answers of the
node's own port, and the plain ``/healthz``.

The whole agent runs as ``make up`` runs it (x509 client CA, webhook authentication and
authorization) on free ports; the apiserver reaches it at the node's InternalIP.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import select
import socket
import ssl
import struct
import subprocess
import termios
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from agentproc import AgentNode, agent_node, wait_ready
from harness import node_up
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

pytestmark = pytest.mark.integration

POD = "streams"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod_body(namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "web",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        "sh",
                        "-c",
                        "echo hello-from-httpd > /var/www/index.html;"
                        " exec httpd -f -p 8080 -h /var/www",
                    ],
                },
                {
                    "name": "talker",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "while true; do echo tick; sleep 0.5; done"],
                },
            ],
        },
    }


def https_get(port: int, path: str, token: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def kubectl_argv(control_plane: ControlPlane, *args: str) -> list[str]:
    return [
        str(control_plane.kubectl_path),
        f"--kubeconfig={control_plane.admin_kubeconfig}",
        *args,
    ]


def configure(node: AgentNode, control_plane: ControlPlane, port: int, healthz: int) -> None:
    settings = yaml.safe_load(node.config.read_text())
    settings["kubelet"].update(
        {
            "port": port,
            "healthzPort": healthz,
            "authentication": {
                "x509": {"clientCAFile": str(control_plane.ca_path)},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            "logging": {"verbosity": 2},  # logs each stream's protocol
        }
    )
    node.config.write_text(yaml.safe_dump(settings))


def exec_tty(
    control_plane: ControlPlane, namespace: str, script: str, size: tuple[int, int] = (24, 80)
) -> tuple[int, str]:
    """``kubectl exec -it`` on a pseudo-terminal of ``size`` (rows, columns), as a user at a
    shell; (exit code, output)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", size[0], size[1], 0, 0))
    argv = kubectl_argv(
        control_plane, "exec", "-it", "-n", namespace, POD, "-c", "web", "--", "sh", "-c", script
    )
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    return proc.wait(timeout=10), out.decode(errors="replace")


STREAMING_METRIC = "apiserver_websocket_streaming_requests_total"


def streaming_requests(control_plane: ControlPlane) -> dict[tuple[str, str], float]:
    """The apiserver's WebSocket streaming requests: (subresource, proxy_type) -> count."""
    counts: dict[tuple[str, str], float] = {}
    for line in control_plane.kubectl("get", "--raw", "/metrics").stdout.splitlines():
        if line.startswith(STREAMING_METRIC + "{"):
            labels, _, value = line[len(STREAMING_METRIC) + 1 :].partition("} ")
            pairs = dict(p.split("=", 1) for p in labels.split(","))
            key = (pairs["subresource"].strip('"'), pairs["proxy_type"].strip('"'))
            counts[key] = float(value)
    return counts


def http_get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def attach_output(control_plane: ControlPlane, namespace: str, seconds: float) -> str:
    """What ``kubectl attach`` prints of the talker container in ``seconds``."""
    attach = subprocess.Popen(
        kubectl_argv(control_plane, "attach", "-n", namespace, POD, "-c", "talker"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    time.sleep(seconds)
    attach.terminate()
    out, err = attach.communicate(timeout=10)
    return out.decode() + err.decode()


def get_through_port_forward(control_plane: ControlPlane, namespace: str) -> str | None:
    """``kubectl port-forward`` to the pod's httpd, then one GET through it."""
    local = free_port()
    forward = subprocess.Popen(
        kubectl_argv(control_plane, "port-forward", "-n", namespace, f"pod/{POD}", f"{local}:8080"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            page = http_get(f"http://127.0.0.1:{local}/")
            if page is not None:
                return page
            time.sleep(0.5)
        return None
    finally:
        forward.terminate()
        forward.communicate(timeout=10)


async def kubectl_streams(control_plane: ControlPlane, ns: str, tmp_path: Path) -> None:
    """exec (exit code, stdin, a TTY and its size), attach, port-forward and cp, as a user
    types them."""
    kubectl = control_plane.kubectl
    # exec: stdout, stderr and the exit code.
    done = kubectl(
        "exec", "-n", ns, POD, "-c", "web", "--",
        "sh", "-c", "echo out; echo err >&2; exit 7",
        check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout) == (7, "out\n"), done.stderr
    assert "err" in done.stderr

    # exec with stdin.
    done = kubectl("exec", "-i", "-n", ns, POD, "-c", "web", "--", "wc", "-c", input="abcdef")
    assert done.stdout.strip() == "6"

    # exec -it through a pseudo-terminal: the command has a TTY of the terminal's size
    # (kubectl sends it on the resize stream). The sleep: CRI Exec carries no size, so the
    # runtime applies the first one after the command started; a command that asks at once
    # reads 0x0 on any node (tried: opening the resize stream only with kubectl's first size,
    # so that it reaches containerd before the start, did not change that).
    code, out = await asyncio.to_thread(
        exec_tty,
        control_plane,
        ns,
        "test -t 0 && echo TTY-YES; sleep 1; stty size; exit 3",
        (33, 111),
    )
    assert code == 3, out
    assert "TTY-YES" in out
    assert "33 111" in out

    # attach: the running container's output.
    out = await asyncio.to_thread(attach_output, control_plane, ns, 3.0)
    assert "tick" in out

    # port-forward, then an HTTP GET through it.
    page = await asyncio.to_thread(get_through_port_forward, control_plane, ns)
    assert page == "hello-from-httpd\n"

    # cp both ways (exec + tar).
    src = tmp_path / "payload.txt"
    src.write_bytes(os.urandom(200_000).hex().encode())
    kubectl("cp", "-c", "web", str(src), f"{ns}/{POD}:/tmp/payload.txt")
    done = kubectl("exec", "-n", ns, POD, "-c", "web", "--", "wc", "-c", "/tmp/payload.txt")
    assert done.stdout.split()[0] == str(src.stat().st_size)
    back = tmp_path / "back.txt"
    kubectl("cp", "-c", "web", f"{ns}/{POD}:/tmp/payload.txt", str(back))
    assert back.read_bytes() == src.read_bytes()


async def test_kubectl_streams_and_the_node_port(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    port, healthz = free_port(), free_port()
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl = control_plane.kubectl
        kubectl("create", "-f", "-", input=json.dumps(pod_body(ns, node.name)))

        def running() -> bool:
            pod = control_plane.get_json("pod", "-n", ns, POD)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return len(statuses) == 2 and all("running" in s.get("state", {}) for s in statuses)

        await until("the pod running", running, within=60, every=0.5, explain=node.log_tail)

        # The node declares ExtendWebSocketsToKubelet, as the 1.36 kubelet does: the apiserver
        # passes kubectl's WebSockets to it untouched (counted below).
        node_status = control_plane.get_json("node", node.name)["status"]
        assert node_status.get("declaredFeatures") == ["ExtendWebSocketsToKubelet"]
        before = streaming_requests(control_plane)

        # The plain healthz port, without credentials.
        assert await asyncio.to_thread(http_get, f"http://127.0.0.1:{healthz}/healthz") == "ok"

        # No credentials: 401, also on /pods.
        assert https_get(port, "/pods") == (401, "Unauthorized\n")
        assert https_get(port, "/exec/x/y/z", token="not-a-token") == (401, "Unauthorized\n")

        # A ServiceAccount token without nodes/proxy: 403 with the kubelet's text.
        kubectl("create", "serviceaccount", "reader", "-n", ns)
        token = kubectl("create", "token", "reader", "-n", ns).stdout.strip()
        code, body = https_get(port, "/containerLogs/x/y/z", token=token)
        assert (code, body) == (
            403,
            f"Forbidden (user=system:serviceaccount:{ns}:reader, verb=get, resource=nodes,"
            " subresource=proxy)\n",
        )

        # The apiserver's own client (x509, system:masters) reads /pods, /healthz, /configz.
        raw = f"/api/v1/nodes/{node.name}/proxy"
        pods = json.loads(kubectl("get", "--raw", f"{raw}/pods").stdout)
        assert pods["kind"] == "PodList"
        assert POD in {p["metadata"]["name"] for p in pods["items"]}
        assert kubectl("get", "--raw", f"{raw}/healthz/syncloop").stdout == "ok"
        configz = json.loads(kubectl("get", "--raw", f"{raw}/configz").stdout)
        assert configz["kubeletconfig"]["port"] == port
        metrics = kubectl("get", "--raw", f"{raw}/metrics").stdout
        assert "process_resident_memory_bytes" in metrics

        await kubectl_streams(control_plane, ns, tmp_path)

        # Every one of these went to the node as the client's WebSocket; none was translated
        # by the apiserver. The node translated v5 with stdin to the runtime's SPDY, served
        # v5 without stdin as the runtime's v4, and unwrapped the port-forward tunnel.
        after = streaming_requests(control_plane)

        def more(subresource: str, how: str) -> float:
            key = (subresource, how)
            return after.get(key, 0.0) - before.get(key, 0.0)

        assert more("exec", "proxied_to_kubelet") >= 6
        assert more("attach", "proxied_to_kubelet") == 1
        assert more("portforward", "proxied_to_kubelet") >= 1
        assert sum(more(sub, "translated_at_apiserver") for sub, _ in after) == 0
        log = node.log_text()
        for bridge in ("translate", "v5-as-v4", "tunnel"):
            assert f"bridge={bridge}" in log, bridge


def serving_cert_subject(port: int, ca: Path, ip: str) -> dict[str, Any]:
    """The serving certificate of the node's port, verified against ``ca`` for ``ip``."""
    context = ssl.create_default_context(cafile=str(ca))
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=ip) as tls,
    ):
        cert: dict[str, Any] = tls.getpeercert() or {}
    return cert


async def test_server_tls_bootstrap_serves_the_cluster_signed_certificate(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    port, healthz = free_port(), free_port()
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        settings = yaml.safe_load(node.config.read_text())
        settings["kubelet"]["serverTLSBootstrap"] = True
        node.config.write_text(yaml.safe_dump(settings))
        proc = node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        # /healthz does not wait for the certificate.
        assert await asyncio.to_thread(http_get, f"http://127.0.0.1:{healthz}/healthz") == "ok"

        def pending() -> dict[str, Any] | None:
            for csr in control_plane.get_json("csr")["items"]:
                if (
                    csr["spec"].get("username") == f"system:node:{node.name}"
                    and csr["spec"].get("signerName") == "kubernetes.io/kubelet-serving"
                ):
                    return dict(csr)
            return None

        csr = await until("the serving CSR", pending, within=30, every=0.5, explain=node.log_tail)
        assert set(csr["spec"]["usages"]) == {"digital signature", "server auth"}
        await asyncio.to_thread(node_up.approve_serving_csr, control_plane, node.name, proc,
                                issued=tmp_path / "none")  # fmt: skip
        addresses = control_plane.get_json("node", node.name)["status"]["addresses"]
        ip = next(a["address"] for a in addresses if a["type"] == "InternalIP")

        def served() -> dict[str, Any] | None:
            try:
                return serving_cert_subject(port, control_plane.ca_path, ip)
            except OSError:
                return None

        cert = await until("HTTPS with the issued certificate", served, within=30, every=0.5,
                           explain=node.log_tail)  # fmt: skip
        assert (("commonName", f"system:node:{node.name}"),) in cert["subject"]
        assert ("IP Address", ip) in cert["subjectAltName"]
        # The apiserver's client still gets in (and would verify it with the cluster CA).
        raw = f"/api/v1/nodes/{node.name}/proxy/healthz"
        assert control_plane.kubectl("get", "--raw", raw).stdout == "ok"
        control_plane.kubectl("delete", "csr", csr["metadata"]["name"], check=False)


async def websocket_exec(port: int, control_plane: ControlPlane, path: str) -> dict[int, bytes]:
    """A WebSocket exec straight to the node's port (as a v5.channel.k8s.io client), with the
    apiserver's client certificate; the bytes received per channel."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    pair = control_plane.pki.apiserver_kubelet_client
    context.load_cert_chain(pair.cert, pair.key)
    channels: dict[int, bytes] = {}
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"wss://127.0.0.1:{port}{path}",
            protocols=("v5.channel.k8s.io", "v4.channel.k8s.io"),
            ssl=context,
        ) as ws,
    ):
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                channels[msg.data[0]] = channels.get(msg.data[0], b"") + msg.data[1:]
    return channels


async def test_websocket_exec_straight_to_the_node(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    port, healthz = free_port(), free_port()
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, port, healthz)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        control_plane.kubectl("create", "-f", "-", input=json.dumps(pod_body(ns, node.name)))

        def running() -> bool:
            pod = control_plane.get_json("pod", "-n", ns, POD)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return any("running" in s.get("state", {}) for s in statuses)

        await until("the pod running", running, within=60, every=0.5, explain=node.log_tail)
        query = "command=sh&command=-c&command=echo+ws-hello%3B+exit+4&output=1&error=1"
        try:
            channels = await websocket_exec(port, control_plane, f"/exec/{ns}/{POD}/web?{query}")
        except aiohttp.ClientConnectorError as e:  # seen once in CI: say what the agent said
            raise AssertionError(f"{e}\n--- the agent's log ---\n{node.log_tail(4000)}") from e
        assert channels.get(1) == b"ws-hello\n"
        status = json.loads(channels[3])
        assert status["status"] == "Failure"
        assert status["details"]["causes"][0] == {"reason": "ExitCode", "message": "4"}

"""Where an exec's time goes: nodeagent and the kubelet as nodes at once, execs interleaved.

    PYTHONPATH=tests .venv/bin/python bench/exec_paths.py [--execs 30] [--pods 2]
        [--nodes nodeagent,kubelet,kubelet-nows]

``kubelet_api``'s harness, but every node runs at the same time (each with its own containerd)
and the execs alternate between them, so load on the shared machine falls on all alike.
``kubelet-nows`` is the kubelet with ``ExtendWebSocketsToKubelet`` off: it does not declare
the feature, so the apiserver translates a WebSocket exec to SPDY for it (``nodeagent-nows``
likewise). Per node, ``--execs`` times ``true`` in the ticker:

- **direct**: a WebSocket (``v4.channel.k8s.io``) straight to the node's port with the
  apiserver's kubelet client certificate: TLS connect, the ``101`` (authentication, CRI calls,
  the runtime's own ``101``), the exit status (the runtime runs the command), the close;
- **via apiserver**: a WebSocket (``v5.channel.k8s.io``) to the pod's ``exec`` subresource,
  the same phases as the client sees them (the apiserver answers ``101`` before it dials a node
  it translates for);
- **via apiserver, stdin**: the same with ``stdin=true`` (a node that declares the feature
  translates it to the runtime's SPDY streams itself, as the apiserver does for one that
  does not).

Prints the median of each phase (ms) and each node's declared features and RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import json
import os
import ssl
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import kubelet_api as ka
import node_measure as m
import pod_api
import pod_startup as ps
from harness import netsafety
from harness.build import binaries
from harness.containerd import unmount_and_remove
from harness.hoststate import HostState
from harness.images import BUSYBOX_IMAGE
from harness.pki import tls_client_context
from node_idle import say

NO_WEBSOCKETS = "kubelet-nows"


@dataclass
class Phases:
    connect: float
    upgraded: float
    status: float
    closed: float
    outcome: str

    @property
    def total(self) -> float:
        return self.connect + self.upgraded + self.status + self.closed


async def ws_exec(host: str, port: int, context: ssl.SSLContext, path: str, proto: str) -> Phases:
    """One WebSocket exec, its phases timed from this side (a minimal client: the frames the
    server sends are unmasked and small)."""
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    t1 = time.monotonic()
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
        f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
        f"Sec-WebSocket-Protocol: {proto}\r\n\r\n".encode()
    )
    head = await reader.readuntil(b"\r\n\r\n")
    t2 = time.monotonic()
    status, t3 = "", None
    if b" 101 " in head.split(b"\r\n")[0]:
        while True:
            try:
                first = await reader.readexactly(2)
            except asyncio.IncompleteReadError:
                break
            opcode, length = first[0] & 0x0F, first[1] & 0x7F
            if length >= 126:
                length = int.from_bytes(await reader.readexactly(2 if length == 126 else 8))
            data = await reader.readexactly(length)
            if opcode == 2 and data[:1] == bytes([ka.ERROR_CHANNEL]) and len(data) > 1:
                status, t3 = data[1:].decode(), time.monotonic()
            if opcode == 8:
                break
    else:
        status = head.split(b"\r\n")[0].decode()
    t4 = time.monotonic()
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    t3 = t3 or t4
    return Phases(t1 - t0, t2 - t1, t3 - t2, t4 - t3, status)


class PathsBench(ka.ApiBench):
    label = ""
    ports: dict[str, int]

    def argv(
        self, component: str, *, name: str, root: Path, endpoint: str, cgroups: str
    ) -> list[str]:
        argv = super().argv(component, name=name, root=root, endpoint=endpoint, cgroups=cgroups)
        path = root.parent / f"{component}-config.yaml"
        config = json.loads(path.read_text())
        section = config["kubelet"] if component == "nodeagent" else config
        self.ports[self.label] = section["port"]
        if self.label.endswith("-nows"):
            section.setdefault("featureGates", {})["ExtendWebSocketsToKubelet"] = False
            path.write_text(json.dumps(config, indent=2) + "\n")
        return argv

    def start_pods(self, node: ps.Node) -> None:
        ns = node.namespace
        bodies = [
            ka.ticker_pod(
                ka.TICKER_POD, namespace=ns, node=node.name, image=BUSYBOX_IMAGE, by_scheduler=True
            )
        ]
        bodies += [
            pod_api.sleep_pod(
                f"p-{i:03d}", namespace=ns, node=node.name, image=BUSYBOX_IMAGE, by_scheduler=True
            )
            for i in range(1, self.args.pods)
        ]
        if asyncio.run(self.create(ns, bodies)).all_running_s is None:
            raise RuntimeError(f"{node.name}: pods not Running")


def _ms(values: list[float]) -> str:
    return f"{1000 * pod_api.percentile(sorted(values), 50):.1f}"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--execs", type=int, default=30)
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--nodes", default=f"nodeagent,kubelet,{NO_WEBSOCKETS}")
    args = parser.parse_args(argv)
    args.node_name, args.verbosity, args.timeout = False, 0, 300.0
    labels = args.nodes.split(",")
    bins = binaries()
    work = Path(tempfile.mkdtemp(prefix="na-exec-"))
    log_dir = work / "logs"
    host = HostState.snapshot()  # the kubelet's canary tables, sysctls, cgroups
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(netsafety.unreachable_routes())
            plane = stack.enter_context(ps.control_plane(bins, log_dir=log_dir))
            bench = PathsBench(
                plane=plane, kubelet=bins.path("kubelet"), work=work, log_dir=log_dir, args=args
            )
            bench.ports = {}
            nodes: dict[str, ps.Node] = {}
            for n, label in enumerate(labels):
                bench.label, bench.work = label, work / str(n)  # short: containerd's socket
                nodes[label] = stack.enter_context(bench.node(label.split("-")[0], ps.Result()))
            for node in nodes.values():
                bench.start_pods(node)
            results = asyncio.run(measure(bench, nodes, args.execs))
            print("| node | declared features | path | total | TLS | 101 | status | close |")
            print("|---|---|---|---|---|---|---|---|")
            for label, node in nodes.items():
                declared = plane.kubectl(
                    "get", "node", node.name, "-o", "jsonpath={.status.declaredFeatures}"
                ).stdout.strip()
                for path, runs in results[label].items():
                    bad = sum('"Success"' not in r.outcome for r in runs)
                    phases = [
                        _ms([r.total for r in runs]),
                        *(_ms([getattr(r, f) for r in runs]) for f in
                          ("connect", "upgraded", "status", "closed")),
                    ]  # fmt: skip
                    failed = f" ({bad} failed)" if bad else ""
                    print(f"| {label} | {declared or 'none'} | {path}{failed} | "
                          + " | ".join(phases) + " |")  # fmt: skip
                rss = m.sample(node.proc.pid, now=time.time()).rss_kib / 1024
                say(f"{label}: RSS {rss:.1f} MiB")
            say(f"load (1 min) {os.getloadavg()[0]:.2f}")
    finally:
        host.restore()
        unmount_and_remove(work)
    return 0


async def measure(
    bench: PathsBench, nodes: dict[str, ps.Node], count: int
) -> dict[str, dict[str, list[Phases]]]:
    plane = bench.plane
    node_ctx = tls_client_context(plane.pki.apiserver_kubelet_client)
    api_ctx = tls_client_context(plane.pki.admin, ca=plane.ca_path, check_hostname=False)
    api_host, api_port = plane.server.split("//")[1].rsplit(":", 1)
    labels = list(nodes)
    results: dict[str, dict[str, list[Phases]]] = {
        label: {"direct": [], "via apiserver": [], "via apiserver, stdin": []} for label in labels
    }
    for i in range(count):
        for label in labels[i % len(labels) :] + labels[: i % len(labels)]:
            ns, pod, ctr = nodes[label].namespace, ka.TICKER_POD, ka.TICKER
            direct = f"/exec/{ns}/{pod}/{ctr}?command=true&output=1&error=1"
            results[label]["direct"].append(
                await ws_exec(
                    "127.0.0.1", bench.ports[label], node_ctx, direct, "v4.channel.k8s.io"
                )
            )
            api = (
                f"/api/v1/namespaces/{ns}/pods/{pod}/exec?command=true&container={ctr}"
                "&stdout=true&stderr=true"
            )
            results[label]["via apiserver"].append(
                await ws_exec(api_host, int(api_port), api_ctx, api, ka.EXEC_PROTOCOL)
            )
            results[label]["via apiserver, stdin"].append(
                await ws_exec(
                    api_host, int(api_port), api_ctx, api + "&stdin=true", ka.EXEC_PROTOCOL
                )
            )
    return results


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

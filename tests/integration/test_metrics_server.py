"""``kubectl top node`` and ``kubectl top pod`` on a nodeagent node: metrics-server (built from
its Go module, as ``make up`` deploys it) scrapes the node's ``/metrics/resource`` through the
kubelet API's authentication and authorization.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, wait_ready
from harness import metrics_server
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configure(node: AgentNode, control_plane: ControlPlane) -> None:
    settings = yaml.safe_load(node.config.read_text())
    settings["kubelet"].update(
        {
            "port": free_port(),
            "healthzPort": free_port(),
            "authentication": {
                "x509": {"clientCAFile": str(control_plane.ca_path)},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
        }
    )
    node.config.write_text(yaml.safe_dump(settings))


def burner(namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "burner", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "while :; do :; done"],
                }
            ],
        },
    }


async def test_kubectl_top_node_and_pod(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl = control_plane.kubectl
        kubectl("create", "-f", "-", input=json.dumps(burner(ns, node.name)))
        metrics_server.deploy(
            control_plane,
            node_name=node.name,
            import_image=containerd.containerd.import_image,
            work_dir=tmp_path / "metrics-server",
            port=free_port(),
        )
        try:

            def top(*args: str) -> str | None:
                done = kubectl("top", *args, "--no-headers", check=False)
                return done.stdout if done.returncode == 0 and done.stdout.strip() else None

            def explain() -> str:
                pods = kubectl("get", "pods", "-n", "kube-system", "-o", "wide", check=False)
                api = kubectl("get", "apiservice", "v1beta1.metrics.k8s.io", check=False)
                logs = kubectl(
                    "logs", "-n", "kube-system", "deploy/metrics-server", "--tail=15", check=False
                )
                return (
                    f"{pods.stdout}\n{api.stdout}{api.stderr}\n"
                    f"metrics-server log:\n{logs.stdout}{logs.stderr}\n{node.log_tail(1500)}"
                )

            nodes = await until("kubectl top node", lambda: top("node"), within=120, every=3,
                                explain=explain)  # fmt: skip
            name, cpu, cpu_pct, memory, memory_pct = nodes.split()[:5]
            assert name == node.name
            assert cpu.endswith("m") and int(cpu[:-1]) > 0
            assert memory.endswith("Mi") and int(memory[:-2]) > 0
            assert cpu_pct.endswith("%") and memory_pct.endswith("%")

            def burner_top() -> str | None:
                out = top("pod", "-n", ns)
                return out if out and out.startswith("burner") else None

            pods = await until("kubectl top pod", burner_top, within=60, every=3, explain=explain)
            _, pod_cpu, pod_memory = pods.split()[:3]
            assert int(pod_cpu.rstrip("m")) > 300  # the busy loop burns most of a core
            assert pod_memory.endswith("Mi")
        finally:
            metrics_server.remove(control_plane)

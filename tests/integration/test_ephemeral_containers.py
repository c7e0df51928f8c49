"""``kubectl debug`` on a nodeagent node, through the real control plane and containerd: an
ephemeral container added by the ``ephemeralcontainers`` subresource runs once in its target's
PID namespace, shows in ``status.ephemeralContainerStatuses``, its log is read by ``kubectl
logs -c``, ``kubectl attach``/``exec`` reach it, an agent restart neither loses nor reruns it,
and it stops with its pod.

The whole agent runs as ``make up`` runs it (x509 client CA, webhook authn/authz on its
kubelet API, on free ports).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, runtime_view, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME

pytestmark = pytest.mark.integration

POD = "debuggee"
APP_COMMAND = ["sleep", "3601"]  # what the debug container's `ps` must show


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def configure(node: AgentNode, control_plane: ControlPlane) -> int:
    """The kubelet API on free ports, as ``make up`` secures it; returns the healthz port."""
    healthz = free_port()
    settings = yaml.safe_load(node.config.read_text())
    settings["kubelet"].update(
        {
            "port": free_port(),
            "healthzPort": healthz,
            "authentication": {
                "x509": {"clientCAFile": str(control_plane.ca_path)},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
        }
    )
    node.config.write_text(yaml.safe_dump(settings))
    return healthz


def healthy(port: int) -> bool:
    """The plain ``/healthz`` (with the sync loop's check) answers ok."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as resp:
            return bool(resp.read() == b"ok")
    except OSError:
        return False


def pod_body(namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": POD, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": APP_COMMAND,
                }
            ],
        },
    }


def ephemeral(control_plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    pod = control_plane.get_json("pod", "-n", ns, POD)
    statuses = (pod.get("status") or {}).get("ephemeralContainerStatuses") or []
    return next((s for s in statuses if s.get("name") == name), {})


def attach_output(control_plane: ControlPlane, ns: str, container: str, seconds: float) -> str:
    argv = [
        str(control_plane.kubectl_path),
        f"--kubeconfig={control_plane.admin_kubeconfig}",
        "attach", "-n", ns, POD, "-c", container,
    ]  # fmt: skip
    attach = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(seconds)
    attach.terminate()
    out, err = attach.communicate(timeout=10)
    return out.decode() + err.decode()


async def debug_containers(endpoint: str, ns: str, name: str) -> list[cri.Container]:
    view = await runtime_view(endpoint, ns)
    return [c for c in view.containers if c.labels.get(CONTAINER_NAME) == name]


async def test_kubectl_debug_targets_the_app_and_runs_once(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        healthz = configure(node, control_plane)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl = control_plane.kubectl
        kubectl("create", "-f", "-", input=json.dumps(pod_body(ns, node.name)))

        def app_running() -> bool:
            pod = control_plane.get_json("pod", "-n", ns, POD)
            statuses = (pod.get("status") or {}).get("containerStatuses") or []
            return bool(statuses) and "running" in statuses[0].get("state", {})

        await until("the app running", app_running, within=60, every=0.5, explain=node.log_tail)

        # kubectl debug --target: the debug container sees the app's processes.
        started = time.monotonic()
        kubectl(
            "debug", "-n", ns, POD, "-c", "dbg", f"--image={BUSYBOX_IMAGE}",
            "--image-pull-policy=IfNotPresent", "--target=app", "--",
            "sh", "-c", "ps; sleep 1",
        )  # fmt: skip
        await until(
            "the debug container running",
            lambda: "running" in ephemeral(control_plane, ns, "dbg").get("state", {}),
            within=30,
            every=0.2,
            explain=node.log_tail,
        )
        to_running = time.monotonic() - started
        done = await until(
            "the debug container done",
            lambda: ephemeral(control_plane, ns, "dbg").get("state", {}).get("terminated"),
            within=30,
            every=0.5,
            explain=node.log_tail,
        )
        print(f"kubectl debug -> ephemeral container running: {to_running:.2f} s")
        status = ephemeral(control_plane, ns, "dbg")
        [ctr] = await debug_containers(node.endpoint, ns, "dbg")
        assert done["exitCode"] == 0, status
        assert status["containerID"] == f"containerd://{ctr.id}"
        assert (status["ready"], status["restartCount"]) == (False, 0)
        assert status["imageID"], status
        logs = kubectl("logs", "-n", ns, POD, "-c", "dbg").stdout
        assert " ".join(APP_COMMAND) in logs, logs  # the target's process, seen from dbg

        pod = control_plane.get_json("pod", "-n", ns, POD)
        assert pod["status"]["phase"] == "Running"
        events = control_plane.get_json(
            "events", "-n", ns, "--field-selector", f"involvedObject.name={POD}"
        )["items"]
        started_events = {
            e["involvedObject"].get("fieldPath") for e in events if e["reason"] == "Started"
        }
        assert "spec.ephemeralContainers{dbg}" in started_events

        # An agent killed and restarted finds it by its labels: reported the same, never
        # run again.
        node.kill()
        assert not healthy(healthz)
        node.start()
        await until("the new agent healthy", lambda: healthy(healthz), within=60, every=0.2)
        await asyncio.sleep(5)  # a few relists and syncs: a rerun would show up now
        assert [c.id for c in await debug_containers(node.endpoint, ns, "dbg")] == [ctr.id]
        assert ephemeral(control_plane, ns, "dbg")["state"]["terminated"] == done
        assert kubectl("logs", "-n", ns, POD, "-c", "dbg").stdout == logs

        # A long-running one with a TTY: attach and exec reach it.
        kubectl(
            "debug", "-n", ns, POD, "-c", "polo", f"--image={BUSYBOX_IMAGE}",
            "--image-pull-policy=IfNotPresent", "--",
            "sh", "-c", "while true; do echo polo; sleep 0.5; done",
        )  # fmt: skip
        await until(
            "the second debug container running",
            lambda: "running" in ephemeral(control_plane, ns, "polo").get("state", {}),
            within=30,
            every=0.5,
            explain=node.log_tail,
        )
        out = await asyncio.to_thread(attach_output, control_plane, ns, "polo", 3.0)
        assert "polo" in out, out
        marco = kubectl("exec", "-n", ns, POD, "-c", "polo", "--", "echo", "marco").stdout
        assert marco == "marco\n"

        # Deleting the pod stops the debug container with the app.
        kubectl("delete", "pod", "-n", ns, POD, "--wait=false")
        await until(
            "the pod gone",
            lambda: not kubectl("get", "pod", "-n", ns, POD, check=False).stdout,
            within=60,
            every=0.5,
            explain=node.log_tail,
        )
        view = await runtime_view(node.endpoint, ns)
        assert [c for c in view.containers if c.state == cri.CONTAINER_RUNNING] == []

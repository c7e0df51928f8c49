"""``kubectl logs`` and the stats endpoints through the real control plane, on a nodeagent node
(the whole agent, as ``make up`` runs it, with webhook authn/authz on its kubelet API).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

pytestmark = pytest.mark.integration

POD = "talkers"
WRITER = "for i in 1 2 3 4 5; do echo out $i; echo err $i >&2; done; exec sleep 3600"
TICKER = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.5; done"
FLAPPY = "echo started at $(cat /proc/uptime); sleep 2; exit 3"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod_body(name: str, namespace: str, node: str, containers: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": cname,
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }
                for cname, script in containers.items()
            ],
        },
    }


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


def follow_lines(
    control_plane: ControlPlane, namespace: str, count: int
) -> list[tuple[float, str, str]]:
    """``kubectl logs -f --timestamps`` of the ticker: (received at, stamp, line) for
    ``count`` lines, then the follower is stopped."""
    argv = [
        str(control_plane.kubectl_path),
        f"--kubeconfig={control_plane.admin_kubeconfig}",
        "logs", "-f", "--timestamps", "--tail=1", "-n", namespace, POD, "-c", "ticker",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    got = []
    try:
        for raw in proc.stdout:
            stamp, line = raw.rstrip("\n").split(" ", 1)
            got.append((time.time(), stamp, line))
            if len(got) == count:
                break
    finally:
        proc.terminate()
        proc.communicate(timeout=10)
    return got


def stamp_seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp[:26] + "+00:00").timestamp()


def check_logs(control_plane: ControlPlane, ns: str) -> None:
    """The ``kubectl logs`` variants on the running pod (blocking: run in a thread)."""

    def logs(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return control_plane.kubectl("logs", "-n", ns, POD, *args, check=check)

    # plain: both streams, in order within each
    text = logs("-c", "writer").stdout
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("out")] == [f"out {i}" for i in range(1, 6)]
    assert [x for x in lines if x.startswith("err")] == [f"err {i}" for i in range(1, 6)]
    assert logs("-c", "writer", "--tail=2").stdout.splitlines() == lines[-2:]
    assert logs("-c", "writer", "--limit-bytes=7").stdout == text[:7]
    assert logs("-c", "writer", "--since=1h").stdout == text
    time.sleep(2)
    assert logs("-c", "writer", "--since=1s").stdout == ""
    stamped = logs("-c", "writer", "--timestamps").stdout.splitlines()
    assert [s.split(" ", 1)[1] for s in stamped] == lines
    assert abs(stamp_seconds(stamped[0].split(" ")[0]) - time.time()) < 120

    # follow: each line arrives within a second of being written
    got = follow_lines(control_plane, ns, 4)
    assert [g[2] for g in got][1:] == [f"tick {int(got[0][2].split()[1]) + i}" for i in range(1, 4)]
    latencies = [received - stamp_seconds(stamp) for received, stamp, _ in got[1:]]
    assert max(latencies) < 1.0, latencies
    print(f"kubectl logs -f latency: {[round(x * 1000) for x in latencies]} ms")

    # previous: the instance before the restart
    previous = logs("-c", "flappy", "--previous").stdout
    assert previous.startswith("started at ") and previous.count("\n") == 1
    done = logs("-c", "writer", "--previous", check=False)
    assert done.returncode != 0
    assert f'previous terminated container "writer" in pod "{POD}" not found' in done.stderr


async def test_kubectl_logs_and_stats_through_the_control_plane(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        kubectl = control_plane.kubectl
        containers = {"writer": WRITER, "ticker": TICKER, "flappy": FLAPPY}
        kubectl("create", "-f", "-", input=json.dumps(pod_body(POD, ns, node.name, containers)))
        bad = pod_body("unpullable", ns, node.name, {"app": "true"})
        bad["spec"]["containers"][0]["image"] = "localhost:5000/no-such-image:1"
        kubectl("create", "-f", "-", input=json.dumps(bad))

        def pod() -> dict[str, Any]:
            return control_plane.get_json("pod", "-n", ns, POD)

        def statuses() -> dict[str, dict[str, Any]]:
            return {
                s["name"]: s for s in (pod().get("status") or {}).get("containerStatuses") or []
            }

        def flappy_restarted() -> bool:
            s = statuses()
            return (
                "running" in s.get("writer", {}).get("state", {})
                and "running" in s.get("ticker", {}).get("state", {})
                and s.get("flappy", {}).get("restartCount", 0) >= 1
            )

        await until("the pod running, flappy restarted", flappy_restarted, within=90, every=1)

        await asyncio.to_thread(check_logs, control_plane, ns)

        # a container that cannot start: the kubelet's reason
        def waiting_reason() -> str:
            got = control_plane.get_json("pod", "-n", ns, "unpullable")
            s = ((got.get("status") or {}).get("containerStatuses") or [{}])[0]
            return str(s.get("state", {}).get("waiting", {}).get("reason", ""))

        await until("an image pull error", lambda: "Err" in waiting_reason() or
                    "BackOff" in waiting_reason(), within=60, every=1)  # fmt: skip
        done = kubectl("logs", "-n", ns, "unpullable", check=False)
        assert done.returncode != 0
        assert 'container "app" in pod "unpullable" is waiting to start' in done.stderr

        # stats through the apiserver's node proxy
        raw = f"/api/v1/nodes/{node.name}/proxy"
        summary = json.loads(kubectl("get", "--raw", f"{raw}/stats/summary").stdout)
        assert summary["node"]["nodeName"] == node.name
        mine = [p for p in summary["pods"] if p["podRef"]["namespace"] == ns]
        talkers = next(p for p in mine if p["podRef"]["name"] == POD)
        names = {c["name"] for c in talkers["containers"]}
        assert {"writer", "ticker"} <= names
        assert all(c["memory"]["workingSetBytes"] > 0 for c in talkers["containers"])
        metrics = kubectl("get", "--raw", f"{raw}/metrics/resource").stdout
        assert f'container_memory_working_set_bytes{{container="ticker",namespace="{ns}"' in metrics
        assert "\nresource_scrape_error 0\n" in metrics

        # the node's /var/log, and the journal query refused until enabled
        listing = kubectl("get", "--raw", f"{raw}/logs/").stdout
        assert "<pre>" in listing
        assert all(f'href="{n}' in listing for n in os.listdir("/var/log")[:5])
        done = kubectl("get", "--raw", f"{raw}/logs/?query=containerd", check=False)
        assert done.returncode != 0
        assert "enableSystemLogQuery" in done.stderr


CHATTY = (
    "awk 'BEGIN { for (i = 1; i <= 1000000; i++) {"
    ' printf "%08d %090s\\n", i, "x"; if (i % 30000 == 0) system("sleep 1") } }\';'
    " exec sleep 3600"
)


def read_all_logs(control_plane: ControlPlane, ns: str) -> list[int]:
    done = control_plane.kubectl("logs", "-n", ns, "chatty")
    return [int(line[:8]) for line in done.stdout.splitlines()]


async def test_kubectl_logs_of_a_100mb_log_rotated_at_10mib_keeping_5_files(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane)
        settings = yaml.safe_load(node.config.read_text())
        settings["kubelet"]["containerLogMonitorInterval"] = "3s"  # the kubelet's minimum
        node.config.write_text(yaml.safe_dump(settings))
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        body = pod_body("chatty", ns, node.name, {"app": CHATTY})
        control_plane.kubectl("create", "-f", "-", input=json.dumps(body))

        def last_line() -> bool:
            done = control_plane.kubectl("logs", "-n", ns, "chatty", "--tail=1", check=False)
            return done.stdout.startswith("01000000 ")

        await until("the millionth line", last_line, within=150, every=2, explain=node.log_tail)
        pods_dir = Path(yaml.safe_load(node.config.read_text())["kubelet"]["podLogsDir"])

        def files() -> list[str]:
            """The log files, without a ``.gz.tmp`` a compression in progress is writing."""
            return sorted(p.name for p in pods_dir.rglob("0.log*") if not p.name.endswith(".tmp"))

        # the last check may still rotate once (compressing the older file first: the files
        # counted mid-way were 4 and a .gz.tmp); then the directory holds 5 files
        await until("5 log files", lambda: len(files()) == 5, within=15, every=1, explain=files)
        names = files()
        assert names[0] == "0.log"
        assert [n.endswith(".gz") for n in names[1:]] == [True, True, False, False], names
        numbers = await asyncio.to_thread(read_all_logs, control_plane, ns)
        assert numbers[-1] == 1_000_000
        assert numbers == list(range(numbers[0], 1_000_001))
        assert numbers[0] > 1

"""The kubelet's metrics on a nodeagent node's ``/metrics``, read as a user reads them (through
the apiserver's node proxy), after the real agent ran pods on the real containerd: a pod whose
init container completes and whose container fails, and one refused at admission; the CRI
calls that ran a pod, by the kubelet's ``operation_type``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, running, sleeper_pod, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until
from prometheus_client.parser import text_string_to_metric_families
from test_kubelet_api import configure, free_port

from nodeagent import cgroups

pytestmark = pytest.mark.integration


def pod(name: str, namespace: str, node: str, **spec: Any) -> dict[str, Any]:
    def box(name: str, script: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": BUSYBOX_IMAGE,
            "imagePullPolicy": "IfNotPresent",
            "command": ["sh", "-c", script],
        }

    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "initContainers": [box("setup", "true")],
            "containers": [box("app", "exit 3")],
            **spec,
        },
    }


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(
    all_: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float | None:
    return all_.get((name, frozenset(labels.items())))


@contextlib.asynccontextmanager
async def ready_node(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> AsyncIterator[AgentNode]:
    """The agent as a new Node, Ready, its API reachable through the apiserver's node proxy."""
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure(node, control_plane, free_port(), free_port())
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        yield node


async def test_the_node_serves_the_kubelets_pod_and_container_metrics(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with ready_node(control_plane, containerd, tmp_path) as node:
        ns, kubectl = node.namespace, control_plane.kubectl
        kubectl("create", "-f", "-", input=json.dumps(pod("job", ns, node.name)))
        huge = pod("huge", ns, node.name)
        huge["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1000"}}
        kubectl("create", "-f", "-", input=json.dumps(huge))

        def phases() -> dict[str, str]:
            items = control_plane.get_json("pods", "-n", ns)["items"]
            return {p["metadata"]["name"]: p.get("status", {}).get("phase", "") for p in items}

        await until(
            "both pods Failed",
            lambda: phases() == {"job": "Failed", "huge": "Failed"},
            within=90,
            every=0.5,
            explain=phases,
        )
        raw = f"/api/v1/nodes/{node.name}/proxy/metrics"

        def scraped() -> dict[tuple[str, frozenset[tuple[str, str]]], float] | None:
            found = samples(kubectl("get", "--raw", raw).stdout)
            ended = value(
                found,
                "kubelet_terminated_containers_total",
                container_type="container",
                exit_code="3",
                reason="Error",
            )
            return found if ended else None

        found = await until("the termination counted", scraped, within=30, every=1)
        assert value(found, "kubelet_node_name", node=node.name) == 1
        v2 = cgroups.host_cgroup_fs() == "cgroup2"
        assert value(found, "kubelet_cgroup_version") == (2 if v2 else 1)
        assert (
            value(
                found,
                "kubelet_terminated_containers_total",
                container_type="init_container",
                exit_code="0",
                reason="Completed",
            )
            == 1
        )
        assert value(found, "kubelet_started_pods_total") == 1  # the refused one got no sandbox
        assert (
            value(found, "kubelet_started_containers_total", container_type="init_container") == 1
        )
        assert value(found, "kubelet_started_containers_total", container_type="container") == 1
        assert value(found, "kubelet_admission_rejections_total", reason="OutOfcpu") == 1
        assert (
            value(found, "kubelet_run_podsandbox_duration_seconds_count", runtime_handler="") == 1
        )
        assert value(found, "kubelet_desired_pods", static="") == 2

        def inactive() -> bool:  # once its sandbox is stopped the failed pod holds nothing
            now = samples(kubectl("get", "--raw", raw).stdout)
            return value(now, "kubelet_active_pods", static="") == 0

        await until("no active pod", inactive, within=30, every=1)
        assert (value(found, "kubelet_pleg_relist_duration_seconds_count") or 0) > 0
        assert value(found, "kubelet_running_pods") is not None


async def test_the_node_counts_its_cri_calls_by_the_kubelets_operation_type(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with ready_node(control_plane, containerd, tmp_path) as node:
        body = sleeper_pod("sleeper", node.namespace, node.name)
        control_plane.kubectl("create", "-f", "-", input=json.dumps(body))
        await running(control_plane, node, "sleeper")
        raw = f"/api/v1/nodes/{node.name}/proxy/metrics"
        found = samples(control_plane.kubectl("get", "--raw", raw).stdout)
        total = "kubelet_runtime_operations_total"
        assert (value(found, total, operation_type="run_podsandbox") or 0) >= 1
        assert (value(found, total, operation_type="start_container") or 0) >= 1
        listed = value(
            found,
            "kubelet_runtime_operations_duration_seconds_count",
            operation_type="list_containers",
        )
        assert (listed or 0) > 0

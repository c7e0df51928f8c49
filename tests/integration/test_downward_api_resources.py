"""Container resources through the downward API on a real node, as the e2e specs
"Downward API should provide container's limits.cpu/memory and requests.cpu/memory as env
vars" and "... default limits.cpu/memory from node allocatable" read them: the container
prints its environment and its downwardAPI volume files, and ``kubectl logs`` shows them.

- limits 1250m / 64Mi, requests 250m / 32Mi: ``CPU_LIMIT=2`` (rounded up to whole cores),
  ``MEMORY_LIMIT=67108864``, ``CPU_REQUEST=1``, ``MEMORY_REQUEST=33554432``; divisors 1m and
  1Mi give ``1250`` and ``64``; the volume's files say the same as the variables;
- no limits, or limits of zero: ``limits.cpu`` / ``limits.memory`` are the node's
  allocatable, as the kubelet defaults them (cpu rounded up, memory in bytes), in the
  variables and the files alike.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, configure_kubelet, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

from nodeagent.quantity import milli_value, value

pytestmark = pytest.mark.integration

# name -> (resource, divisor or None)
FIELDS: dict[str, tuple[str, str | None]] = {
    "CPU_LIMIT": ("limits.cpu", None),
    "MEMORY_LIMIT": ("limits.memory", None),
    "CPU_REQUEST": ("requests.cpu", None),
    "MEMORY_REQUEST": ("requests.memory", None),
    "CPU_LIMIT_MILLI": ("limits.cpu", "1m"),
    "MEMORY_LIMIT_MI": ("limits.memory", "1Mi"),
}
PRINT = (
    "env | grep -E '^(CPU|MEMORY)_' | sort; "
    "for f in /etc/podinfo/*; do echo file:${f##*/}=$(cat $f); done"
)


def ref(resource: str, divisor: str | None) -> dict[str, Any]:
    selector: dict[str, Any] = {"resource": resource, "containerName": "dapi-container"}
    if divisor is not None:
        selector["divisor"] = divisor
    return selector


def pod_body(node: AgentNode, name: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": node.namespace},
        "spec": {
            "nodeName": node.name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "dapi-container",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", PRINT],
                    "resources": resources,
                    # as the e2e spec writes them: no containerName, no divisor
                    "env": [
                        {"name": env, "valueFrom": {"resourceFieldRef": {"resource": resource}}}
                        if divisor is None
                        else {
                            "name": env,
                            "valueFrom": {"resourceFieldRef": ref(resource, divisor)},
                        }
                        for env, (resource, divisor) in FIELDS.items()
                    ],
                    "volumeMounts": [{"name": "podinfo", "mountPath": "/etc/podinfo"}],
                }
            ],
            "volumes": [
                {
                    "name": "podinfo",
                    "downwardAPI": {
                        "items": [
                            {"path": env, "resourceFieldRef": ref(resource, divisor)}
                            for env, (resource, divisor) in FIELDS.items()
                        ]
                    },
                }
            ],
        },
    }


def expected_lines(values: dict[str, int]) -> list[str]:
    env = [f"{k}={v}" for k, v in sorted(values.items())]
    files = [f"file:{k}={v}" for k, v in sorted(values.items())]
    return env + files


async def test_resource_fields_as_env_vars_and_volume_files(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure_kubelet(node, control_plane)
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        limited = {
            "requests": {"cpu": "250m", "memory": "32Mi"},
            "limits": {"cpu": "1250m", "memory": "64Mi"},
        }
        zero = {"limits": {"cpu": "0", "memory": "0"}}
        for name, resources in (("limited", limited), ("unlimited", {}), ("zero", zero)):
            code, answer = control_plane.api_request(
                "POST", f"/api/v1/namespaces/{ns}/pods", body=pod_body(node, name, resources)
            )
            assert code == 201, (code, answer)

        def phase(name: str) -> str:
            pod = api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/{name}") or {}
            return str((pod.get("status") or {}).get("phase", ""))

        for name in ("limited", "unlimited", "zero"):
            await until(
                f"{name} done",
                lambda name=name: phase(name) in ("Succeeded", "Failed"),
                within=90,
                explain=node.log_tail,
            )
            assert phase(name) == "Succeeded", node.log_tail()

        logs = control_plane.kubectl("logs", "-n", ns, "limited").stdout.splitlines()
        assert logs == expected_lines(
            {
                "CPU_LIMIT": 2,
                "MEMORY_LIMIT": 67108864,
                "CPU_REQUEST": 1,
                "MEMORY_REQUEST": 33554432,
                "CPU_LIMIT_MILLI": 1250,
                "MEMORY_LIMIT_MI": 64,
            }
        )

        allocatable = control_plane.get_json("node", node.name)["status"]["allocatable"]
        cpu_milli, memory = milli_value(allocatable["cpu"]), value(allocatable["memory"])
        defaulted = expected_lines(
            {
                "CPU_LIMIT": math.ceil(cpu_milli / 1000),
                "MEMORY_LIMIT": memory,
                "CPU_REQUEST": 0,
                "MEMORY_REQUEST": 0,
                "CPU_LIMIT_MILLI": cpu_milli,
                "MEMORY_LIMIT_MI": math.ceil(memory / 2**20),
            }
        )
        for name in ("unlimited", "zero"):
            assert control_plane.kubectl("logs", "-n", ns, name).stdout.splitlines() == defaulted

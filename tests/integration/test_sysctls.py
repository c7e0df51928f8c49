"""Pod sysctls on a real node: the kubelet's sysctl admission and the sysctls that
reach the sandbox.

The whole agent (``nodeagent run``) on the real control plane and containerd, with
``allowedUnsafeSysctls: ["kernel.shm*"]``:

- a pod asking for ``kernel.msgmax`` (unsafe, not allowed here: the e2e spec "should not
  launch unsafe, but not explicitly enabled sysctls on the node") is Failed with reason
  ``SysctlForbidden``, the kubelet's message and a Warning Event, and nothing of it reaches
  the runtime;
- so is a pod asking for ``net.core.somaxconn`` (namespaced, but not safe, not allowed);
  (a ``hostNetwork`` pod with a net sysctl, which the kubelet refuses too, never gets here:
  the API server refuses it first; the unit tests cover that rule);
- a pod with a safe sysctl, an allowed unsafe one and one written with slashes runs, and
  reads its values back from /proc/sys.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from agentproc import (
    AgentNode,
    agent_node,
    api_get,
    configure_kubelet,
    runtime_view,
    wait_ready,
)
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until

from nodeagent.kuberuntime.labels import POD_NAME

pytestmark = pytest.mark.integration

READ_BACK = (
    "cat /proc/sys/kernel/shm_rmid_forced /proc/sys/kernel/shmmni "
    "/proc/sys/net/ipv4/ip_unprivileged_port_start"
)


def pod_body(
    node: AgentNode, name: str, sysctls: dict[str, str], script: str = "true"
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": node.namespace},
        "spec": {
            "nodeName": node.name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"sysctls": [{"name": k, "value": v} for k, v in sysctls.items()]},
            "containers": [
                {
                    "name": "test-container",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                }
            ],
        },
    }


async def test_unsafe_sysctls_are_refused_at_admission_and_allowed_ones_are_set(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        configure_kubelet(node, control_plane, allowedUnsafeSysctls=["kernel.shm*"])
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns = node.namespace
        pods = {
            "forbidden": pod_body(node, "forbidden", {"kernel.msgmax": "10000000000"}),
            "somaxconn": pod_body(node, "somaxconn", {"net.core.somaxconn": "1024"}),
            "allowed": pod_body(
                node,
                "allowed",
                {
                    "kernel.shm_rmid_forced": "1",
                    "kernel.shmmni": "8192",
                    "net/ipv4/ip_unprivileged_port_start": "1000",
                },
                READ_BACK,
            ),
        }
        started = time.monotonic()
        for body in pods.values():
            code, answer = control_plane.api_request(
                "POST", f"/api/v1/namespaces/{ns}/pods", body=body
            )
            assert code == 201, (code, answer)

        def status(name: str) -> dict[str, Any]:
            pod = api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/{name}") or {}
            return dict(pod.get("status") or {})

        def events() -> list[tuple[str, str, str, str]]:
            listed = api_get(control_plane, f"/api/v1/namespaces/{ns}/events") or {}
            return [
                (e["involvedObject"]["name"], e["type"], e["reason"], e["message"])
                for e in listed.get("items", [])
            ]

        def explain() -> Any:
            return ({n: status(n) for n in pods}, events(), node.log_tail(2000))

        expected = {
            "forbidden": 'forbidden sysctl: "kernel.msgmax" not allowlisted',
            "somaxconn": 'forbidden sysctl: "net.core.somaxconn" not allowlisted',
        }
        for name, message in expected.items():
            final = await until(
                f"{name} Failed",
                lambda name=name: status(name).get("phase") == "Failed" and status(name),
                within=30,
                explain=explain,
            )
            assert final["reason"] == "SysctlForbidden", final
            assert final["message"] == f"Pod was rejected: {message}", final
            assert not final.get("containerStatuses"), final
            await until(
                f"the Event of {name}",
                lambda name=name, message=message: (
                    (name, "Warning", "SysctlForbidden", message) in events()
                ),
                within=30,
                explain=explain,
            )
        print(f"sysctl refusals seen in the API {time.monotonic() - started:.2f} s after create")

        done = await until(
            "allowed Succeeded",
            lambda: status("allowed").get("phase") in ("Succeeded", "Failed") and status("allowed"),
            within=90,
            explain=explain,
        )
        assert done["phase"] == "Succeeded", explain()
        logs = control_plane.kubectl("logs", "-n", ns, "allowed").stdout
        assert logs == "1\n8192\n1000\n"

        view = await runtime_view(node.endpoint, ns)
        ran = {s.labels.get(POD_NAME) for s in view.sandboxes}
        assert ran == {"allowed"}, ran

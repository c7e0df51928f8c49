"""Containers' environment from ConfigMaps and Secrets, on the real control plane and containerd.

One pod reads a ConfigMap and a Secret through ``env`` (``configMapKeyRef``, ``secretKeyRef``)
and ``envFrom`` (with a prefix), and mounts the same ConfigMap as a volume; what the container
sees is read from inside it (CRI ExecSync, as ``kubectl exec`` runs a command). The agent reads
the objects through one ConfigMap and one Secret manager shared by the environment and the
volumes. Then the ConfigMap changes and a second pod is created at once: a new pod reads its
objects fresh (as the kubelet registers a new pod), so its environment and its volume both have
the new value, without waiting for the object cache's one-minute TTL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from agentproc import (
    agent_node,
    container_id,
    create_objects,
    run_in,
    running,
    sleeper_pod,
    wait_ready,
)
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv

pytestmark = pytest.mark.integration


def env_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    pod = sleeper_pod(name, namespace, node)
    [app] = pod["spec"]["containers"]
    app["env"] = [
        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
        {"name": "PW", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "pw"}}},
    ]
    app["envFrom"] = [{"prefix": "CFG_", "configMapRef": {"name": "cfg"}}]
    app["volumeMounts"] = [{"name": "cfg", "mountPath": "/etc/cfg"}]
    pod["spec"]["volumes"] = [{"name": "cfg", "configMap": {"name": "cfg"}}]
    return pod


async def test_env_from_config_maps_and_secrets_and_a_new_pod_reads_them_fresh(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        ns = node.namespace
        create_objects(
            control_plane,
            ns,
            ("configmaps", {"metadata": {"name": "cfg"}, "data": {"mode": "fast"}}),
            ("secrets", {"metadata": {"name": "sec"}, "stringData": {"pw": "hunter2"}}),
        )
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)

        async def seen_by(pod: str) -> tuple[dict[str, str], str]:
            """(the container's environment, its /etc/cfg/mode)."""
            create_objects(control_plane, ns, ("pods", env_pod(pod, ns, node.name)))
            await running(control_plane, node, pod)
            container = await container_id(containerd.endpoint, node, pod)
            code, out, err = await run_in(containerd.endpoint, container, "env")
            assert code == 0, (out, err)
            env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            code, mode, err = await run_in(containerd.endpoint, container, "cat /etc/cfg/mode")
            assert code == 0, (mode, err)
            return env, mode

        env, mode = await seen_by("first")
        assert (env["MODE"], env["PW"], env["CFG_mode"], mode) == (
            "fast",
            "hunter2",
            "fast",
            "fast",
        )

        code, answer = control_plane.api_request(
            "PATCH", f"/api/v1/namespaces/{ns}/configmaps/cfg", body={"data": {"mode": "slow"}}
        )
        assert code == 200, (code, answer)
        env, mode = await seen_by("second")
        assert (env["MODE"], env["CFG_mode"], mode) == ("slow", "slow", "slow")

"""The kubelet-managed /etc/hosts, seen from inside containers.

The whole agent (``nodeagent run``) on the real control plane and containerd; every file is
read from inside a container with CRI ExecSync, as ``kubectl exec`` runs a command:

- a pod with ``hostname``, ``subdomain`` and ``hostAliases``: its app container's /etc/hosts is
  byte for byte the kubelet's (header, localhost lines, ``<podIP>\\t<fqdn>\\t<hostname>``, the
  aliases); its init container found the managed file too (it refuses to finish otherwise); a
  container that mounts its own file at /etc/hosts keeps it;
- a ``hostNetwork`` pod with ``hostAliases``: the node's /etc/hosts under the host-network
  header, then the aliases;
- a pod with ``hostnameOverride``: ``hostname`` and ``hostname -f`` both print the override.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import AgentNode, agent_node, running, runtime_view, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE

from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_NAME

pytestmark = pytest.mark.integration

LOCALHOST = (
    "127.0.0.1\tlocalhost\n"
    "::1\tlocalhost ip6-localhost ip6-loopback\n"
    "fe00::0\tip6-localnet\n"
    "fe00::0\tip6-mcastprefix\n"
    "fe00::1\tip6-allnodes\n"
    "fe00::2\tip6-allrouters\n"
)
ALIASES = [
    {"ip": "123.45.67.89", "hostnames": ["foo.local", "bar.local"]},
    {"ip": "10.9.8.7", "hostnames": ["baz"]},
]
ALIAS_LINES = (
    "\n# Entries added by HostAliases.\n123.45.67.89\tfoo.local\tbar.local\n10.9.8.7\tbaz\n"
)


def sleeper(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["sleep", "3600"],
        **extra,
    }


def pod_body(node: AgentNode, name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": node.namespace},
        "spec": {
            "nodeName": node.name,
            "terminationGracePeriodSeconds": 1,
            "containers": [sleeper("app")],
            **spec,
        },
    }


def create(control_plane: ControlPlane, node: AgentNode, body: dict[str, Any]) -> None:
    code, answer = control_plane.api_request(
        "POST", f"/api/v1/namespaces/{node.namespace}/pods", body=body
    )
    assert code == 201, (code, answer)


async def run_in(node: AgentNode, pod: str, container: str, script: str) -> str:
    """``sh -c script`` in the pod's running container (as ``kubectl exec``): its stdout."""
    view = await runtime_view(node.endpoint, node.namespace)
    [found] = [
        c.id
        for c in view.containers
        if c.labels.get(POD_NAME) == pod
        and c.labels.get(CONTAINER_NAME) == container
        and c.state == cri.CONTAINER_RUNNING
    ]
    async with CriClient.open(node.endpoint) as client:
        done = await client.exec_sync(found, ["sh", "-c", script], 20)
    assert done.exit_code == 0, (done.stdout, done.stderr)
    return done.stdout.decode()


async def test_managed_etc_hosts_host_network_and_hostname_override(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    own_hosts = tmp_path / "own-hosts"
    own_hosts.write_text("127.0.0.1 mine\n")
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        config = yaml.safe_load(node.config.read_text())
        config["kubelet"]["clusterDomain"] = "cluster.local"  # the default is none
        node.config.write_text(yaml.safe_dump(config))
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        check_init = "grep -q '^# Kubernetes-managed hosts file.$' /etc/hosts"
        create(
            control_plane,
            node,
            pod_body(
                node,
                "named",
                hostname="web-0",
                subdomain="web",
                hostAliases=ALIASES,
                initContainers=[
                    {
                        "name": "init",
                        "image": BUSYBOX_IMAGE,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sh", "-c", check_init],
                    }
                ],
                containers=[
                    sleeper("app"),
                    sleeper("own", volumeMounts=[{"name": "own-hosts", "mountPath": "/etc/hosts"}]),
                ],
                volumes=[
                    {"name": "own-hosts", "hostPath": {"path": str(own_hosts), "type": "File"}}
                ],
            ),
        )
        create(
            control_plane,
            node,
            pod_body(node, "hostnet", hostNetwork=True, hostAliases=ALIASES[:1]),
        )
        create(
            control_plane,
            node,
            pod_body(
                node, "override", hostname="ignored", hostnameOverride="override.example.host"
            ),
        )

        named = await running(control_plane, node, "named")
        ips = [entry["ip"] for entry in named["status"]["podIPs"]]
        assert ips, named["status"]
        expected = (
            "# Kubernetes-managed hosts file.\n"
            + LOCALHOST
            + "".join(f"{ip}\tweb-0.web.{node.namespace}.svc.cluster.local\tweb-0\n" for ip in ips)
            + ALIAS_LINES
        )
        assert await run_in(node, "named", "app", "cat /etc/hosts") == expected
        assert await run_in(node, "named", "own", "cat /etc/hosts") == "127.0.0.1 mine\n"
        assert await run_in(node, "named", "app", "hostname") == "web-0\n"

        await running(control_plane, node, "hostnet")
        node_hosts = await asyncio.to_thread(Path("/etc/hosts").read_text)
        assert await run_in(node, "hostnet", "app", "cat /etc/hosts") == (
            "# Kubernetes-managed hosts file (host network).\n"
            + node_hosts
            + "\n# Entries added by HostAliases.\n123.45.67.89\tfoo.local\tbar.local\n"
        )

        await running(control_plane, node, "override")
        names = await run_in(node, "override", "app", 'echo "$(hostname);$(hostname -f);"')
        assert names == "override.example.host;override.example.host;\n"

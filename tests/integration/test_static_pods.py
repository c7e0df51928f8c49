"""A static pod runs before the API server is reachable and gets its mirror pod.

`nodeagent run` as a process, with the test containerd as its runtime, a manifest directory
re-read every second, and a kubeconfig (client certificate of the node) whose server is a
local TCP forwarder that refuses connections at first. The static pod's container must run in
containerd while nothing reaches the API server; then the forwarder opens to the real
kube-apiserver (Node authorizer and NodeRestriction on): the Node registers and the mirror pod
appears with the kubelet's annotations, the Node as controller owner, the built-in priority
accepted by the Priority admission plugin, and status Running with the container's ID. A
mirror pod deleted by an admin comes back while the container keeps running. Removing the
manifest stops the container and deletes the mirror pod. Everything the test creates —
process, forwarder, pods in containerd, cgroups, log links, API objects — is removed even on
failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import agent_process
from harness import kubeconfig
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE

from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_NAME, POD_NAMESPACE, POD_UID

pytestmark = pytest.mark.integration

NAMESPACE = "kube-system"
CGROUP_FS = Path("/sys/fs/cgroup")
CONTAINER_LOGS = Path("/var/log/containers")


class Forwarder:
    """127.0.0.1:<port> → the API server. Until :meth:`open`, the port is bound but not
    listening, so connections are refused (ECONNREFUSED), as for an API server that is down."""

    def __init__(self, target: str) -> None:
        host, _, port = target.removeprefix("https://").rpartition(":")
        self._target = (host, int(port))
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    async def open(self) -> None:
        self._sock.listen(64)
        self._sock.setblocking(False)
        self._server = await asyncio.start_server(self._serve, sock=self._sock)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        self._writers.add(up_writer)
        pumps = [
            asyncio.create_task(_pump(reader, up_writer)),
            asyncio.create_task(_pump(up_reader, writer)),
        ]
        self._tasks.update(pumps)
        await asyncio.gather(*pumps, return_exceptions=True)
        self._tasks.difference_update(pumps)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in self._writers:
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        self._sock.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {
            "priorityClassName": "system-node-critical",
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        "sh",
                        "-c",
                        'trap "exit 0" TERM; echo static; while true; do sleep 1; done',
                    ],
                }
            ],
        },
    }


async def until(
    what: str,
    check: Callable[[], Any],
    *,
    within: float,
    every: float = 0.25,
    explain: Callable[[], Any] | None = None,
    alive: asyncio.subprocess.Process | None = None,
) -> Any:
    deadline = time.monotonic() + within
    while True:
        if alive is not None and alive.returncode is not None:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"the agent exited ({alive.returncode}) before {what}{detail}")
        result = check()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out after {within:g}s waiting for {what}{detail}")
        await asyncio.sleep(every)


async def kubectl_json(control_plane: ControlPlane, *args: str) -> Any:
    done = await asyncio.to_thread(control_plane.kubectl, "get", "-o", "json", *args, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


async def containers(endpoint: str, full_name: str) -> list[cri.Container]:
    """The containers of the static pod named ``full_name`` (``<name>-<node>``)."""
    async with CriClient.open(endpoint) as client:
        flt = cri.ContainerFilter(label_selector={POD_NAME: full_name, POD_NAMESPACE: NAMESPACE})
        return await client.list_containers(flt)


async def running(endpoint: str, full_name: str) -> list[cri.Container]:
    return [c for c in await containers(endpoint, full_name) if c.state == cri.CONTAINER_RUNNING]


async def remove_sandboxes(endpoint: str, full_name: str) -> None:
    async with CriClient.open(endpoint) as client:
        flt = cri.PodSandboxFilter(label_selector={POD_NAME: full_name, POD_NAMESPACE: NAMESPACE})
        for sandbox in await client.list_pod_sandbox(flt):
            with contextlib.suppress(Exception):
                await client.stop_pod_sandbox(sandbox.id)
                await client.remove_pod_sandbox(sandbox.id)


def remove_cgroup_tree(name: str, *, within: float = 20.0) -> list[str]:
    """rmdir the cgroups under ``/<name>`` in every hierarchy, deepest first, retrying busy
    ones for ``within`` seconds in all; returns those that could not be removed."""
    deadline = time.monotonic() + within
    left = []
    for top in CGROUP_FS.glob(f"*/{name}"):
        dirs = sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
        for path in [*dirs, top]:
            while True:
                try:
                    os.rmdir(path)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        left.append(str(path))
                        break
                    time.sleep(0.1)
    return left


def write_config(
    tmp_path: Path, *, node: str, kubeconfig_path: Path, manifests: Path, endpoint: str
) -> Path:
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": str(kubeconfig_path),
                    "hostnameOverride": node,
                    "rootDir": str(tmp_path / "root"),
                },
                "kubelet": {
                    "containerRuntimeEndpoint": endpoint,
                    "staticPodPath": str(manifests),
                    "fileCheckFrequency": "1s",
                    "cgroupRoot": f"/{node}",
                    "podLogsDir": str(tmp_path / "pods"),
                    "resolvConf": "",
                    "failCgroupV1": False,  # the test host is cgroup v1
                },
                "proxy": {"enabled": False},  # the host's root netns is not this test's
            }
        )
    )
    return config


def remove_host_leftovers(full_name: str, node: str) -> list[str]:
    """The container log links and the cgroups; returns the cgroups left behind."""
    for link in CONTAINER_LOGS.glob(f"{full_name}_{NAMESPACE}_*"):
        link.unlink(missing_ok=True)
    return remove_cgroup_tree(node)


async def clean_up(
    control_plane: ControlPlane, endpoint: str, node: str, pod_name: str
) -> list[str]:
    """Remove what the test made; returns the cgroups that could not be removed."""
    full_name = f"{pod_name}-{node}"
    await remove_sandboxes(endpoint, full_name)
    for kind, name, *ns in (
        ("pod", full_name, "-n", NAMESPACE),
        ("lease", node, "-n", "kube-node-lease"),
        ("node", node),
    ):
        await asyncio.to_thread(
            control_plane.kubectl,
            "delete", kind, name, *ns, "--ignore-not-found", "--grace-period=0", "--force",
            check=False,
        )  # fmt: skip
    return await asyncio.to_thread(remove_host_leftovers, full_name, node)


@dataclass
class Seen:
    container: cri.Container
    mirror: dict[str, Any]
    node: dict[str, Any]
    recreated: dict[str, Any]
    timings: dict[str, float] = field(default_factory=dict)


async def test_a_static_pod_runs_without_the_api_server_and_gets_its_mirror_pod(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    node = f"it-static-{secrets.token_hex(3)}"
    pod_name = "static-web"
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "web.yaml").write_text(yaml.safe_dump(manifest(pod_name)))
    (manifests / ".web.yaml.swp").write_text("not a manifest: ignored")
    forwarder = Forwarder(control_plane.server)
    kubeconfig_path = kubeconfig.write(
        tmp_path / "kubeconfig",
        kubeconfig.render(
            server=forwarder.url,
            ca=control_plane.ca_path,
            user=f"system:node:{node}",
            client=control_plane.pki.node_client_cert(node),
        ),
    )
    config = write_config(
        tmp_path,
        node=node,
        kubeconfig_path=kubeconfig_path,
        manifests=manifests,
        endpoint=containerd.endpoint,
    )
    log = tmp_path / "nodeagent.log"
    try:
        async with agent_process(config, log) as proc:
            seen = await _scenario(
                control_plane, containerd.endpoint, forwarder, node, pod_name, manifests, log, proc
            )
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 20)
    finally:
        await forwarder.close()
        left = await clean_up(control_plane, containerd.endpoint, node, pod_name)

    print(", ".join(f"{k} {v:.1f}s" for k, v in seen.timings.items()))
    assert code == 0, _tail(log)
    assert left == []
    meta = seen.mirror["metadata"]
    static_uid = meta["annotations"]["kubernetes.io/config.hash"]
    assert re.fullmatch(r"[0-9a-f]{32}", static_uid)
    assert meta["annotations"]["kubernetes.io/config.mirror"] == static_uid
    assert meta["annotations"]["kubernetes.io/config.source"] == "file"
    seen_at = meta["annotations"]["kubernetes.io/config.seen"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", seen_at)  # RFC3339NanoFixed
    assert meta["uid"] != static_uid
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": node,
            "uid": seen.node["metadata"]["uid"],
            "controller": True,
        }
    ]
    spec = seen.mirror["spec"]
    assert spec["nodeName"] == node
    assert spec["priority"] == 2000001000  # accepted by the Priority admission plugin
    assert {"operator": "Exists", "effect": "NoExecute"} in spec["tolerations"]
    assert seen.container.labels[POD_UID] == static_uid
    [app] = seen.mirror["status"]["containerStatuses"]
    assert app["containerID"] == f"containerd://{seen.container.id}"
    assert app["ready"] is True and "running" in app["state"]
    [again] = seen.recreated["status"]["containerStatuses"]
    assert again["containerID"] == f"containerd://{seen.container.id}"


async def _scenario(  # noqa: PLR0917 (the test's own pieces)
    control_plane: ControlPlane,
    endpoint: str,
    forwarder: Forwarder,
    node: str,
    pod_name: str,
    manifests: Path,
    log: Path,
    proc: asyncio.subprocess.Process,
) -> Seen:
    mirror_name = f"{pod_name}-{node}"
    timings: dict[str, float] = {}
    start = time.monotonic()
    [ctr] = await until(
        "the static pod's container running in containerd",
        lambda: running(endpoint, mirror_name),
        within=60,
        explain=lambda: _tail(log),
        alive=proc,
    )
    timings["container running after start, API unreachable"] = time.monotonic() - start
    assert proc.returncode is None, _tail(log)
    assert forwarder.accepted == 0  # nothing has reached the API server
    assert await kubectl_json(control_plane, "node", node) is None

    await forwarder.open()
    start = time.monotonic()
    mirror = await until(
        "the mirror pod Running",
        lambda: _running_mirror(control_plane, mirror_name),
        within=90,
        every=0.5,
        explain=lambda: _tail(log),
        alive=proc,
    )
    timings["mirror Running after the API became reachable"] = time.monotonic() - start
    node_obj = await kubectl_json(control_plane, "node", node)

    await asyncio.to_thread(
        control_plane.kubectl, "delete", "pod", mirror_name, "-n", NAMESPACE, "--wait=false"
    )
    start = time.monotonic()
    recreated = await until(
        "the mirror pod recreated",
        lambda: _running_mirror(control_plane, mirror_name, not_uid=mirror["metadata"]["uid"]),
        within=60,
        every=0.5,
        explain=lambda: _tail(log),
        alive=proc,
    )
    timings["mirror recreated after kubectl delete"] = time.monotonic() - start
    assert [c.id for c in await running(endpoint, mirror_name)] == [ctr.id]

    (manifests / "web.yaml").unlink()
    start = time.monotonic()
    await until(
        "the container gone from containerd",
        lambda: _none(containers(endpoint, mirror_name)),
        within=60,
        explain=lambda: _tail(log),
        alive=proc,
    )
    timings["container gone after the manifest was removed"] = time.monotonic() - start
    await until(
        "the mirror pod deleted",
        lambda: _none(kubectl_json(control_plane, "pod", mirror_name, "-n", NAMESPACE)),
        within=60,
        every=0.5,
        explain=lambda: _tail(log),
        alive=proc,
    )
    timings["mirror gone after the manifest was removed"] = time.monotonic() - start
    return Seen(ctr, mirror, node_obj, recreated, timings)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-4000:] if log.exists() else ""


async def _running_mirror(
    control_plane: ControlPlane, name: str, *, not_uid: str = ""
) -> dict[str, Any] | None:
    pod = await kubectl_json(control_plane, "pod", name, "-n", NAMESPACE)
    if not pod or pod["metadata"]["uid"] == not_uid or pod["metadata"].get("deletionTimestamp"):
        return None
    if pod.get("status", {}).get("phase") != "Running":
        return None
    statuses = pod["status"].get("containerStatuses") or []
    return pod if statuses and statuses[0].get("containerID") else None


async def _none(result: Any) -> bool:
    return not await result

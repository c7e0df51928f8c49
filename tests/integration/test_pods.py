"""Pods on the real containerd: the pod managers, wired as ``pods.managers`` wires them for
``agent.build``, against the private containerd of the ``containerd`` fixture.

The API side is the in-memory ``FakeApiServer`` on the real clock: pods are created in it as
the scheduler would bind them, and their status is read back from it. (The whole cluster —
real control plane, scheduler, a Deployment — is ``test_deployment_pods_run_on_the_node``.)
Every pod cgroup lives under a per-test cgroup root that is removed at the end.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import (
    NODE,
    Node,
    phase,
    remove_cgroup_tree,
    running_node,
    status_of,
    until,
)

from nodeagent.apiserver import PODS
from nodeagent.clock import RealClock
from nodeagent.config import Config
from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings
from nodeagent.pods.managers import PodManagers, pod_managers
from nodeagent.status import GracePeriodZeroDeleter
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

CRI_LINE = re.compile(r"^\S+ (stdout|stderr) [FP] (.*)$")


@pytest.fixture
async def node(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Node]:
    async with running_node(containerd, tmp_path) as running:
        yield running


def log_lines(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [m.group(2) for line in path.read_text().splitlines() if (m := CRI_LINE.match(line))]


async def test_pod_runs_and_its_container_logs_to_the_pod_log_file(
    node: Node, containerd: RuntimeEnv
) -> None:
    script = "echo hello from $POD_NAME on $NODE_NAME; sleep 3600"
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    uid = node.create(
        "web",
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script], env=env)],
    )
    started = time.monotonic()
    pod = await until(
        "Running", lambda: phase(node.pod("web")) == "Running" and node.pod("web"), within=30
    )
    running_after = time.monotonic() - started

    log = Path(node.settings.pod_logs_dir) / f"default_web_{uid}" / "app" / "0.log"
    await until("the log line", lambda: log_lines(log), within=10)
    assert log_lines(log) == [f"hello from web on {NODE}"]
    [ctr] = await node.runtime_containers(uid)
    link = Path(node.settings.container_logs_dir) / f"web_default_app-{ctr.id}.log"
    assert link.resolve() == log.resolve()

    status = pod["status"]
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network(containerd.pod_subnet)
    app = status_of(pod)
    assert app["containerID"] == f"containerd://{ctr.id}"
    assert app["imageID"].startswith(("localhost/busybox@sha256:", "sha256:"))
    assert app["state"]["running"]["startedAt"].endswith("Z")
    assert running_after < 10, running_after


async def test_crash_loop_under_always_rises_restart_count_with_back_off(node: Node) -> None:
    uid = node.create(
        "crash", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", "exit 1"])]
    )

    def back_off() -> dict[str, Any] | None:
        app = status_of(node.pod("crash"))
        waiting = app.get("state", {}).get("waiting", {})
        return (
            app
            if app.get("restartCount", 0) >= 2 and waiting.get("reason") == "CrashLoopBackOff"
            else None
        )

    app = await until("restartCount 2 and CrashLoopBackOff", back_off, within=40)
    assert app["lastState"]["terminated"]["exitCode"] == 1
    assert app["lastState"]["terminated"]["reason"] == "Error"
    assert re.fullmatch(
        rf"back-off (10|20)s restarting failed container=app pod=crash_default\({uid}\)",
        app["state"]["waiting"]["message"],
    )
    assert phase(node.pod("crash")) == "Running"
    # The gap between the first restart's exit and the second restart is the 10s back-off.
    containers = sorted(await node.runtime_containers(uid), key=lambda c: c.created_at)
    assert len(containers) <= 3  # one dead instance is kept besides the newest two
    async with CriClient.open(node.endpoint) as client:
        by_attempt = {}
        for c in containers:
            s = (await client.container_status(c.id)).status
            by_attempt[s.metadata.attempt] = s
    gap = (by_attempt[2].started_at - by_attempt[1].finished_at) / 1e9
    assert 10 <= gap < 11, gap


async def test_never_and_exit_zero_ends_succeeded_completed(node: Node) -> None:
    node.create(
        "job",
        restart_policy="Never",
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", "echo done"])],
    )
    pod = await until(
        "Succeeded", lambda: phase(node.pod("job")) == "Succeeded" and node.pod("job"), within=30
    )
    terminated = status_of(pod)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    await asyncio.sleep(3)
    assert status_of(node.pod("job"))["restartCount"] == 0


async def test_deletion_gives_sigterm_then_kills_at_the_grace_deadline(node: Node) -> None:
    polite = "trap 'echo got TERM; exit 0' TERM; while true; do sleep 0.2; done"
    stubborn = "trap '' TERM; while true; do sleep 0.2; done"
    uid = node.create(
        "graceful",
        grace=4,
        containers=[
            container("polite", image=BUSYBOX_IMAGE, command=["sh", "-c", polite]),
            container("stubborn", image=BUSYBOX_IMAGE, command=["sh", "-c", stubborn]),
        ],
    )
    await until("Running", lambda: phase(node.pod("graceful")) == "Running", within=30)
    log = Path(node.settings.pod_logs_dir) / f"default_graceful_{uid}" / "polite" / "0.log"

    def delete(obj: dict[str, Any]) -> None:  # what `kubectl delete pod` does: the API marks it
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = 4

    started = time.monotonic()
    node.server.modify(PODS, "graceful", delete, "default")
    await until("the pod deleted from the API", lambda: node.pod("graceful") is None, within=20)
    elapsed = time.monotonic() - started

    assert 4 <= elapsed < 7, elapsed  # the stubborn container held the pod until the deadline
    assert "got TERM" in log_lines(log) or not log.exists()  # the log dir goes with the pod
    await until("containers removed", lambda: _none(node.runtime_containers(uid)), within=10)


async def _none(listing: Any) -> bool:
    return not await listing


async def test_restarted_agent_adopts_running_pods_without_duplicates(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    server = FakeApiServer(clock=RealClock())
    names = [f"adopt-{i}" for i in range(10)]
    async with running_node(containerd, tmp_path, server) as first:
        uids = [
            first.create(
                n, containers=[container("app", image=BUSYBOX_IMAGE, command=["sleep", "3600"])]
            )
            for n in names
        ]
        # The agent stops (is cancelled) while the pods are starting: as soon as the first one
        # reports Running, not after a fixed delay that a fast machine outruns.
        await until(
            "the first pod Running",
            lambda: any(phase(first.pod(n)) == "Running" for n in names),
            within=30,
            every=0.005,
        )
        started = [n for n in names if phase(first.pod(n)) == "Running"]
        assert len(started) < len(names), "all pods started before the stop: nothing tested"
    async with running_node(containerd, tmp_path, server) as second:
        for name in names:
            await until(
                f"{name} Running", lambda n=name: phase(second.pod(n)) == "Running", within=30
            )
        await asyncio.sleep(3)
        for uid in uids:
            containers = await second.runtime_containers(uid)
            running = [c for c in containers if c.state == cri.CONTAINER_RUNNING]
            assert len(running) == 1, containers
            sandboxes = await second.runtime_sandboxes(uid)
            assert [s.state for s in sandboxes].count(cri.SANDBOX_READY) == 1, sandboxes


# --- the whole cluster ------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def cluster_node(
    control_plane: Any,
    containerd: RuntimeEnv,
    tmp_path: Path,
    name: str,
    *,
    pod_events: bool = False,
) -> AsyncIterator[PodManagers]:
    """Registration, Lease, status with the runtime's readiness, and the pod managers: what
    ``agent.build`` runs once the pod managers are wired in. ``pod_events``: the pods' Events
    go to the API through an ``EventRecorder`` (as ``agent.build`` wires it)."""
    from nodeagent.apiserver import NODES, ApiClient, WatchCache
    from nodeagent.certificate.manager import CredentialSettings, CredentialsManager
    from nodeagent.events import EventRecorder
    from nodeagent.kuberuntime import connect
    from nodeagent.nodelease import NodeLeaseController
    from nodeagent.nodestatus.facts import HostFacts
    from nodeagent.nodestatus.manager import NodeStatusManager
    from nodeagent.nodestatus.setters import RuntimeStatus
    from nodeagent.nodestatus.settings import NodeSettings
    from nodeagent.runtimestate import RuntimeState

    clock = RealClock()
    root = tmp_path / "root"
    root.mkdir()
    node = NodeSettings(
        node_name=name,
        hostname=name,
        root_dir=root,
        kubeconfig=control_plane.node_kubeconfig(name),
        rotate_certificates=False,
    )
    api = ApiClient()
    node_cache = WatchCache(
        api=api, resource=NODES, field_selector=f"metadata.name={name}", name="cache:node"
    )
    recorder = EventRecorder(api=api, clock=clock, node_name=name) if pod_events else None
    base = Config()
    config = msgspec.structs.replace(
        base,
        kubelet=msgspec.structs.replace(
            base.kubelet, container_runtime_endpoint=containerd.endpoint
        ),
    )
    pods = pod_managers(
        config,
        api=api,
        clock=clock,
        node_name=name,
        deleter=GracePeriodZeroDeleter(api=api),
        get_node=lambda: node_cache.get(name),
        events=recorder,
        settings=PodRuntimeSettings(
            node_name=name,
            root_dir=str(root),
            pod_logs_dir=str(tmp_path / "pods"),
            container_logs_dir=str(tmp_path / "containers"),
            cgroup_root=f"/{name}",
            memory_capacity=8 * 2**30,
        ),
    )
    states: list[RuntimeState] = []

    def runtime_status() -> RuntimeStatus:
        runtime = states[0]
        pleg = pods.pleg.health()
        errors = (*runtime.errors(), *((pleg,) if pleg and runtime.errors() == () else ()))
        return RuntimeStatus(errors=errors, version=runtime.version())

    status = NodeStatusManager(
        api=api,
        settings=node,
        node_cache=node_cache,
        events=EventRecorder(api=api, clock=clock, node_name=name),
        facts=HostFacts(settings=node, clock=clock, runtime_status=runtime_status),
        on_repeated_failure=api.reset_connections,
    )
    runtime = RuntimeState(endpoint=containerd.endpoint, connect=connect, on_change=status.poke)
    states.append(runtime)
    managers = [
        api,
        NodeLeaseController(api=api, clock=clock, node_name=name, lease_duration_seconds=40),
        CredentialsManager(
            api=api,
            clock=clock,
            settings=CredentialSettings(
                node_name=name,
                kubeconfig=node.kubeconfig,
                bootstrap_kubeconfig=None,
                pki_dir=node.pki_dir,
                rotate_certificates=False,
            ),
        ),
        node_cache,
        runtime,
        status,
        *([recorder] if recorder is not None else []),
        *pods.managers,
    ]
    tasks = [asyncio.create_task(m.run(), name=m.name) for m in managers]
    try:
        yield pods
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception():
                raise AssertionError(f"manager {task.get_name()} crashed") from task.exception()
    finally:
        for task in reversed(tasks):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def deployment(name: str, namespace: str, node: str, replicas: int) -> dict[str, Any]:
    script = 'echo "hello from $(hostname)"; exec sleep 3600'
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "terminationGracePeriodSeconds": 2,
                    "containers": [
                        {
                            "name": "app",
                            "image": BUSYBOX_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", script],
                        }
                    ],
                },
            },
        },
    }


async def remove_namespace_pods(endpoint: str, namespace: str) -> None:
    async with CriClient.open(endpoint) as client:
        for sandbox in await client.list_pod_sandbox():
            if sandbox.metadata.namespace == namespace:
                with contextlib.suppress(Exception):
                    await client.stop_pod_sandbox(sandbox.id)
                    await client.remove_pod_sandbox(sandbox.id)


async def test_deployment_pods_run_on_the_node(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    suffix = secrets.token_hex(3)
    name, namespace = f"it-pods-{suffix}", f"it-pods-{suffix}"
    kubectl = control_plane.kubectl
    kubectl("create", "namespace", namespace)
    try:
        async with cluster_node(control_plane, containerd, tmp_path, name):
            await until(
                "the node Ready",
                lambda: any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (_get(control_plane, "node", name) or {})
                    .get("status", {})
                    .get("conditions", [])
                ),
                within=90,
                every=1,
                explain=lambda: _get(control_plane, "node", name),
            )
            created = time.monotonic()
            control_plane.apply(deployment("web", namespace, name, replicas=3))

            def running() -> list[dict[str, Any]]:
                pods = (_get(control_plane, "pods", "-n", namespace) or {}).get("items", [])
                ok = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
                return ok if len(ok) == 3 else []

            pods = await until("3 pods Running", running, within=90, every=0.5)
            all_running = time.monotonic() - created
            subnet = ipaddress.ip_network(containerd.pod_subnet)
            for pod in pods:
                status = pod["status"]
                assert ipaddress.ip_address(status["podIP"]) in subnet
                app = status["containerStatuses"][0]
                assert app["ready"] is True and app["containerID"].startswith("containerd://")
                uid = pod["metadata"]["uid"]
                log = tmp_path / "pods" / f"{namespace}_{pod['metadata']['name']}_{uid}"
                log = log / "app" / "0.log"
                await until("the log line", lambda log=log: log_lines(log), within=10)
                assert log_lines(log) == [f"hello from {pod['metadata']['name']}"]
            assert len({p["status"]["podIP"] for p in pods}) == 3
            print(f"3 pods Running {all_running:.1f}s after the Deployment was created")

            kubectl("delete", "deployment", "web", "-n", namespace, "--wait=false")
            await until(
                "the pods deleted by the agent",
                lambda: not (_get(control_plane, "pods", "-n", namespace) or {}).get("items"),
                within=60,
                every=1,
                explain=lambda: [
                    (
                        p["metadata"]["name"],
                        p["spec"].get("nodeName"),
                        p["metadata"].get("deletionTimestamp"),
                        p["status"].get("phase"),
                    )
                    for p in (_get(control_plane, "pods", "-n", namespace) or {}).get("items", [])
                ],
            )
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "node", name, "--ignore-not-found", check=False)
        kubectl("delete", "lease", name, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(name) == []


def _get(control_plane: Any, *args: str) -> Any:
    done = control_plane.kubectl("get", "-o", "json", *args, check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None

"""Probes on the real containerd: the pod managers (with the prober manager) wired as
``pods.managers`` wires them, busybox pods, the pod status and Events read back from the
in-memory API (``podnode.running_node`` with a running ``EventRecorder``).

- exec, httpGet (busybox ``httpd``), tcpSocket and grpc readiness probes, each passing and
  failing: the container's ``ready`` flag, the pod's ``Ready``/``ContainersReady`` conditions
  and the ``Unhealthy`` Events with the kubelet's messages. The gRPC health server is a tiny
  ``grpc.aio`` server in this process, on the host; inside the pod ``nc -ll -e`` relays the
  probe's connection from the pod IP to it, so the probe itself goes to the pod IP as the
  kubelet's does;
- a failing liveness probe restarts the container (``restartCount`` grows, ``Killing`` Event),
  with the probe-level ``terminationGracePeriodSeconds`` instead of the pod's 30 s;
- a slow startup probe holds liveness back until it succeeds;
- a sidecar's startup probe holds the app container back until it succeeds, and its failing
  readiness probe keeps its ``ready`` (in ``initContainerStatuses``) and the pod's Ready false;
- the whole agent (proxy on) on the real control plane: a Service's pod that fails its
  readiness probe is a not-ready endpoint in the EndpointSlice the controller writes, and curl
  to the ClusterIP from the node's network namespace only ever reaches the ready pod;
- the whole agent on the real control plane: a deleted pod whose container takes 20 s to
  shut down is not Ready within seconds (its readiness probe still runs), and its failing
  liveness probe is off meanwhile (no Unhealthy Event, no restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import secrets
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from agentproc import agent_node, api_get, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import NODE, Node, running_node, status_of, until

from nodeagent.apiserver import EVENTS
from nodeagent.clock import RealClock
from nodeagent.events import EventRecorder
from nodeagent.prober.grpchealth import decode_response, encode_request
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

HTTPD = "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"


@contextlib.asynccontextmanager
async def node_with_events(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Node]:
    server = FakeApiServer(clock=RealClock())
    recorder = EventRecorder(api=server, clock=RealClock(), node_name=NODE)
    task = asyncio.create_task(recorder.run(), name="events")
    try:
        async with running_node(containerd, tmp_path, server, events=recorder) as node:
            yield node
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.fixture
async def node(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Node]:
    async with node_with_events(containerd, tmp_path) as running:
        yield running


def events(node: Node, pod: str, reason: str | None = None) -> list[tuple[str, str, str]]:
    """(container, reason, message) of ``pod``'s Events, oldest first."""
    found = [e for e in node.server.objects(EVENTS) if e["involvedObject"]["name"] == pod]
    found.sort(key=lambda e: e["metadata"]["name"])
    out = []
    for e in found:
        path = e["involvedObject"].get("fieldPath", "")
        name = path.removeprefix("spec.containers{").removesuffix("}")
        if reason is None or e["reason"] == reason:
            out.append((name, e["reason"], e["message"]))
    return out


def condition(pod: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conditions = (pod or {}).get("status", {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def readiness(probe: dict[str, Any]) -> dict[str, Any]:
    return {"readinessProbe": {**probe, "periodSeconds": 1, "failureThreshold": 1}}


def ready_flags(node: Node, pod: str) -> dict[str, bool]:
    statuses = (node.pod(pod) or {}).get("status", {}).get("containerStatuses") or []
    return {s["name"]: s["ready"] for s in statuses if "running" in s["state"]}


async def settled(node: Node, pod: str, want: dict[str, bool], unhealthy: int) -> None:
    """Every container running with the ``ready`` flags of ``want`` and ``unhealthy``
    containers with an Unhealthy Event; held for 3 s (no flapping)."""

    def done() -> bool:
        named = {name for name, _, _ in events(node, pod, "Unhealthy")}
        return ready_flags(node, pod) == want and len(named) >= unhealthy

    await until(f"{pod} ready flags {want}", done, within=60, explain=lambda: node.pod(pod))
    for _ in range(6):
        await asyncio.sleep(0.5)
        assert ready_flags(node, pod) == want


def pod_ip(node: Node, pod: str) -> str:
    return str((node.pod(pod) or {})["status"]["podIP"])


async def test_exec_readiness_probe_passes_and_fails(node: Node) -> None:
    ok = {"exec": {"command": ["cat", "/etc/hostname"]}}
    bad = {"exec": {"command": ["sh", "-c", "echo not ready yet; exit 3"]}}
    slow = {"exec": {"command": ["sleep", "5"]}, "timeoutSeconds": 1}
    node.create(
        "exec",
        containers=[
            container("ok", image=BUSYBOX_IMAGE, command=["sleep", "3600"], **readiness(ok)),
            container("bad", image=BUSYBOX_IMAGE, command=["sleep", "3600"], **readiness(bad)),
            container("slow", image=BUSYBOX_IMAGE, command=["sleep", "3600"], **readiness(slow)),
        ],
    )
    await settled(node, "exec", {"ok": True, "bad": False, "slow": False}, unhealthy=2)
    pod = node.pod("exec")
    assert condition(pod, "Ready")["status"] == "False"
    assert (
        condition(pod, "ContainersReady")["message"] == "containers with unready status: [bad slow]"
    )
    assert condition(pod, "Ready")["reason"] == "ContainersNotReady"
    assert pod is not None and pod["status"]["phase"] == "Running"
    assert set(events(node, "exec", "Unhealthy")) == {
        ("bad", "Unhealthy", "Readiness probe failed: not ready yet\n"),
        (
            "slow",
            "Unhealthy",
            'Readiness probe failed: command timed out: "sleep 5" timed out after 1s',
        ),
    }
    assert status_of(pod, "bad")["started"] is True


async def test_http_readiness_probe_passes_and_fails(node: Node) -> None:
    node.create(
        "http",
        containers=[
            container(
                "web",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", HTTPD],
                ports=[{"name": "http", "containerPort": 8080}],
                **readiness({"httpGet": {"port": "http", "path": "/index.html"}}),
            ),
            container(
                "missing",
                image=BUSYBOX_IMAGE,
                command=["sleep", "3600"],
                **readiness({"httpGet": {"port": 8080, "path": "/nothing-here"}}),
            ),
            container(
                "refused",
                image=BUSYBOX_IMAGE,
                command=["sleep", "3600"],
                **readiness({"httpGet": {"port": 8089, "path": "/healthz"}}),
            ),
        ],
    )
    await settled(node, "http", {"web": True, "missing": False, "refused": False}, unhealthy=2)
    ip = pod_ip(node, "http")
    unhealthy = set(events(node, "http", "Unhealthy"))
    assert (
        "missing",
        "Unhealthy",
        "Readiness probe failed: HTTP probe failed with statuscode: 404",
    ) in unhealthy
    assert (
        "refused",
        "Unhealthy",
        f'Readiness probe failed: Get "http://{ip}:8089/healthz": '
        f"dial tcp {ip}:8089: connect: connection refused",
    ) in unhealthy
    assert not [e for e in unhealthy if e[0] == "web"]
    assert condition(node.pod("http"), "Ready")["status"] == "False"


async def test_tcp_readiness_probe_passes_and_fails(node: Node) -> None:
    node.create(
        "tcp",
        containers=[
            container(
                "web",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", HTTPD],
                **readiness({"tcpSocket": {"port": 8080}}),
            ),
            container(
                "closed",
                image=BUSYBOX_IMAGE,
                command=["sleep", "3600"],
                **readiness({"tcpSocket": {"port": 8081}}),
            ),
        ],
    )
    await settled(node, "tcp", {"web": True, "closed": False}, unhealthy=1)
    ip = pod_ip(node, "tcp")
    assert set(events(node, "tcp", "Unhealthy")) == {
        (
            "closed",
            "Unhealthy",
            f"Readiness probe failed: dial tcp {ip}:8081: connect: connection refused",
        )
    }


class _Health(grpc.GenericRpcHandler):
    """grpc.health.v1.Health/Check answering SERVING for "" and NOT_SERVING for "down"."""

    def service(self, handler_call_details: Any) -> Any:
        if handler_call_details.method != "/grpc.health.v1.Health/Check":
            return None

        async def check(request: bytes, context: Any) -> bytes:
            service = _service_name(request)
            return b"\x08\x02" if service == "down" else b"\x08\x01"

        return grpc.unary_unary_rpc_method_handler(
            check, request_deserializer=None, response_serializer=None
        )


def _service_name(raw: bytes) -> str:
    return raw[2:].decode() if raw[:1] == b"\x0a" else ""


async def test_grpc_readiness_probe_passes_and_fails(node: Node, containerd: RuntimeEnv) -> None:
    assert decode_response(b"\x08\x02") == 2 and encode_request("down")[2:] == b"down"
    gateway = str(next(ipaddress.ip_network(containerd.pod_subnet).hosts()))
    server = grpc.aio.server()
    server.add_generic_rpc_handlers([_Health()])
    port = server.add_insecure_port(f"{gateway}:0")
    await server.start()
    relay = f"exec nc -ll -p 9000 -e nc {gateway} {port}"
    try:
        node.create(
            "grpc",
            containers=[
                container(
                    "serving",
                    image=BUSYBOX_IMAGE,
                    command=["sh", "-c", relay],
                    **readiness({"grpc": {"port": 9000}, "timeoutSeconds": 3}),
                ),
                container(
                    "down",
                    image=BUSYBOX_IMAGE,
                    command=["sleep", "3600"],
                    **readiness({"grpc": {"port": 9000, "service": "down"}, "timeoutSeconds": 3}),
                ),
            ],
        )
        await settled(node, "grpc", {"serving": True, "down": False}, unhealthy=1)
        assert set(events(node, "grpc", "Unhealthy")) == {
            (
                "down",
                "Unhealthy",
                'Readiness probe failed: service unhealthy (responded with "NOT_SERVING")',
            )
        }
    finally:
        await server.stop(None)


async def test_failing_liveness_probe_restarts_the_container_with_the_probe_grace(
    node: Node,
) -> None:
    # sh as PID 1 ignores SIGTERM: only the kill after the grace period stops it, so a restart
    # within seconds shows the probe's 1 s grace was used, not the pod's 30 s.
    liveness = {
        "livenessProbe": {
            "httpGet": {"port": 8080, "path": "/healthz"},
            "periodSeconds": 1,
            "failureThreshold": 2,
            "terminationGracePeriodSeconds": 1,
        }
    }
    node.create(
        "live",
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", HTTPD], **liveness)],
        grace=30,
    )
    began = time.monotonic()
    app = await until(
        "a restart",
        lambda: (s := status_of(node.pod("live"))).get("restartCount", 0) >= 1 and s,
        within=40,
    )
    assert time.monotonic() - began < 25
    assert app["lastState"]["terminated"]["exitCode"] == 137
    killing = events(node, "live", "Killing")
    assert ("app", "Killing", "Container app failed liveness probe, will be restarted") in killing
    assert (
        "app",
        "Unhealthy",
        "Liveness probe failed: HTTP probe failed with statuscode: 404",
    ) in events(node, "live", "Unhealthy")
    await until(
        "restartCount 2",
        lambda: status_of(node.pod("live")).get("restartCount", 0) >= 2,
        within=60,
    )


async def test_slow_startup_probe_holds_liveness_back(node: Node) -> None:
    script = "sleep 8; touch /tmp/started; exec sleep 3600"
    probes = {
        "startupProbe": {
            "exec": {"command": ["cat", "/tmp/started"]},
            "periodSeconds": 1,
            "failureThreshold": 60,
        },
        "livenessProbe": {
            "exec": {"command": ["false"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
        "readinessProbe": {"exec": {"command": ["true"]}, "periodSeconds": 1},
    }
    node.create(
        "slow",
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script], **probes)],
    )
    await until(
        "running",
        lambda: "running" in status_of(node.pod("slow")).get("state", {}),
        within=30,
    )
    began = time.monotonic()
    while time.monotonic() - began < 5:  # the startup probe fails for 8 s
        app = status_of(node.pod("slow"))
        assert (app["started"], app["ready"], app["restartCount"]) == (False, False, 0), app
        assert not events(node, "slow", "Killing")
        await asyncio.sleep(0.5)
    startup = events(node, "slow", "Unhealthy")
    assert startup and all(m.startswith("Startup probe failed: cat: ") for _, _, m in startup)
    await until(
        "a liveness restart after startup",
        lambda: status_of(node.pod("slow")).get("restartCount", 0) >= 1,
        within=40,
    )
    assert time.monotonic() - began > 4
    messages = [m for _, _, m in events(node, "slow")]
    assert "Liveness probe failed: " in messages
    assert "Container app failed liveness probe, will be restarted" in messages


def init_status_of(pod: dict[str, Any] | None, name: str) -> dict[str, Any]:
    statuses = (pod or {}).get("status", {}).get("initContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


async def test_a_sidecars_startup_probe_holds_the_app_back_and_its_readiness_the_pod(
    node: Node,
) -> None:
    script = "sleep 6; touch /tmp/started; exec sleep 3600"
    probes = {
        "startupProbe": {
            "exec": {"command": ["cat", "/tmp/started"]},
            "periodSeconds": 1,
            "failureThreshold": 60,
        },
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", "echo proxy not ready; exit 1"]},
            "periodSeconds": 1,
            "failureThreshold": 1,
        },
    }
    sidecar = container(
        "proxy",
        image=BUSYBOX_IMAGE,
        command=["sh", "-c", script],
        restartPolicy="Always",
        **probes,
    )
    node.create(
        "meshed",
        init_containers=[sidecar],
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sleep", "3600"])],
    )
    await until(
        "the sidecar running",
        lambda: "running" in init_status_of(node.pod("meshed"), "proxy").get("state", {}),
        within=30,
    )
    began = time.monotonic()
    while time.monotonic() - began < 4:  # the startup probe fails for 6 s
        pod = node.pod("meshed")
        proxy = init_status_of(pod, "proxy")
        assert (proxy["started"], proxy["ready"]) == (False, False), proxy
        assert "waiting" in status_of(pod)["state"], status_of(pod)
        assert condition(pod, "Initialized")["status"] == "False"
        await asyncio.sleep(0.5)
    await until(
        "the app running",
        lambda: "running" in status_of(node.pod("meshed")).get("state", {}),
        within=30,
        explain=lambda: node.pod("meshed"),
    )
    assert time.monotonic() - began > 4
    startup = [m for _, _, m in events(node, "meshed", "Unhealthy") if "Startup" in m]
    assert startup and all(m.startswith("Startup probe failed: cat: ") for m in startup)

    def settled_unready() -> bool:
        pod = node.pod("meshed")
        return (
            init_status_of(pod, "proxy").get("started") is True
            and status_of(pod).get("ready") is True
            and condition(pod, "Initialized").get("status") == "True"
        )

    await until("the sidecar started", settled_unready, within=30)
    for _ in range(6):  # held: the sidecar never becomes ready, so neither does the pod
        pod = node.pod("meshed")
        assert init_status_of(pod, "proxy")["ready"] is False
        assert condition(pod, "Ready")["status"] == "False"
        assert condition(pod, "Ready")["reason"] == "ContainersNotReady"
        message = "containers with unready status: [proxy]"
        assert condition(pod, "ContainersReady")["message"] == message
        await asyncio.sleep(0.5)
    unhealthy = {
        (e["involvedObject"].get("fieldPath"), e["message"])
        for e in node.server.objects(EVENTS)
        if e["involvedObject"]["name"] == "meshed" and e["reason"] == "Unhealthy"
    }
    assert ("spec.initContainers{proxy}", "Readiness probe failed: proxy not ready\n") in unhealthy


# --- the whole agent on the real control plane ------------------------------------------------


def web_pod(name: str, namespace: str, node: str, *, ready: bool) -> dict[str, Any]:
    """busybox httpd answering its own name on 8080; its readiness probe reads /tmp/ready,
    which only a ``ready`` pod creates."""
    touch = "touch /tmp/ready; " if ready else ""
    script = f"mkdir -p /www && echo {name} > /www/index.html; {touch}exec httpd -f -p 8080 -h /www"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "web"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "readinessProbe": {
                        "exec": {"command": ["cat", "/tmp/ready"]},
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                }
            ],
        },
    }


@contextlib.contextmanager
def pod_route(ns: str, pod_subnet: str) -> Iterator[None]:
    """A veth from the node's namespace to the host, a route to the pods and a default route
    through it (the node namespace of ``agent_node(with_proxy=True)`` has neither): as on a
    real node, the proxy's DNAT to a pod IP can then be followed by the packet."""
    tag = secrets.token_hex(2)
    host, inner = f"na-pv{tag}", f"na-pi{tag}"
    third = int(tag, 16) % 250 + 1
    host_ip, inner_ip = f"100.64.{third}.1", f"100.64.{third}.2"

    def ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True)

    ip("link", "add", host, "type", "veth", "peer", "name", inner, "netns", ns)
    try:
        ip("addr", "add", f"{host_ip}/30", "dev", host)
        ip("link", "set", host, "up")
        ip("-n", ns, "addr", "add", f"{inner_ip}/30", "dev", inner)
        ip("-n", ns, "link", "set", inner, "up")
        ip("-n", ns, "route", "add", pod_subnet, "via", host_ip)
        # a node's default route: the socket's route lookup for a ClusterIP happens before
        # the proxy's DNAT
        ip("-n", ns, "route", "add", "default", "via", host_ip)
        yield
    finally:
        subprocess.run(["ip", "link", "del", host], check=False, capture_output=True)


async def test_a_pod_failing_readiness_gets_no_service_traffic(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint, with_proxy=True) as node:
        assert node.netns is not None
        with pod_route(node.netns, containerd.pod_subnet):
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            ns = node.namespace
            for name, ready in (("good", True), ("bad", False)):
                body = web_pod(name, ns, node.name, ready=ready)
                code, answer = control_plane.api_request(
                    "POST", f"/api/v1/namespaces/{ns}/pods", body=body
                )
                assert code == 201, (code, answer)
            code, svc = control_plane.api_request(
                "POST",
                f"/api/v1/namespaces/{ns}/services",
                body={
                    "metadata": {"name": "web"},
                    "spec": {
                        "selector": {"app": "web"},
                        "ports": [{"port": 80, "targetPort": "http", "protocol": "TCP"}],
                    },
                },
            )
            assert code == 201, (code, svc)
            cluster_ip = svc["spec"]["clusterIP"]

            def pod(name: str) -> dict[str, Any]:
                return api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/{name}") or {}

            def endpoints() -> dict[str, bool]:
                slices = api_get(
                    control_plane,
                    f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
                    "?labelSelector=kubernetes.io/service-name%3Dweb",
                )
                return {
                    e["targetRef"]["name"]: bool(e["conditions"].get("ready"))
                    for s in (slices or {}).get("items", [])
                    for e in s.get("endpoints") or []
                }

            await until(
                "good ready and bad running but not ready in the EndpointSlice",
                lambda: endpoints() == {"good": True, "bad": False},
                within=60,
                explain=lambda: (endpoints(), pod("bad").get("status"), node.log_tail(1500)),
            )
            bad = pod("bad")
            assert condition(bad, "Ready")["status"] == "False"
            assert status_of(bad)["ready"] is False
            assert "running" in status_of(bad)["state"]

            def unhealthy() -> list[dict[str, Any]]:
                listed = api_get(control_plane, f"/api/v1/namespaces/{ns}/events") or {}
                return [
                    e
                    for e in listed.get("items", [])
                    if e["reason"] == "Unhealthy" and e["involvedObject"]["name"] == "bad"
                ]

            [event, *_] = await until("an Unhealthy Event for bad", unhealthy, within=30)
            assert event["message"].startswith("Readiness probe failed: cat: "), event
            assert event["involvedObject"]["fieldPath"] == "spec.containers{app}"

            async def curl(address: str) -> str:
                done = await asyncio.to_thread(
                    subprocess.run,
                    ["ip", "netns", "exec", node.netns, "curl", "-s", "--max-time", "3",
                     f"http://{address}/"],
                    capture_output=True,
                    text=True,
                    check=False,
                )  # fmt: skip
                return done.stdout.strip() or f"curl exit {done.returncode}"

            good_ip = pod("good")["status"]["podIP"]
            assert await curl(f"{good_ip}:8080") == "good"  # the node reaches the pods

            async def answered() -> bool:
                return await curl(f"{cluster_ip}:80") == "good"

            await until("the ClusterIP answering", answered, within=30)
            answers = [await curl(f"{cluster_ip}:80") for _ in range(12)]
            assert answers == ["good"] * 12, answers


def shutting_down_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """busybox whose SIGTERM handler removes the files its readiness and liveness probes read,
    then takes 20 s to exit (of a 30 s grace period): the e2e probe-on-terminating specs' pod."""
    script = (
        "trap 'rm -f /tmp/ready /tmp/alive; sleep 20; exit 0' TERM; "
        "touch /tmp/ready /tmp/alive; while true; do sleep 1; done"
    )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", script],
                    "readinessProbe": {
                        "exec": {"command": ["cat", "/tmp/ready"]},
                        "initialDelaySeconds": 1,
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                    "livenessProbe": {
                        "exec": {"command": ["cat", "/tmp/alive"]},
                        "initialDelaySeconds": 1,
                        "periodSeconds": 1,
                        "failureThreshold": 1,
                    },
                }
            ],
        },
    }


async def test_a_terminating_pod_goes_unready_at_once_and_its_liveness_is_off(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    """While a deleted pod's container runs out its grace period, its failing readiness probe
    makes the pod not Ready within seconds (taking it out of its Services' endpoints), as the
    kubelet's does; its liveness probe, failing too, is off: no Unhealthy Event, no restart."""
    async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        ns, name = node.namespace, "stopping"
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        code, answer = control_plane.api_request(
            "POST", f"/api/v1/namespaces/{ns}/pods", body=shutting_down_pod(name, ns, node.name)
        )
        assert code == 201, (code, answer)

        def pod() -> dict[str, Any]:
            return api_get(control_plane, path) or {}

        await until(
            "the pod Ready",
            lambda: condition(pod(), "Ready").get("status") == "True",
            within=90,
            explain=lambda: (pod().get("status"), node.log_tail(1500)),
        )
        # False (the readiness probe's initial delay) then True: the False's reason is gone
        assert "reason" not in condition(pod(), "Ready"), condition(pod(), "Ready")
        assert "message" not in condition(pod(), "ContainersReady"), pod()["status"]
        code, answer = control_plane.api_request("DELETE", path)
        assert code == 200, (code, answer)
        deleted = time.monotonic()

        def unready_while_running() -> dict[str, Any] | None:
            current = pod()
            if condition(current, "Ready").get("status") != "False":
                return None
            return current

        seen = await until(
            "the terminating pod not Ready",
            unready_while_running,
            within=15,
            every=0.2,
            explain=lambda: (pod().get("status"), node.log_tail(1500)),
        )
        took = time.monotonic() - deleted
        assert seen["metadata"].get("deletionTimestamp"), seen["metadata"]
        assert "running" in status_of(seen)["state"], status_of(seen)  # still shutting down
        assert status_of(seen)["ready"] is False
        assert condition(seen, "ContainersReady")["status"] == "False"
        assert condition(seen, "Ready")["message"] == "containers with unready status: [app]"
        assert took < 15, took  # within a few probe periods, not at the end of the 20 s

        await until("the pod gone", lambda: not pod(), within=60, every=0.5)
        listed = api_get(control_plane, f"/api/v1/namespaces/{ns}/events") or {}
        about = [e for e in listed.get("items", []) if e["involvedObject"]["name"] == name]
        messages = [(e["reason"], e["message"]) for e in about]
        assert any(
            reason == "Unhealthy" and message.startswith("Readiness probe failed: cat: ")
            for reason, message in messages
        ), messages
        assert not [m for m in messages if "iveness" in m[1]], messages
        assert [r for r, _ in messages].count("Started") == 1, messages  # never restarted

"""Single changes on a quiet node reach it at once: the whole agent, as ``make up``
runs it (every manager on, the proxy programming its own network namespace's ``ip nodeagent``),
against the real control plane and containerd.

- single pods created 8 s apart are each Running (as the API shows it) within 3 s; the third
  is created while a pod that ignores SIGTERM is being stopped, so a CRI StopContainer is in
  flight for seconds on the same gRPC channel as the new pod's calls and the PLEG's relists;
  meanwhile a container that exits after 1 s is seen exiting (the pod Succeeded) within 3 s
  more, which only the PLEG's relist can tell;
- single EndpointSlice changes 8 s apart each reach the kernel table within 2 s.

Nothing is forced: the test writes through the API, then polls what a user would look at.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, sleeper_pod, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from podnode import until

from nodeagent.nft import NFTables

pytestmark = pytest.mark.integration

GAP = 8.0
POD_WITHIN = 3.0
ENDPOINT_WITHIN = 2.0
# TEST-NET-3 addresses: the rules only name them, no packet is sent to them.
BACKENDS = ["203.0.113.11", "203.0.113.12", "203.0.113.13", "203.0.113.14"]
ENDPOINT_STEPS = [[0, 1], [0, 1, 2], [3], [1, 3]]


def create(control_plane: ControlPlane, path: str, body: dict[str, Any]) -> None:
    code, answer = control_plane.api_request("POST", path, body=body)
    assert code == 201, (code, answer)


def running(control_plane: ControlPlane, node: AgentNode, name: str) -> bool:
    assert node.alive(), f"the agent exited:\n{node.log_tail()}"
    pod = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/pods/{name}") or {}
    status = pod.get("status") or {}
    states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
    return status.get("phase") == "Running" and bool(states) and all("running" in s for s in states)


async def time_until(check: Callable[[], Any], *, what: str, within: float) -> float:
    """Seconds from now until ``check()`` holds (polled every 50 ms); fails after ``within``
    plus a margin, so a slow outcome is reported with its time rather than as a timeout."""
    start = time.monotonic()
    await until(what, check, within=within + 20.0, every=0.05)
    return time.monotonic() - start


def phase(control_plane: ControlPlane, node: AgentNode, name: str) -> str:
    pod = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/pods/{name}") or {}
    return str((pod.get("status") or {}).get("phase", ""))


def one_second_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """Exits 0 after a second: the PLEG's relist sees it exit, the pod turns Succeeded."""
    pod = sleeper_pod(name, namespace, node)
    pod["spec"]["restartPolicy"] = "Never"
    pod["spec"]["containers"][0]["command"] = ["sleep", "1"]
    return pod


def stubborn_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    pod = sleeper_pod(name, namespace, node)
    pod["spec"]["terminationGracePeriodSeconds"] = 10
    pod["spec"]["containers"][0]["command"] = [
        "sh",
        "-c",
        "trap '' TERM; while :; do sleep 1; done",
    ]
    return pod


async def test_single_pods_and_endpoint_changes_reach_a_quiet_node_at_once(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint, with_proxy=True) as node:
        node.start()
        await wait_ready(control_plane, node, status="True", within=90)
        pods_path = f"/api/v1/namespaces/{node.namespace}/pods"
        assert node.netns is not None
        table = NFTables(
            family="ip",
            table="nodeagent",
            argv=("nsenter", f"--net=/run/netns/{node.netns}", "nft"),
        )

        async def table_shows(want: set[str], within: float = ENDPOINT_WITHIN + 20) -> float:
            """Seconds until the kernel table names exactly the ``want`` backends."""
            start = time.monotonic()
            while True:
                ruleset = await table.ruleset()
                text = ruleset.dump() if ruleset is not None else ""
                if {b for b in BACKENDS if b in text} == want:
                    return time.monotonic() - start
                assert time.monotonic() - start < within, (want, text[-2000:])
                await asyncio.sleep(0.02)

        create(control_plane, pods_path, stubborn_pod("stubborn", node.namespace, node.name))
        await until("the stubborn pod Running", lambda: running(control_plane, node, "stubborn"),
                    within=60, every=0.2)  # fmt: skip
        await asyncio.sleep(GAP)  # a quiet node from here on

        pod_times: list[float] = []
        for i in range(3):
            if i == 2:  # StopContainer of the stubborn pod runs for its 10 s grace from here
                code, _ = control_plane.api_request("DELETE", f"{pods_path}/stubborn")
                assert code == 200
                await asyncio.sleep(1.0)
            name = f"solo-{i}"
            create(control_plane, pods_path, sleeper_pod(name, node.namespace, node.name))
            pod_times.append(
                await time_until(
                    functools.partial(running, control_plane, node, name),
                    what=f"{name} Running",
                    within=POD_WITHIN,
                )
            )
            if i == 2:  # the stop still in flight: a container exiting on its own is noticed
                create(control_plane, pods_path, one_second_pod("brief", node.namespace, node.name))
                brief = await time_until(
                    lambda: phase(control_plane, node, "brief") == "Succeeded",
                    what="brief Succeeded",
                    within=1.0 + POD_WITHIN,
                )
                code, _ = control_plane.api_request("GET", f"{pods_path}/stubborn")
                assert code == 200, "the stubborn pod was gone before the check: nothing tested"
            await asyncio.sleep(GAP)

        ns = node.namespace
        create(control_plane, f"/api/v1/namespaces/{ns}/services", {
            "metadata": {"name": "web"},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]},
        })  # fmt: skip
        slices_path = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"

        def endpoint_slice(indexes: list[int]) -> dict[str, Any]:
            return {
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {
                    "name": "web-quiet",
                    "namespace": ns,
                    "labels": {"kubernetes.io/service-name": "web"},
                },
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
                "endpoints": [
                    {"addresses": [BACKENDS[i]], "conditions": {"ready": True}} for i in indexes
                ],
            }

        create(control_plane, slices_path, endpoint_slice([0]))
        await table_shows({BACKENDS[0]}, within=30.0)  # the Service's first programming
        endpoint_times: list[float] = []
        for step in ENDPOINT_STEPS:
            await asyncio.sleep(GAP)
            current = api_get(control_plane, f"{slices_path}/web-quiet")
            body = {**endpoint_slice(step), "metadata": current["metadata"]}
            code, answer = control_plane.api_request("PUT", f"{slices_path}/web-quiet", body=body)
            assert code == 200, (code, answer)
            endpoint_times.append(await table_shows({BACKENDS[i] for i in step}))

        print(
            f"pods Running after {[f'{t:.2f}s' for t in pod_times]}; endpoint changes in the "
            f"kernel after {[f'{t * 1000:.0f}ms' for t in endpoint_times]}; a 1 s pod "
            f"Succeeded {brief:.2f}s after its create"
        )

    assert all(t <= POD_WITHIN for t in pod_times), pod_times
    assert brief <= 1.0 + POD_WITHIN, brief
    assert all(t <= ENDPOINT_WITHIN for t in endpoint_times), endpoint_times

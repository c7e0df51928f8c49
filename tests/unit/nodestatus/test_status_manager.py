"""Registration and the status loop against the fake apiserver, in virtual time."""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.apiserver import NODES, Forbidden, ServerError, TransportError
from nodeagent.hostinfo import HostInfo, HostNetwork
from nodeagent.nodestatus.compute import NodeFacts, kubelet_version
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.nodestatus.setters import RuntimeStatus, runtime_not_checked
from nodeagent.nodestatus.settings import NodeSettings
from nodeagent.testing.fake_apiserver import FakeApiServer

pytestmark = pytest.mark.looptime

NODE = "node-a"
ip = ipaddress.ip_address
NET = HostNetwork(addresses={"eth0": (ip("10.0.0.5"),)}, default_route_interfaces=("eth0",))
SETTINGS = NodeSettings(
    node_name=NODE,
    hostname=NODE,
    root_dir=Path("/var/lib/nodeagent"),
    kubeconfig=Path("/etc/nodeagent/kubeconfig"),
    node_labels={"node.kubernetes.io/pool": "blue"},
    register_with_taints=({"key": "dedicated", "value": "infra", "effect": "NoSchedule"},),
)


class Facts:
    def __init__(self, server: FakeApiServer) -> None:
        self.clock = server.clock
        self.runtime = runtime_not_checked()
        self.boot_id = "boot-1"

    async def __call__(self) -> NodeFacts:
        host = HostInfo(
            hostname=NODE,
            machine_id="m1",
            system_uuid="u1",
            boot_id=self.boot_id,
            kernel_version="6.1.0",
            os_image="Debian GNU/Linux 12 (bookworm)",
            num_cpus=2,
            memory_bytes=4 * 2**30,
        )
        return NodeFacts(
            now=self.clock.now(),
            host=host,
            network=NET,
            rootfs_bytes=50 * 2**30,
            runtime=self.runtime,
        )


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[float, str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((asyncio.get_running_loop().time(), type, reason, message))

    def reasons(self) -> list[str]:
        return [r for _, _, r, _ in self.recorded]


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def facts(server: FakeApiServer) -> Facts:
    return Facts(server)


@pytest.fixture
def events() -> Events:
    return Events()


@pytest.fixture
async def start(
    server: FakeApiServer, facts: Facts, events: Events
) -> AsyncIterator[Callable[..., NodeStatusManager]]:
    tasks: list[asyncio.Task[None]] = []

    def starter(**kw: Any) -> NodeStatusManager:
        kw.setdefault("settings", SETTINGS)
        m = NodeStatusManager(api=server, facts=facts, events=events, rand=lambda: 0.5, **kw)
        tasks.append(asyncio.create_task(m.run()))
        return m

    yield starter
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def node(server: FakeApiServer) -> dict[str, Any]:
    obj = server.stored(NODES, NODE)
    assert obj is not None
    return obj


def conditions(server: FakeApiServer) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in node(server)["status"]["conditions"]}


async def test_registers_the_node_the_kubelet_would(
    server: FakeApiServer, start: Callable[..., NodeStatusManager], events: Events
) -> None:
    start()
    await asyncio.sleep(1)

    n = node(server)
    assert n["metadata"]["labels"] == {
        "kubernetes.io/hostname": NODE,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        "node.kubernetes.io/pool": "blue",
    }
    assert n["metadata"]["annotations"] == {
        "volumes.kubernetes.io/controller-managed-attach-detach": "true"
    }
    assert n["spec"]["taints"] == [{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}]
    status = n["status"]
    assert status["addresses"] == [
        {"type": "InternalIP", "address": "10.0.0.5"},
        {"type": "Hostname", "address": NODE},
    ]
    assert status["capacity"] == {
        "cpu": "2",
        "memory": "4Gi",
        "pods": "110",
        "ephemeral-storage": "50Gi",
    }
    assert status["allocatable"] == {
        "cpu": "2",
        "memory": "3996Mi",
        "pods": "110",
        "ephemeral-storage": "45Gi",
    }
    assert status["nodeInfo"]["kubeletVersion"] == kubelet_version()
    assert status["nodeInfo"]["containerRuntimeVersion"] == "unknown"
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert [c["type"] for c in status["conditions"]] == [
        "MemoryPressure",
        "DiskPressure",
        "PIDPressure",
        "Ready",
    ]
    ready = conditions(server)["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "KubeletNotReady",
        "container runtime status check may not have completed yet",
    )
    assert [c.at for c in server.calls_to("create", "nodes")] == [pytest.approx(0.1)]
    assert events.reasons() == [
        "Starting",
        "NodeHasSufficientMemory",
        "NodeHasNoDiskPressure",
        "NodeHasSufficientPID",
    ]


async def test_registration_retries_100ms_doubling_to_7s(
    server: FakeApiServer, start: Callable[..., NodeStatusManager]
) -> None:
    server.react("create", "nodes", ServerError("etcd leader changed"), times=8)
    start()
    await asyncio.sleep(30)

    assert [c.at for c in server.calls_to("create", "nodes")] == pytest.approx(
        [0.1, 0.3, 0.7, 1.5, 3.1, 6.3, 12.7, 19.7, 26.7]
    )
    assert server.stored(NODES, NODE) is not None


@pytest.mark.parametrize(
    "refusal",
    [None, Forbidden("nodes is forbidden")],
    ids=["409 AlreadyExists", "403 Forbidden on create"],
)
async def test_an_existing_node_is_adopted_and_its_default_labels_reconciled(
    server: FakeApiServer, start: Callable[..., NodeStatusManager], refusal: Exception | None
) -> None:
    server.seed(
        NODES,
        {
            "metadata": {
                "name": NODE,
                "labels": {"kubernetes.io/hostname": "old-name", "team": "a"},
            },
            "spec": {"podCIDR": "10.244.1.0/24"},
        },
    )
    uid = node(server)["metadata"]["uid"]
    if refusal is not None:
        server.react("create", "nodes", refusal)
    start()
    await asyncio.sleep(1)

    n = node(server)
    assert n["metadata"]["uid"] == uid
    assert n["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert n["metadata"]["labels"]["team"] == "a"  # not ours: untouched
    assert "node.kubernetes.io/pool" not in n["metadata"]["labels"]  # custom labels: create only
    assert "taints" not in n["spec"]  # taints: create only
    assert (
        n["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"]
        == "true"
    )
    assert conditions(server)["Ready"]["status"] == "False"


async def test_without_register_node_it_waits_for_someone_else_to_create_the_node(
    server: FakeApiServer, start: Callable[..., NodeStatusManager]
) -> None:
    start(settings=dataclasses.replace(SETTINGS, register_node=False))
    await asyncio.sleep(25)
    assert server.stored(NODES, NODE) is None
    server.seed(NODES, {"metadata": {"name": NODE}})
    await asyncio.sleep(11)

    assert server.calls_to("create", "nodes") == []
    assert conditions(server)["Ready"]["reason"] == "KubeletNotReady"


async def test_status_is_patched_on_change_or_else_every_report_period(
    server: FakeApiServer, start: Callable[..., NodeStatusManager], facts: Facts, events: Events
) -> None:
    start()
    await asyncio.sleep(50)
    facts.runtime = RuntimeStatus(errors=(), version="containerd://2.1.0")
    await asyncio.sleep(270)

    patches = [c.at for c in server.calls_to("patch", "nodes")]
    # first report after registration; Ready flips at the first sync after t=50 (0.1 + 5 x 10.2);
    # then nothing changes until the report period (300s, moved by 0 for rand=0.5) has passed.
    assert patches == pytest.approx([0.1, 51.1])
    await asyncio.sleep(40)
    assert [c.at for c in server.calls_to("patch", "nodes")] == pytest.approx([0.1, 51.1, 357.1])
    ready = conditions(server)["Ready"]
    assert (ready["status"], ready["reason"]) == ("True", "KubeletReady")
    assert ready["lastTransitionTime"] == "2026-01-01T00:00:51Z"
    assert ready["lastHeartbeatTime"] == "2026-01-01T00:05:57Z"
    assert node(server)["status"]["nodeInfo"]["containerRuntimeVersion"] == "containerd://2.1.0"
    assert ("Normal", "NodeReady", f"Node {NODE} status is now: NodeReady") in [
        r[1:] for r in events.recorded
    ]


async def test_status_patch_is_a_strategic_merge_on_the_status_subresource(
    server: FakeApiServer, start: Callable[..., NodeStatusManager], facts: Facts
) -> None:
    start()
    await asyncio.sleep(1)
    facts.runtime = RuntimeStatus(errors=(), version="containerd://2.1.0")
    await asyncio.sleep(10)

    call = server.calls_to("patch", "nodes")[-1]
    assert (call.subresource, call.patch_type.value if call.patch_type else None) == (
        "status",
        "application/strategic-merge-patch+json",
    )
    assert call.body["status"]["$setElementOrder/conditions"] == [
        {"type": "MemoryPressure"},
        {"type": "DiskPressure"},
        {"type": "PIDPressure"},
        {"type": "Ready"},
    ]
    assert "addresses" not in call.body["status"]  # unchanged parts are not sent


async def test_first_try_reads_the_cache_and_retries_get_from_the_server(
    server: FakeApiServer, facts: Facts, events: Events
) -> None:
    server.seed(NODES, {"metadata": {"name": NODE}})
    cached = server.stored(NODES, NODE)

    class Cache:
        def get(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
            return cached

    resets: list[float] = []

    async def reset() -> None:
        resets.append(asyncio.get_running_loop().time())

    m = NodeStatusManager(
        api=server,
        settings=SETTINGS,
        facts=facts,
        events=events,
        node_cache=Cache(),
        on_repeated_failure=reset,
    )
    server.react("patch", "nodes", ServerError("x"), TransportError("reset"), TransportError("x"))
    await m.sync()

    verbs = [c.verb for c in server.calls if c.resource == "nodes"]
    assert verbs == ["patch", "get", "patch", "get", "patch", "get", "patch"]
    assert len(resets) == 2  # transport failures on tries 2 and 3
    assert conditions(server)["Ready"]["status"] == "False"


async def test_five_failed_tries_are_logged_and_retried_next_period(
    server: FakeApiServer, facts: Facts, events: Events, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    server.seed(NODES, {"metadata": {"name": NODE}})
    m = NodeStatusManager(api=server, settings=SETTINGS, facts=facts, events=events)
    server.react("patch", "nodes", ServerError("x"), times=5)
    await m.sync()
    assert len(server.calls_to("patch", "nodes")) == 5
    assert [r.getMessage() for r in caplog.records].count("Unable to update node status") == 1
    await m.sync()
    assert conditions(server)["Ready"]["status"] == "False"


async def test_a_new_boot_id_records_rebooted(
    server: FakeApiServer, facts: Facts, events: Events
) -> None:
    server.seed(NODES, {"metadata": {"name": NODE}, "status": {"nodeInfo": {"bootID": "boot-0"}}})
    m = NodeStatusManager(api=server, settings=SETTINGS, facts=facts, events=events)
    await m.sync()
    assert ("Warning", "Rebooted", f"Node {NODE} has been rebooted, boot id: boot-1") in [
        r[1:] for r in events.recorded
    ]


async def test_poke_syncs_without_waiting_for_the_period(
    server: FakeApiServer, start: Callable[..., NodeStatusManager], facts: Facts
) -> None:
    m = start()
    await asyncio.sleep(2)
    facts.runtime = RuntimeStatus(errors=(), version="containerd://2.1.0")
    m.poke()
    await asyncio.sleep(0.01)

    assert conditions(server)["Ready"]["status"] == "True"
    assert server.calls_to("patch", "nodes")[-1].at == pytest.approx(2)


async def test_a_deleted_node_is_logged_once_and_not_recreated(
    server: FakeApiServer,
    start: Callable[..., NodeStatusManager],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="nodeagent")
    start()
    await asyncio.sleep(1)
    server.remove(NODES, NODE)
    await asyncio.sleep(60)

    assert server.stored(NODES, NODE) is None
    assert len(server.calls_to("create", "nodes")) == 1
    gone = [r for r in caplog.records if r.getMessage().startswith("Node not found")]
    assert len(gone) == 1

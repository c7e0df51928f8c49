"""The node in a real cluster: TLS bootstrap, registration, status, Lease, restart, NodeRestriction.

Runs the node managers (credentials, lease, node cache, events, status) in-process, wired as
``nodeagent.agent.build`` wires them, against the real control plane of the ``control_plane``
fixture (etcd, kube-apiserver with Node authorizer and NodeRestriction, controller-manager with
CSR auto-approval and signing). No CRI yet: the node reports Ready=False with the kubelet's
"container runtime status check may not have completed yet".
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import stat
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from harness.controlplane_args import free_port

from nodeagent.apiserver import (
    NODES,
    ApiClient,
    Forbidden,
    PatchType,
    WatchCache,
    load_kubeconfig,
)
from nodeagent.certificate.manager import CredentialSettings, CredentialsManager
from nodeagent.clock import RealClock
from nodeagent.events import EventRecorder
from nodeagent.manager import Manager
from nodeagent.nodelease import LEASE_NAMESPACE, NodeLeaseController
from nodeagent.nodestatus.compute import kubelet_version
from nodeagent.nodestatus.facts import HostFacts
from nodeagent.nodestatus.manager import NodeStatusManager
from nodeagent.nodestatus.report import STATE_FILE, NodeReport
from nodeagent.nodestatus.setters import runtime_not_checked
from nodeagent.nodestatus.settings import NodeSettings

pytestmark = pytest.mark.integration

RUNTIME_MESSAGE = "container runtime status check may not have completed yet"


@dataclass
class Node:
    name: str
    settings: NodeSettings
    api: ApiClient
    lease: NodeLeaseController
    renewals: list[float]


def node_settings(name: str, root: Path, bootstrap: Path | None) -> NodeSettings:
    return NodeSettings(
        node_name=name,
        hostname=name,
        root_dir=root,
        kubeconfig=root / "kubeconfig",
        bootstrap_kubeconfig=bootstrap,
        node_labels={"node.kubernetes.io/pool": "integration"},
        register_with_taints=({"key": "dedicated", "value": "it", "effect": "NoSchedule"},),
        rotate_certificates=True,
    )


@contextlib.asynccontextmanager
async def running(settings: NodeSettings) -> AsyncIterator[Node]:
    """The node half of ``agent.build``: started in order, stopped in reverse order."""
    clock = RealClock()
    name = settings.node_name
    api = ApiClient()
    report = NodeReport(path=settings.root_dir / STATE_FILE, node_name=name, clock=clock)
    renewals: list[float] = []

    def renewed(lease: dict[str, Any]) -> None:
        renewals.append(time.monotonic())
        report.lease_renewed(lease)

    lease = NodeLeaseController(
        api=api,
        clock=clock,
        node_name=name,
        lease_duration_seconds=settings.lease_duration_seconds,
        on_repeated_failure=api.reset_connections,
        on_renewed=renewed,
    )
    credentials = CredentialsManager(
        api=api,
        clock=clock,
        on_credentials=report.credentials,
        settings=CredentialSettings(
            node_name=name,
            kubeconfig=settings.kubeconfig,
            bootstrap_kubeconfig=settings.bootstrap_kubeconfig,
            pki_dir=settings.pki_dir,
            rotate_certificates=settings.rotate_certificates,
        ),
    )
    node_cache = WatchCache(
        api=api, resource=NODES, field_selector=f"metadata.name={name}", name="cache:node"
    )
    events = EventRecorder(api=api, clock=clock, node_name=name)
    status = NodeStatusManager(
        api=api,
        settings=settings,
        node_cache=node_cache,
        events=events,
        facts=HostFacts(settings=settings, clock=clock, runtime_status=runtime_not_checked),
        on_repeated_failure=api.reset_connections,
        on_reported=report.status_reported,
    )
    managers: list[Manager] = [api, lease, credentials, node_cache, events, status, report]
    tasks = [asyncio.create_task(m.run(), name=m.name) for m in managers]
    try:
        yield Node(name=name, settings=settings, api=api, lease=lease, renewals=renewals)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception():
                raise AssertionError(f"manager {t.get_name()} crashed") from t.exception()
    finally:
        for t in reversed(tasks):
            t.cancel()
            await asyncio.gather(t, return_exceptions=True)


async def until(what: str, check: Callable[[], Any], *, within: float, every: float = 1.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        result = await asyncio.to_thread(check)
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {within:g}s waiting for {what}")
        await asyncio.sleep(every)


@pytest.fixture
def node_name(control_plane: Any) -> Any:
    name = f"it-{secrets.token_hex(3)}"
    yield name
    for kind, ns in (("node", None), ("lease", LEASE_NAMESPACE)):
        args = ["delete", kind, name, "--ignore-not-found", "--wait=false"]
        control_plane.kubectl(*args, *(["-n", ns] if ns else []), check=False)


@pytest.fixture
def bootstrap(control_plane: Any) -> Path:
    path: Path = control_plane.bootstrap_kubeconfig(
        control_plane.bootstrap_token(), name=f"bootstrap-{secrets.token_hex(3)}"
    )
    return path


def get(control_plane: Any, *args: str) -> Any:
    done = control_plane.kubectl("get", "-o", "json", *args, check=False)
    if done.returncode != 0:
        return None
    import json

    return json.loads(done.stdout)


def conditions(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in node.get("status", {}).get("conditions", [])}


async def test_bootstrap_token_start_registers_the_node_and_heartbeats(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    settings = node_settings(node_name, tmp_path / "root", bootstrap)
    started = time.monotonic()
    async with running(settings) as node:
        obj = await until("the Node", lambda: get(control_plane, "node", node_name), within=60)
        registered = time.monotonic() - started
        await until(
            "three lease renewals after creation", lambda: len(node.renewals) >= 4, within=45
        )
        lease = get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name)
        obj = get(control_plane, "node", node_name)
        csrs = [
            c
            for c in get(control_plane, "csr")["items"]
            if c["spec"]["username"].startswith("system:bootstrap:")
            and c["metadata"]["name"].startswith("node-csr-")
            and c.get("status", {}).get("certificate")
        ]
        listing = control_plane.kubectl("get", "nodes", node_name).stdout

    boot_id = await asyncio.to_thread(Path("/proc/sys/kernel/random/boot_id").read_text)
    boot_id = boot_id.strip()

    # TLS bootstrap: an auto-approved kubelet-client CSR, files 0600, node identity in use.
    assert any(
        c["spec"]["signerName"] == "kubernetes.io/kube-apiserver-client-kubelet"
        and c["spec"]["usages"] == ["digital signature", "client auth"]
        for c in csrs
    )
    assert stat.S_IMODE(os.stat(settings.kubeconfig).st_mode) == 0o600
    current = settings.pki_dir / "kubelet-client-current.pem"
    assert stat.S_IMODE(os.stat(current.resolve()).st_mode) == 0o600
    assert load_kubeconfig(settings.kubeconfig).token is None

    # Registration: labels, taints, annotation.
    labels = obj["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == node_name
    assert (labels["kubernetes.io/os"], labels["beta.kubernetes.io/os"]) == ("linux", "linux")
    assert labels["kubernetes.io/arch"] == labels["beta.kubernetes.io/arch"]
    assert labels["node.kubernetes.io/pool"] == "integration"
    assert {"key": "dedicated", "value": "it", "effect": "NoSchedule"} in obj["spec"]["taints"]
    assert (
        obj["metadata"]["annotations"]["volumes.kubernetes.io/controller-managed-attach-detach"]
        == "true"
    )

    # Status: addresses, capacity, nodeInfo, conditions.
    status = obj["status"]
    assert status["addresses"][-1] == {"type": "Hostname", "address": node_name}
    assert status["addresses"][0]["type"] == "InternalIP"
    assert status["capacity"]["cpu"] == str(os.cpu_count())
    assert status["capacity"]["pods"] == "110"
    assert "memory" in status["allocatable"] and "ephemeral-storage" in status["capacity"]
    assert status["nodeInfo"]["kubeletVersion"] == kubelet_version()
    assert status["nodeInfo"]["containerRuntimeVersion"] == "unknown"
    assert status["nodeInfo"]["bootID"] == boot_id
    ready = conditions(obj)["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == (
        "False",
        "KubeletNotReady",
        RUNTIME_MESSAGE,
    )
    assert conditions(obj)["MemoryPressure"]["reason"] == "KubeletHasSufficientMemory"
    assert " NotReady " in listing and node_name in listing

    # Lease: owned by the Node, renewed every 10s + up to 4%.
    assert lease["spec"]["holderIdentity"] == node_name
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": obj["metadata"]["uid"]}
    ]
    intervals = [b - a for a, b in zip(node.renewals, node.renewals[1:], strict=False)]
    assert all(9.9 <= i <= 10.6 for i in intervals[1:]), intervals
    print(f"registered after {registered:.1f}s; lease renewal intervals {intervals}")


async def test_stopped_agent_goes_unknown_and_a_restart_resumes_the_same_node(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    settings = node_settings(node_name, tmp_path / "root", bootstrap)
    async with running(settings) as node:
        await until("a renewed lease", lambda: len(node.renewals) >= 2, within=60)
        uid = get(control_plane, "node", node_name)["metadata"]["uid"]
    stopped = time.monotonic()

    unknown = await until(
        "Ready=Unknown from the node-lifecycle controller",
        lambda: (
            (c := conditions(get(control_plane, "node", node_name))["Ready"])["status"] == "Unknown"
            and c
        ),
        within=120,
        every=2,
    )
    went_unknown = time.monotonic() - stopped
    assert unknown["reason"] == "NodeStatusUnknown"
    assert unknown["message"] == "Kubelet stopped posting node status."

    before = get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name)["spec"]["renewTime"]
    restarted = time.monotonic()
    async with running(node_settings(node_name, tmp_path / "root", None)) as node:
        await until("a lease renewal after restart", lambda: node.renewals, within=30)
        resumed = node.renewals[0] - restarted
        back = await until(
            "our Ready condition again",
            lambda: (
                (c := conditions(get(control_plane, "node", node_name))["Ready"])["reason"]
                == "KubeletNotReady"
                and c
            ),
            within=30,
        )
        after = get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name)["spec"]["renewTime"]
        assert get(control_plane, "node", node_name)["metadata"]["uid"] == uid  # same Node

    assert after > before
    assert resumed <= 10.4
    assert back["message"] == RUNTIME_MESSAGE
    print(f"Unknown {went_unknown:.0f}s after stop; lease resumed {resumed:.1f}s after restart")


async def test_a_deleted_lease_is_recreated_within_one_renew_interval(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    async with running(node_settings(node_name, tmp_path / "root", bootstrap)) as node:
        await until("a renewed lease", lambda: len(node.renewals) >= 2, within=60)
        old = get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name)["metadata"]["uid"]
        control_plane.kubectl("delete", "lease", "-n", LEASE_NAMESPACE, node_name)
        deleted = time.monotonic()
        new = await until(
            "a new lease",
            lambda: (
                (x := get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name))
                and x["metadata"]["uid"] != old
                and x
            ),
            within=20,
            every=0.5,
        )
        took = time.monotonic() - deleted

    assert new["metadata"]["ownerReferences"][0]["name"] == node_name
    assert took <= 11.0


async def test_node_restriction_forbids_what_a_node_may_not_do(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    other = f"{node_name}-other"
    control_plane.apply({"apiVersion": "v1", "kind": "Node", "metadata": {"name": other}})
    try:
        async with running(node_settings(node_name, tmp_path / "root", bootstrap)) as node:
            await until("the Node", lambda: get(control_plane, "node", node_name), within=60)
            api = node.api
            with pytest.raises(Forbidden) as other_node:
                await api.patch(
                    NODES, other, {"metadata": {"labels": {"x": "y"}}}, patch_type=PatchType.MERGE
                )
            with pytest.raises(Forbidden) as restricted_label:
                await api.patch(
                    NODES,
                    node_name,
                    {"metadata": {"labels": {"node-restriction.kubernetes.io/pool": "x"}}},
                    patch_type=PatchType.MERGE,
                )
    finally:
        control_plane.kubectl("delete", "node", other, "--ignore-not-found", check=False)

    assert str(other_node.value).startswith(f"PATCH /api/v1/nodes/{other}: ")
    assert "forbidden" in str(other_node.value) and "(403 Forbidden)" in str(other_node.value)
    assert "node-restriction.kubernetes.io/" in str(restricted_label.value)


async def test_an_idle_node_keeps_its_connections_open_one_per_watch_plus_requests(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    import psutil  # type: ignore[import-untyped]

    port = int(control_plane.server.rsplit(":", 1)[1])

    def connections() -> set[int]:
        return {
            c.laddr.port
            for c in psutil.Process().net_connections(kind="tcp")
            if c.raddr and c.raddr.port == port and c.status == "ESTABLISHED"
        }

    async with running(node_settings(node_name, tmp_path / "root", bootstrap)) as node:
        await until("two lease renewals", lambda: len(node.renewals) >= 2, within=60)
        first = connections()
        await until("two more lease renewals", lambda: len(node.renewals) >= 4, within=60)
        later = connections()

    # The node cache's watch has a connection of its own; Lease renewals and status patches
    # reuse the request pool's kept-alive connections (a few after the start-up burst) instead
    # of dialling every 10 s.
    assert 2 <= len(first) <= 5, first
    assert later == first


@pytest.fixture
def private_plane(control_plane_binaries: Any, tmp_path: Path) -> Any:
    """A control plane of its own: stopping its apiserver for two minutes makes its scheduler
    and controller-manager lose leader election and exit, which must not hit other tests."""
    from harness.controlplane import new_run_dir, start_control_plane

    # stamped with this pid: a run killed before plane.stop() leaves it for the next run's sweep
    # (a bare mkdtemp one was left in /tmp from 00:58 on 2026-11-29)
    root = new_run_dir()
    plane = start_control_plane(
        binaries=control_plane_binaries, root=root, log_dir=tmp_path / "control-plane-logs"
    )
    yield plane
    plane.stop()


async def test_a_two_minute_apiserver_outage_is_survived_without_a_log_flood(
    private_plane: Any,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    import logging

    from harness.processes import start

    control_plane = private_plane
    node_name = f"it-{secrets.token_hex(3)}"
    bootstrap = control_plane.bootstrap_kubeconfig(control_plane.bootstrap_token())
    caplog.set_level(logging.INFO, logger="nodeagent")
    index = next(i for i, p in enumerate(control_plane.procs) if p.name == "kube-apiserver")
    async with running(node_settings(node_name, tmp_path / "root", bootstrap)) as node:
        await until("a renewed lease", lambda: len(node.renewals) >= 2, within=60)
        proc = control_plane.procs[index]
        await asyncio.to_thread(proc.stop)
        caplog.clear()
        await asyncio.sleep(120)
        control_plane.procs[index] = start(name=proc.name, argv=proc.argv, log=proc.log)
        await until("kube-apiserver /readyz", control_plane.readyz, within=120, every=0.5)
        back = time.monotonic()
        count = len(node.renewals)
        await until("a lease renewal", lambda: len(node.renewals) > count, within=30, every=0.2)
        resumed = node.renewals[count] - back

    lease_steps = [
        r for r in caplog.records if r.getMessage() == "Failed to ensure lease exists, will retry"
    ]
    per_logger: dict[str, int] = {}
    for r in caplog.records:
        per_logger[r.name] = per_logger.get(r.name, 0) + 1
    print(
        f"heartbeat resumed {resumed:.1f}s after readyz; {len(caplog.records)} log lines "
        f"during the outage {per_logger}; lease backoff steps {len(lease_steps)}"
    )
    assert resumed <= 10.0
    assert 10 <= len(lease_steps) <= 30  # 200ms doubling to 7s over 120s: about 22 steps


async def nodeagent_status(cfg: Path, *extra: str) -> Any:
    import subprocess
    import sys

    argv = [sys.executable, "-m", "nodeagent", "status", *extra, "--config", str(cfg)]
    return await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=30, check=False
    )


async def test_nodeagent_run_as_a_process_registers_reports_status_and_stops_cleanly(
    control_plane: Any, node_name: str, bootstrap: Path, tmp_path: Path
) -> None:
    """`nodeagent run` with only a bootstrap token; `nodeagent status`; SIGTERM exits 0."""
    import json
    import signal
    import subprocess
    import sys

    import yaml

    root = tmp_path / "root"
    cfg = tmp_path / "config.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {
                    "kubeconfig": str(root / "kubeconfig"),
                    "bootstrapKubeconfig": str(bootstrap),
                    "hostnameOverride": node_name,
                    "rootDir": str(root),
                    "nodeLabels": {"node.kubernetes.io/pool": "process"},
                },
                "kubelet": {
                    "failCgroupV1": False,  # this host may be cgroup v1
                    "port": free_port(),  # a `make up` node may hold 10250
                    "healthzPort": free_port(),
                    "rotateCertificates": True,
                    "registerWithTaints": [
                        {"key": "dedicated", "value": "proc", "effect": "NoSchedule"}
                    ],
                },
                # the host's root netns is not this test's to program
                "proxy": {"enabled": False},
            }
        )
    )
    log_path = tmp_path / "nodeagent.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "nodeagent",
            "run",
            "--config",
            str(cfg),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        lease = await until(
            "two renewals",
            lambda: (
                (x := get(control_plane, "lease", "-n", LEASE_NAMESPACE, node_name))
                and x["spec"]["renewTime"] > x["metadata"]["creationTimestamp"]
                and x
            ),
            within=60,
        )
        await asyncio.sleep(1.5)  # the state file is written at most once a second
        status = await nodeagent_status(cfg)
        as_json = await nodeagent_status(cfg, "--json")
        node = get(control_plane, "node", node_name)
    finally:
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(proc.wait(), 20)

    output = log_path.read_text()
    assert code == 0, output[-3000:]
    assert node["metadata"]["labels"]["node.kubernetes.io/pool"] == "process"
    assert lease["spec"]["holderIdentity"] == node_name
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[0].startswith(f"Node:          {node_name}  (nodeagent ")
    assert any(line.split()[:3] == ["Ready", "False", "KubeletNotReady"] for line in lines)
    assert any(
        line.startswith(f"Lease:         kube-node-lease/{node_name} renewed ") for line in lines
    )
    assert any(
        line.startswith(f"Credentials:   CN=system:node:{node_name},O=system:nodes, expires ")
        for line in lines
    )
    state = json.loads(as_json.stdout)
    assert state["node"] == node_name and state["lease"]["holderIdentity"] == node_name
    print(status.stdout)

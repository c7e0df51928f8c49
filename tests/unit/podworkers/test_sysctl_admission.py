"""Sysctl admission through the sync loop: a pod asking for a sysctl the node does not allow is
Failed ``SysctlForbidden`` with the kubelet's message and a Warning Event, and never started;
allowed sysctls reach the sandbox config in their dotted form."""

from __future__ import annotations

from typing import Any

import pytest
from pod_stack import NODE, Stack, running_stack, until

from nodeagent.apiserver import PODS
from nodeagent.events import ObjectReference
from nodeagent.lifecycle.admission import AdmitResult, admit_sysctls
from nodeagent.podspec import Pod
from nodeagent.sysctl import node_allowlist
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import pod, pod_object

pytestmark = pytest.mark.looptime

ALLOWLIST = node_allowlist("6.1.0", ["kernel.msg*"])


class Events:
    def __init__(self) -> None:
        self.pods: list[tuple[str, str, str, str]] = []

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.pods.append((ref.name, type, reason, message))


def sysctls(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"securityContext": {"sysctls": [{"name": n, "value": v} for n, v in pairs]}}


def seed(server: FakeApiServer, name: str, **spec: Any) -> dict[str, Any]:
    body = pod_object(name, node=NODE, restartPolicy="Never", **spec)
    del body["metadata"]["uid"]
    return server.seed(PODS, body)


def status(stack: Stack, name: str) -> dict[str, Any]:
    return dict((stack.pod(name) or {}).get("status") or {})


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param({}, None, id="no security context"),
        pytest.param(sysctls(("kernel.shm_rmid_forced", "1")), None, id="safe"),
        pytest.param(sysctls(("kernel.msgmax", "65536")), None, id="allowed unsafe"),
        pytest.param(
            sysctls(("kernel.shm_rmid_forced", "1"), ("kernel.shmmax", "1"), ("vm.x", "1")),
            AdmitResult(
                False, "SysctlForbidden", 'forbidden sysctl: "kernel.shmmax" not allowlisted'
            ),
            id="the first refused sysctl is named",
        ),
        pytest.param(
            {"hostNetwork": True, **sysctls(("net.ipv4.ip_unprivileged_port_start", "0"))},
            AdmitResult(
                False,
                "SysctlForbidden",
                'forbidden sysctl: "net.ipv4.ip_unprivileged_port_start" not allowed with '
                "host Net enabled",
            ),
            id="net sysctl on the host network",
        ),
        pytest.param(
            {"hostIPC": True, **sysctls(("kernel.msgmax", "65536"))},
            AdmitResult(
                False,
                "SysctlForbidden",
                'forbidden sysctl: "kernel.msgmax" not allowed with host IPC enabled',
            ),
            id="ipc sysctl with the host's IPC namespace",
        ),
    ],
)
def test_admit_sysctls(spec: dict[str, Any], expected: AdmitResult | None) -> None:
    assert admit_sysctls(pod(**spec), ALLOWLIST) == expected


async def test_a_forbidden_sysctl_fails_the_pod_before_anything_runs(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    events = Events()
    async with running_stack(server, runtime, events=events, sysctls=ALLOWLIST) as stack:
        seed(server, "unsafe", **sysctls(("kernel.shmmax", "100000000")))
        seed(
            server,
            "allowed",
            **sysctls(("kernel/msgmax", "65536"), ("net.ipv4.tcp_rmem", "4096 87380 6291456")),
        )
        refused = await until(lambda: status(stack, "unsafe").get("phase") == "Failed")
        assert refused
        final = status(stack, "unsafe")
        assert final["reason"] == "SysctlForbidden"
        assert final["message"] == (
            'Pod was rejected: forbidden sysctl: "kernel.shmmax" not allowlisted'
        )
        assert [e for e in events.pods if e[0] == "unsafe"] == [
            (
                "unsafe",
                "Warning",
                "SysctlForbidden",
                'forbidden sysctl: "kernel.shmmax" not allowlisted',
            )
        ]
        await until(lambda: status(stack, "allowed").get("phase") == "Running")
        [sandbox] = runtime.sandbox_ids
        assert runtime.sandbox_config(sandbox).metadata.name == "allowed"
        assert dict(runtime.sandbox_config(sandbox).linux.sysctls) == {
            "kernel.msgmax": "65536",
            "net.ipv4.tcp_rmem": "4096 87380 6291456",
        }
        assert await stack.containers("unsafe") == []


async def test_the_eviction_managers_refusal_comes_first(
    server: FakeApiServer, runtime: FakeRuntime
) -> None:
    events = Events()

    def evicting(_: Pod) -> AdmitResult:
        return AdmitResult(False, "Evicted", "Pod was rejected: The node had condition: [X]. ")

    async with running_stack(server, runtime, events=events, sysctls=ALLOWLIST) as stack:
        stack.sync_loop.admit_handlers.append(evicting)
        seed(server, "unsafe", **sysctls(("kernel.shmmax", "1")))
        await until(lambda: status(stack, "unsafe").get("phase") == "Failed")
        assert status(stack, "unsafe")["reason"] == "Evicted"

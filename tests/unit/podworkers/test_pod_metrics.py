"""The pod pipeline's kubelet metrics: admission rejection labels, start counts, and what a
pod that runs and ends adds to ``/metrics`` over the fakes."""

from __future__ import annotations

import pytest
from pod_stack import NODE, Stack, until
from prometheus_client import REGISTRY

from nodeagent.apiserver import PODS
from nodeagent.kuberuntime.metrics import count_start
from nodeagent.pods.metrics import rejection_label
from nodeagent.testing.pods import container, pod_object


@pytest.mark.parametrize(
    ("reason", "label"),
    [
        ("OutOfcpu", "OutOfcpu"),
        ("OutOfexample.com/gpu", "OutOfExtendedResources"),
        ("OutOfhugepages-2Mi", "OutOfExtendedResources"),
        ("SysctlForbidden", "SysctlForbidden"),
        ("NodeShutdown", "NodeShutdown"),
        ("NodePorts", "Other"),  # the kubelet's allowlist has no predicate names
        ("TaintToleration", "Other"),
        ("ProbesNotSupported", "Other"),
    ],
)
def test_admission_rejection_labels_are_the_kubelets(reason: str, label: str) -> None:
    assert rejection_label(reason) == label


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_container_still_backing_off_is_no_start() -> None:
    before = sample("kubelet_started_containers_total", container_type="container")
    errors = sample(
        "kubelet_started_containers_errors_total", container_type="container", code="ErrImagePull"
    )
    count_start("container", "CrashLoopBackOff")
    count_start("container", "ErrImagePull")
    count_start("container", None)
    assert sample("kubelet_started_containers_total", container_type="container") == before + 2
    assert (
        sample(
            "kubelet_started_containers_errors_total",
            container_type="container",
            code="ErrImagePull",
        )
        == errors + 1
    )


@pytest.mark.looptime
async def test_a_pod_that_runs_and_fails_is_counted(stack: Stack) -> None:
    terminated = {"container_type": "container", "exit_code": "3", "reason": "Error"}
    done = {"container_type": "init_container", "exit_code": "0", "reason": "Completed"}
    before = (
        sample("kubelet_terminated_containers_total", **terminated),
        sample("kubelet_terminated_containers_total", **done),
        sample("kubelet_started_pods_total"),
        sample("kubelet_started_containers_total", container_type="init_container"),
    )
    body = pod_object(
        "job",
        node=NODE,
        restart_policy="Never",
        init_containers=[container("setup")],
        containers=[container("app")],
    )
    del body["metadata"]["uid"]
    stack.server.seed(PODS, body)

    async def exit_each(name: str, code: int) -> None:
        [ctr] = await until(lambda: stack.running(name))
        stack.runtime.exit_container(ctr.id, exit_code=code)

    await exit_each("setup", 0)
    await exit_each("app", 3)
    await until(lambda: (stack.pod("job") or {}).get("status", {}).get("phase") == "Failed")
    after = (
        sample("kubelet_terminated_containers_total", **terminated),
        sample("kubelet_terminated_containers_total", **done),
        sample("kubelet_started_pods_total"),
        sample("kubelet_started_containers_total", container_type="init_container"),
    )
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 1, 1]
    await until(lambda: sample("kubelet_running_pods") == 0)

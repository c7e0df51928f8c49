"""The pod managers watch Services so containers get the ``KUBERNETES_SERVICE_*`` variables."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.apiserver import SERVICES
from nodeagent.clock import FrozenClock
from nodeagent.config import Config
from nodeagent.kuberuntime.env import ContainerConfigError, make_environment
from nodeagent.pods.envsource import ApiEnvSource
from nodeagent.pods.managers import pod_managers
from nodeagent.podspec import decode_pod
from nodeagent.testing.fake_apiserver import FakeApiServer


def service(namespace: str, name: str, ip: str, port: int, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"clusterIP": ip, "ports": [{"name": "p", "port": port, "protocol": "TCP"}]},
    }


async def test_containers_get_the_kubernetes_service_variables_from_the_services_cache() -> None:
    server = FakeApiServer()
    server.seed(SERVICES, service("default", "kubernetes", "10.96.0.1", 443))
    server.seed(SERVICES, service("app", "web", "10.96.0.20", 80))
    server.seed(SERVICES, service("other", "db", "10.96.0.30", 5432))
    # labels by which the service proxy leaves a Service alone; the kubelet's env ignores them
    owned = {"service.kubernetes.io/service-proxy-name": "other"}
    server.seed(SERVICES, service("app", "owned", "10.96.0.21", 81, **owned))
    marked = {"service.kubernetes.io/headless": ""}
    server.seed(SERVICES, service("app", "marked", "10.96.0.22", 82, **marked))
    pods = pod_managers(
        Config(), api=server, clock=FrozenClock(), node_name="n1", get_node=lambda: None
    )
    cache = pods.services_cache
    assert cache is not None
    assert cache in pods.managers
    task = asyncio.create_task(cache.run())
    try:
        await asyncio.wait_for(cache.wait_synced(), 5)
        env = ApiEnvSource(api=server, host_ips=tuple, allocatable=dict, services=cache.items)
        pod = decode_pod(
            {
                "metadata": {"name": "p", "namespace": "app", "uid": "u1"},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            }
        )
        inputs = await env.inputs(pod)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert inputs.service_env["KUBERNETES_SERVICE_HOST"] == "10.96.0.1"
    assert inputs.service_env["KUBERNETES_SERVICE_PORT"] == "443"
    assert inputs.service_env["WEB_SERVICE_HOST"] == "10.96.0.20"
    assert "DB_SERVICE_HOST" not in inputs.service_env  # another namespace's Service
    assert inputs.service_env["OWNED_SERVICE_HOST"] == "10.96.0.21"
    assert inputs.service_env["MARKED_SERVICE_HOST"] == "10.96.0.22"


async def test_no_environment_before_the_services_were_listed_once() -> None:
    server = FakeApiServer()
    pods = pod_managers(
        Config(), api=server, clock=FrozenClock(), node_name="n1", get_node=lambda: None
    )
    cache = pods.services_cache
    assert cache is not None
    env = ApiEnvSource(
        api=server,
        host_ips=tuple,
        allocatable=dict,
        services=cache.items,
        services_synced=lambda: cache.synced,
    )
    pod = decode_pod(
        {
            "metadata": {"name": "p", "namespace": "app", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )

    inputs = await env.inputs(pod)

    assert inputs.services_synced is False
    with pytest.raises(ContainerConfigError) as refused:
        make_environment(pod, pod.spec.containers[0], inputs)
    assert str(refused.value) == (
        "services have not yet been read at least once, cannot construct envvars"
    )


async def test_a_static_pod_never_waits_for_the_service_list() -> None:
    waited: list[bool] = []

    async def wait_services() -> None:
        waited.append(True)
        await asyncio.Event().wait()

    env = ApiEnvSource(
        api=FakeApiServer(),
        host_ips=tuple,
        allocatable=dict,
        services_synced=lambda: False,
        wait_services=wait_services,
    )
    pod = decode_pod(
        {
            "metadata": {
                "name": "etcd-n1",
                "namespace": "kube-system",
                "uid": "u2",
                "annotations": {"kubernetes.io/config.source": "file"},
            },
            "spec": {
                "containers": [
                    {"name": "c", "image": "busybox", "env": [{"name": "A", "value": "1"}]}
                ]
            },
        }
    )

    inputs = await asyncio.wait_for(env.inputs(pod), 1)

    assert waited == []
    assert ("A", "1") in make_environment(pod, pod.spec.containers[0], inputs)


async def test_the_first_service_list_is_awaited_briefly_before_refusing() -> None:
    server = FakeApiServer()
    server.seed(SERVICES, service("default", "kubernetes", "10.96.0.1", 443))
    pods = pod_managers(
        Config(), api=server, clock=FrozenClock(), node_name="n1", get_node=lambda: None
    )
    cache = pods.services_cache
    assert cache is not None
    env = ApiEnvSource(
        api=server,
        host_ips=tuple,
        allocatable=dict,
        services=cache.items,
        services_synced=lambda: cache.synced,
        wait_services=cache.wait_synced,
    )
    pod = decode_pod(
        {
            "metadata": {"name": "p", "namespace": "app", "uid": "u1"},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]},
        }
    )
    pending = asyncio.create_task(env.inputs(pod))
    await asyncio.sleep(0)
    assert not pending.done()
    task = asyncio.create_task(cache.run())
    try:
        inputs = await asyncio.wait_for(pending, 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    assert inputs.services_synced is True
    assert (
        dict(make_environment(pod, pod.spec.containers[0], inputs))["KUBERNETES_SERVICE_HOST"]
        == "10.96.0.1"
    )

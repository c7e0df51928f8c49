"""The pod managers watch Services so containers get the ``KUBERNETES_SERVICE_*`` variables."""

from __future__ import annotations

import asyncio

from nodeagent.clock import FrozenClock
from nodeagent.config import Config
from nodeagent.pods.managers import pod_managers
from nodeagent.pods.sync import ALL_SERVICES, ApiEnvSource
from nodeagent.podspec import decode_pod
from nodeagent.testing.fake_apiserver import FakeApiServer


def service(namespace: str, name: str, ip: str, port: int) -> dict[str, object]:
    return {
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterIP": ip, "ports": [{"name": "p", "port": port, "protocol": "TCP"}]},
    }


async def test_containers_get_the_kubernetes_service_variables_from_the_services_cache() -> None:
    server = FakeApiServer()
    server.seed(ALL_SERVICES, service("default", "kubernetes", "10.96.0.1", 443))
    server.seed(ALL_SERVICES, service("app", "web", "10.96.0.20", 80))
    server.seed(ALL_SERVICES, service("other", "db", "10.96.0.30", 5432))
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

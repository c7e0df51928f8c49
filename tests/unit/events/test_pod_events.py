"""The Events a pod sync posts, as the kubelet records them: about the container (its
fieldPath) or the pod, in the pod's namespace, with the kubelet's reasons and messages, counted
when they repeat. ``PodSync`` over ``FakeRuntime``, posting through an ``EventRecorder`` to
``FakeApiServer``, in virtual time."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from nodeagent.apiserver import EVENTS, PODS
from nodeagent.events import EventRecorder
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriUnknown
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.pods.envsource import ApiEnvSource
from nodeagent.pods.pleg import GenericPleg
from nodeagent.pods.sync import PodSync
from nodeagent.pods.syncloop import PodsChanged, SyncEvents, SyncLoop
from nodeagent.pods.workers import PodWorkers
from nodeagent.podspec import Pod, decode_pod
from nodeagent.status import StatusManager
from nodeagent.status.manager import PlainDeleter
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod_object

pytestmark = pytest.mark.looptime

NODE = "node-a"
NS = "team-a"
SETTINGS = PodRuntimeSettings(
    node_name=NODE,
    pod_logs_dir="/var/log/pods",
    container_logs_dir="/var/log/containers",
    cluster_dns=("10.96.0.10",),
    cluster_domain="cluster.local",
    memory_capacity=8 * 2**30,
)
START_FAILED = (
    "failed to create containerd task: failed to create shim task: OCI runtime create failed: "
    'runc create failed: unable to start container process: exec: "nope": executable file '
    "not found in $PATH: unknown"
)


@dataclass
class Env:
    server: FakeApiServer
    runtime: FakeRuntime
    status: StatusManager
    podsync: PodSync
    recorder: EventRecorder

    def seed(self, name: str = "web", **kw: Any) -> Pod:
        return decode_pod(self.server.seed(PODS, pod_object(name, namespace=NS, node=NODE, **kw)))

    def events(self, name: str = "web") -> list[tuple[str, str, str, str, int]]:
        """(fieldPath, type, reason, message, count) of ``name``'s events, oldest first."""
        found = [e for e in self.server.objects(EVENTS) if e["involvedObject"]["name"] == name]
        found.sort(key=lambda e: e["metadata"]["name"])
        return [
            (
                e["involvedObject"].get("fieldPath", ""),
                e["type"],
                e["reason"],
                e["message"],
                e["count"],
            )
            for e in found
        ]

    async def sync(self, pod: Pod) -> None:
        await self.podsync.sync_pod(pod)
        await asyncio.sleep(0.5)  # the recorder posts in the background


@pytest.fixture
async def env() -> AsyncIterator[Env]:
    server = FakeApiServer()
    runtime = FakeRuntime(clock=server.clock, runtime_name="containerd")
    runtime.add_image(BUSYBOX, size=4_400_000)
    recorder = EventRecorder(api=server, clock=server.clock, node_name=NODE)

    async def host_dns() -> ResolvConf:
        return ResolvConf(servers=("192.0.2.53",))

    status = StatusManager(api=server, deleter=PlainDeleter(api=server))
    podsync = PodSync(
        runtime=RuntimeManager(
            runtime=runtime,
            images=runtime,
            settings=SETTINGS,
            clock=server.clock,
            files=MemoryFiles(),
        ),
        status=status,
        clock=server.clock,
        env=ApiEnvSource(api=server, host_ips=lambda: ("192.0.2.10",), allocatable=dict),
        host_dns=host_dns,
        host_ips=lambda: ("192.0.2.10",),
        events=recorder,
    )
    task = asyncio.create_task(recorder.run())
    yield Env(server, runtime, status, podsync, recorder)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


APP = "spec.containers{app}"


async def test_a_started_pod_posts_pulled_created_started_about_each_container(
    env: Env,
) -> None:
    web = env.seed(init_containers=[container("setup", command=["true"])])
    await env.sync(web)

    setup = "spec.initContainers{setup}"
    present = f'Container image "{BUSYBOX}" already present on machine'
    assert env.events() == [
        (setup, "Normal", "Pulled", present, 1),
        (setup, "Normal", "Created", "Container created", 1),
        (setup, "Normal", "Started", "Container started", 1),
    ]
    [event, *_] = env.server.objects(EVENTS)
    assert event["metadata"]["namespace"] == NS
    assert event["involvedObject"]["uid"] == web.uid
    assert event["involvedObject"]["resourceVersion"] == web.metadata.resource_version


async def test_a_missing_image_posts_pull_failure_then_back_off_and_counts_repeats(
    env: Env,
) -> None:
    image = "localhost/nope:1"
    web = env.seed(containers=[container("app", image=image)])
    pull_failed = (
        f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull and '
        f'unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
    )

    await env.sync(web)
    assert env.events() == [
        (APP, "Normal", "Pulling", f'Pulling image "{image}"', 1),
        (APP, "Warning", "Failed", pull_failed, 1),
        (APP, "Warning", "Failed", "Error: ErrImagePull", 1),
    ]
    await env.sync(web)  # within the 10s image back-off
    await env.sync(web)
    assert env.events()[3:] == [
        (APP, "Normal", "BackOff", f'Back-off pulling image "{image}"', 2),
        (APP, "Warning", "Failed", "Error: ImagePullBackOff", 2),
    ]

    env.runtime.publish(image, size=2_000_000)  # the image appears in the registry
    await asyncio.sleep(10)
    await env.sync(web)
    assert env.events()[0] == (APP, "Normal", "Pulling", f'Pulling image "{image}"', 2)
    assert env.events()[5:7] == [
        (
            APP,
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in 0s (0s including waiting). '
            "Image size: 2000000 bytes.",
            1,
        ),
        (APP, "Normal", "Created", "Container created", 1),
    ]


async def test_a_missing_config_map_posts_the_config_error_each_sync(env: Env) -> None:
    ref = {"configMapKeyRef": {"name": "settings", "key": "mode"}}
    web = env.seed(containers=[container("app", env=[{"name": "M", "valueFrom": ref}])])
    for _ in range(3):
        await env.sync(web)

    assert env.events()[1:] == [
        (APP, "Warning", "Failed", 'Error: configmap "settings" not found', 3),
    ]


async def test_a_start_failure_posts_the_runtime_message_without_the_grpc_code(
    env: Env,
) -> None:
    env.runtime.inject_error(
        "StartContainer", CriUnknown("x", code="Unknown", details=START_FAILED)
    )
    web = env.seed()
    await env.sync(web)

    assert env.events()[1:] == [
        (APP, "Normal", "Created", "Container created", 1),
        (APP, "Warning", "Failed", f"Error: {START_FAILED}", 1),
    ]
    [app] = (env.status.last_status(web.uid) or {})["containerStatuses"]
    assert app["state"]["waiting"] == {"reason": "RunContainerError", "message": START_FAILED}


async def test_a_crash_looping_container_posts_back_off_with_the_pod_named(env: Env) -> None:
    web = env.seed()
    await env.sync(web)
    for _ in range(2):  # the first restart is immediate, the second waits 10s
        listed = await env.runtime.list_containers()
        [running] = [c for c in listed if c.state == cri.CONTAINER_RUNNING]
        env.runtime.exit_container(running.id, exit_code=1)
        await env.sync(web)

    back_off = f"Back-off restarting failed container app in pod web_{NS}({web.uid})"
    assert env.events()[-1] == (APP, "Warning", "BackOff", back_off, 1)
    assert [e[2:] for e in env.events() if e[2] == "Started"] == [
        ("Started", "Container started", 2)
    ]


async def test_a_sandbox_failure_is_an_event_about_the_pod(env: Env) -> None:
    env.runtime.inject_error(
        "RunPodSandbox", CriUnknown("x", code="Unknown", details="failed to setup network")
    )
    web = env.seed()
    await env.sync(web)

    assert env.events() == [
        (
            "",
            "Warning",
            "FailedCreatePodSandBox",
            "Failed to create pod sandbox: rpc error: code = Unknown desc = "
            "failed to setup network",
            1,
        )
    ]


async def test_a_lost_sandbox_posts_sandbox_changed_about_the_pod(env: Env) -> None:
    web = env.seed()
    await env.sync(web)
    [sandbox] = env.runtime.sandbox_ids
    await env.runtime.stop_pod_sandbox(sandbox)  # its network went away, say
    await env.sync(web)

    changed = "Pod sandbox changed, it will be killed and re-created."
    assert ("", "Normal", "SandboxChanged", changed, 1) in env.events()


async def test_killing_a_pod_posts_stopping_for_each_running_container(env: Env) -> None:
    web = env.seed(containers=[container("app"), container("log")])
    await env.sync(web)
    await env.podsync.sync_terminating_pod(web, 30)
    await asyncio.sleep(0.5)

    killing = [e for e in env.events() if e[2] == "Killing"]
    assert sorted(killing) == [
        (APP, "Normal", "Killing", "Stopping container app", 1),
        ("spec.containers{log}", "Normal", "Killing", "Stopping container log", 1),
    ]


class _Source:
    """A pod source that has already listed ``pods``."""

    def __init__(self, *pods: dict[str, Any]) -> None:
        self._pods = list(pods)

    synced = True
    resource_version = "1"

    def items(self) -> list[dict[str, Any]]:
        return self._pods

    async def wait_synced(self) -> None:
        pass

    async def wait_for(self, predicate: Any) -> None:
        await asyncio.Event().wait()


def sync_loop(env: Env, *pods: dict[str, Any], **kw: Any) -> SyncLoop:
    """A sync loop over ``pods`` (no watch), posting its Events to ``env``'s recorder."""
    return SyncLoop(
        node_name=NODE,
        events=SyncEvents(),
        source=_Source(*pods),
        workers=PodWorkers(syncer=env.podsync),
        pleg=GenericPleg(runtime=env.runtime, on_event=lambda _: None),
        podsync=env.podsync,
        status=env.status,
        clock=env.server.clock,
        event_sink=env.recorder,
        **kw,
    )


async def test_a_pod_that_does_not_fit_is_rejected_with_a_warning_about_it(env: Env) -> None:
    big = env.server.seed(
        PODS,
        pod_object(
            "big", namespace=NS, node=NODE, containers=[container("app", requests={"cpu": "2"})]
        ),
    )
    loop = sync_loop(env, big, allocatable=lambda: {"cpu": "1", "memory": "1Gi", "pods": "110"})
    await loop.sync_loop_iteration(PodsChanged())
    await asyncio.sleep(0.5)

    message = "Node didn't have enough resource: cpu, requested: 2000, used: 0, capacity: 1000"
    assert env.events("big") == [("", "Warning", "OutOfcpu", message, 1)]
    assert env.runtime.sandbox_ids == []


async def test_a_pod_the_node_cannot_read_gets_a_warning_naming_the_field(env: Env) -> None:
    # The apiserver stores a decimal quantity above 2^63-1 as a big decimal; the node refuses it.
    odd = env.server.seed(
        PODS,
        pod_object(
            "odd", namespace=NS, node=NODE, containers=[container("app", limits={"memory": "100E"})]
        ),
    )
    loop = sync_loop(env, odd)
    await loop.sync_loop_iteration(PodsChanged())
    await loop.sync_loop_iteration(PodsChanged())  # seen again: still one event
    await asyncio.sleep(0.5)

    [(field_path, type_, reason, message, count)] = env.events("odd")
    assert (field_path, type_, reason, count) == ("", "Warning", "FailedValidation", 1)
    assert message.startswith("Pod cannot run on this node, its spec does not pass the node's")
    assert "spec.containers[0].resources.limits.memory" in message
    assert "100E" in message
    assert env.runtime.sandbox_ids == []

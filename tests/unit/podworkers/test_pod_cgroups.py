"""The container manager's place in a pod's life: its cgroup exists before the sandbox, and
goes once the pod's containers are stopped; housekeeping asks about orphans."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from pod_stack import NODE, make_runtime, running_stack, until

from nodeagent.apiserver import PODS
from nodeagent.cm.policy import ResourceConfig
from nodeagent.kuberuntime import types as cri
from nodeagent.podspec import Pod
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import pod_object

pytestmark = pytest.mark.looptime


class RecordingCgroups:
    """What the container manager was asked, with what the runtime held at that moment."""

    def __init__(self, runtime: FakeRuntime) -> None:
        self.runtime = runtime
        self.log: list[tuple[str, str, int, int]] = []
        self.asked_orphans = 0

    async def ensure_pod(self, pod: Pod, *, widen_only: bool = False) -> None:
        self.log.append(("ensure", pod.uid, len(self.runtime.sandbox_ids), 0))

    def applied(self, uid: str) -> ResourceConfig | None:
        return None

    def pod_config(self, pod: Pod) -> ResourceConfig:
        return ResourceConfig()

    async def pod_memory_usage(self, uid: str) -> int | None:
        return None

    async def remove_pod(self, uid: str) -> None:
        running = sum(
            c.state == cri.CONTAINER_RUNNING for c in await self.runtime.list_containers()
        )
        self.log.append(("remove", uid, len(self.runtime.sandbox_ids), running))

    async def clean_orphans(self, keep: Callable[[str], bool]) -> None:
        self.asked_orphans += 1


async def test_pod_cgroup_before_the_sandbox_and_removed_after_the_containers() -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    cgroups = RecordingCgroups(runtime)
    body = pod_object("web", node=NODE)
    del body["metadata"]["uid"]
    uid = server.seed(PODS, body)["metadata"]["uid"]
    async with running_stack(server, runtime, cgroups=cgroups) as stack:
        await until(lambda: stack.running("app"))
        assert cgroups.log[0] == ("ensure", uid, 0, 0)  # before RunPodSandbox
        stack.server.remove(PODS, "web", "default")
        await until(lambda: any(entry[0] == "remove" for entry in cgroups.log))
        await until(lambda: cgroups.asked_orphans > 0, within=120)
    removes = [entry for entry in cgroups.log if entry[0] == "remove"]
    assert removes[0][1] == uid
    assert removes[0][3] == 0  # no container left when the cgroup goes

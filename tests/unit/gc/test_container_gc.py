"""Container GC against the fake runtime and real files under ``tmp_path``."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from pathlib import Path

import pytest

from nodeagent.clock import FrozenClock
from nodeagent.gc import ContainerGC, ContainerGCPolicy
from nodeagent.gc.podstate import PodExists
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import cri_error
from nodeagent.testing.fake_runtime import FakeRuntime

IMAGE = "docker.io/library/busybox:1.36"


class Pods:
    """The pods the agent knows; ``synced`` False: the pod sources have not listed yet."""

    def __init__(self) -> None:
        self.live: set[str] = set()
        self.synced = True

    def pod_exists(self) -> PodExists | None:
        return self.live.__contains__ if self.synced else None


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


@dataclasses.dataclass
class Node:
    runtime: FakeRuntime
    clock: FrozenClock
    pods: Pods
    events: Events
    pod_logs: Path
    container_logs: Path

    def gc(self, policy: ContainerGCPolicy | None = None) -> ContainerGC:
        return ContainerGC(
            runtime=self.runtime,
            pods=self.pods,
            clock=self.clock,
            events=self.events,
            pod_logs_dir=str(self.pod_logs),
            container_logs_dir=str(self.container_logs),
            policy=policy or ContainerGCPolicy(),
        )


@pytest.fixture
def node(tmp_path: Path) -> Node:
    clock = FrozenClock()
    runtime = FakeRuntime(clock=clock)
    runtime.add_image(IMAGE)
    return Node(
        runtime=runtime,
        clock=clock,
        pods=Pods(),
        events=Events(),
        pod_logs=tmp_path / "pods",
        container_logs=tmp_path / "containers",
    )


@dataclasses.dataclass
class Pod:
    node: Node
    uid: str
    name: str
    sandbox_id: str
    config: cri.PodSandboxConfig

    @property
    def log_dir(self) -> Path:
        return Path(self.config.log_directory)

    def symlink(self, container: str, container_id: str) -> Path:
        return self.node.container_logs / f"{self.name}_default_{container}-{container_id}.log"

    async def container(self, name: str, attempt: int, *, run: bool = False) -> str:
        """A container of this pod that has exited (or runs), with its log, a rotated log
        and its /var/log/containers symlink."""
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=attempt),
            image=cri.ImageSpec(image=IMAGE),
            labels={
                labels.POD_NAME: self.name,
                labels.POD_NAMESPACE: "default",
                labels.POD_UID: self.uid,
                labels.CONTAINER_NAME: name,
            },
            log_path=f"{name}/{attempt}.log",
        )
        runtime = self.node.runtime
        container_id = await runtime.create_container(self.sandbox_id, config, self.config)
        await runtime.start_container(container_id)
        if not run:
            runtime.exit_container(container_id, exit_code=1)
        write_logs(self.log_dir / name / f"{attempt}.log", self.symlink(name, container_id))
        self.node.clock.advance(10)
        return container_id


def write_logs(log: Path, link: Path) -> None:
    """A log as containerd writes it, one rotated by the agent, and the legacy symlink."""
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("out\n")
    Path(f"{log}.20260101-000000").write_text("rotated\n")
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(log)


def lexists(path: Path) -> bool:
    return os.path.lexists(path)


async def start_pod(node: Node, name: str, *, live: bool = True) -> Pod:
    uid = f"uid-{name}"
    log_dir = node.pod_logs / f"default_{name}_{uid}"
    log_dir.mkdir(parents=True)
    config = cri.sandbox_config(name=name, namespace="default", uid=uid, log_directory=str(log_dir))
    sandbox_id = await node.runtime.run_pod_sandbox(config)
    if live:
        node.pods.live.add(uid)
    node.clock.advance(1)
    return Pod(node=node, uid=uid, name=name, sandbox_id=sandbox_id, config=config)


def existing(paths: list[Path]) -> list[str]:
    return [p.name for p in paths if os.path.lexists(p)]


async def test_dead_containers_beyond_one_per_container_are_removed_with_their_logs(
    node: Node,
) -> None:
    pod = await start_pod(node, "web")
    first = await pod.container("app", 0)
    second = await pod.container("app", 1)
    newest = await pod.container("app", 2)
    running = await pod.container("app", 3, run=True)
    sidecar = await pod.container("sidecar", 0)

    result = await node.gc().garbage_collect()

    assert result.containers == [first, second]
    assert set(node.runtime.container_ids) == {newest, running, sidecar}
    assert sorted(os.listdir(pod.log_dir / "app")) == [
        "2.log",
        "2.log.20260101-000000",
        "3.log",
        "3.log.20260101-000000",
    ]
    assert not lexists(pod.symlink("app", first))
    assert lexists(pod.symlink("app", newest))
    assert node.runtime.sandbox_ids == [pod.sandbox_id]


async def test_a_pod_that_is_gone_loses_its_dead_containers_sandboxes_and_log_directory(
    node: Node,
) -> None:
    gone = await start_pod(node, "gone")
    dead = [await gone.container("app", n) for n in range(2)]
    await node.runtime.stop_pod_sandbox(gone.sandbox_id)
    node.pods.live.clear()
    kept = await start_pod(node, "kept")
    kept_dead = await kept.container("app", 0)

    result = await node.gc().garbage_collect()

    assert result.containers == dead
    assert result.sandboxes == [gone.sandbox_id]
    assert result.log_dirs == [str(gone.log_dir)]
    assert node.runtime.container_ids == [kept_dead]
    assert node.runtime.sandbox_ids == [kept.sandbox_id]
    assert sorted(os.listdir(node.pod_logs)) == [kept.log_dir.name]


async def test_a_ready_sandbox_of_a_pod_that_is_gone_is_left_to_the_pod_workers(
    node: Node,
) -> None:
    orphan = await start_pod(node, "orphan", live=False)
    running = await orphan.container("app", 0, run=True)

    result = await node.gc().garbage_collect()

    assert result.containers == result.sandboxes == []
    assert result.log_dirs == [str(orphan.log_dir)]  # as the kubelet: the pod is gone
    assert node.runtime.container_ids == [running]
    assert node.runtime.sandbox_ids == [orphan.sandbox_id]


async def test_nothing_is_known_to_be_gone_before_the_pod_sources_have_synced(
    node: Node,
) -> None:
    pod = await start_pod(node, "web", live=False)
    older = await pod.container("app", 0)
    newest = await pod.container("app", 1)
    await node.runtime.stop_pod_sandbox(pod.sandbox_id)
    node.pods.synced = False

    result = await node.gc().garbage_collect()

    assert result.containers == [older]  # maxPerPodContainer still applies
    assert node.runtime.container_ids == [newest]
    assert node.runtime.sandbox_ids == [pod.sandbox_id]
    assert pod.log_dir.is_dir()


async def test_old_sandboxes_of_an_existing_pod_go_once_empty(node: Node) -> None:
    pod = await start_pod(node, "web")
    await node.runtime.stop_pod_sandbox(pod.sandbox_id)
    newer = await node.runtime.run_pod_sandbox(
        cri.sandbox_config(name="web", namespace="default", uid=pod.uid, attempt=1)
    )

    result = await node.gc().garbage_collect()

    assert result.sandboxes == [pod.sandbox_id]
    assert node.runtime.sandbox_ids == [newer]


async def test_a_container_in_unknown_state_is_stopped_before_removal(node: Node) -> None:
    pod = await start_pod(node, "web")
    lost = await pod.container("app", 0, run=True)
    node.runtime.lose_container(lost)
    newest = await pod.container("app", 1)

    result = await node.gc().garbage_collect()

    assert result.containers == [lost]
    assert node.runtime.grace_periods == {lost: 2}
    assert node.runtime.container_ids == [newest]


async def test_young_dead_containers_are_kept_for_min_age(node: Node) -> None:
    pod = await start_pod(node, "web")
    old = await pod.container("app", 0)
    young = [await pod.container("app", n) for n in (1, 2)]

    gc = node.gc(ContainerGCPolicy(min_age=15))

    # Created 30s, 20s and 10s ago: the newest is too young to count, so of the two evictable
    # ones the newer is kept as the one dead instance.
    assert (await gc.garbage_collect()).containers == [old]
    node.clock.advance(15)
    assert (await gc.garbage_collect()).containers == [young[0]]
    assert node.runtime.container_ids == [young[1]]


async def test_containers_without_the_kubelets_labels_are_not_touched(node: Node) -> None:
    pod = await start_pod(node, "web")
    foreign = []
    for attempt in range(3):
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name="foreign", attempt=attempt),
            image=cri.ImageSpec(image=IMAGE),
        )
        cid = await node.runtime.create_container(pod.sandbox_id, config, pod.config)
        node.runtime.exit_container(cid, exit_code=0)
        foreign.append(cid)

    result = await node.gc().garbage_collect()

    assert result.containers == []
    assert node.runtime.container_ids == foreign


@pytest.mark.parametrize(
    ("state", "removed"),
    [
        pytest.param("gone", True, id="container removed"),
        pytest.param("exited", True, id="container exited"),
        pytest.param("running", False, id="running: its log is being rotated"),
    ],
)
async def test_dangling_log_symlinks_are_removed_unless_the_container_runs(
    node: Node, state: str, removed: bool
) -> None:
    pod = await start_pod(node, "web")
    container_id = await pod.container("app", 0, run=True)
    if state == "exited":
        node.runtime.exit_container(container_id, exit_code=0)
    elif state == "gone":
        await node.runtime.remove_container(container_id)
    link = pod.symlink("app", container_id)
    for log in (pod.log_dir / "app").iterdir():
        log.unlink()

    result = await node.gc().garbage_collect()

    assert lexists(link) is not removed
    assert result.symlinks == ([str(link)] if removed else [])


@pytest.mark.looptime
async def test_a_failed_run_records_container_gc_failed_and_the_next_minute_retries(
    node: Node,
) -> None:
    pod = await start_pod(node, "web")
    older = await pod.container("app", 0)
    await pod.container("app", 1)
    error = cri_error(
        rpc="ListContainers", endpoint="unix:///run/fake-cri.sock", code="Unavailable", details="x"
    )
    node.runtime.inject_error("ListContainers", error)
    task = asyncio.create_task(node.gc().run())
    try:
        await asyncio.sleep(59)
        assert node.events.recorded == [("Warning", "ContainerGCFailed", error.status_text)]
        assert older in node.runtime.container_ids
        await asyncio.sleep(2)  # the second run, one period (60s) after the first
        assert older not in node.runtime.container_ids
        assert len(node.events.recorded) == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@pytest.mark.looptime
async def test_an_unreadable_pod_logs_directory_fails_the_run_but_not_the_manager(
    node: Node,
) -> None:
    await asyncio.to_thread(node.pod_logs.write_text, "not a directory")
    task = asyncio.create_task(node.gc().run())
    try:
        await asyncio.sleep(61)
        assert not task.done()
        assert [reason for _, reason, _ in node.events.recorded] == ["ContainerGCFailed"] * 2
        assert "Not a directory" in node.events.recorded[0][2]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_disk_pressure_reclaim_also_clears_pods_that_terminated_but_still_exist(
    node: Node,
) -> None:
    """An evicted pod stays in the API (Failed) but its writable layer must go: under disk
    pressure the eviction manager asks for the kubelet's ``evictNonDeletedPods``."""
    evicted = await start_pod(node, "evicted")
    dead = await evicted.container("app", 0)
    await node.runtime.stop_pod_sandbox(evicted.sandbox_id)
    running = await start_pod(node, "running")
    alive = await running.container("app", 0, run=True)

    assert (await node.gc().garbage_collect()).containers == []  # the newest dead one is kept
    result = await node.gc().garbage_collect(terminated=lambda uid: uid == evicted.uid)

    assert result.containers == [dead]
    assert result.sandboxes == [evicted.sandbox_id]
    assert node.runtime.container_ids == [alive]

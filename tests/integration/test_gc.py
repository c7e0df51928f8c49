"""Container and image GC against the private containerd of the ``containerd`` fixture.

The collectors run one pass each (``garbage_collect``) over the real CRI client, on real
containers, sandboxes, log files and images. Which pods exist is the one injected fact (the API
server's side); everything else is read from containerd and the filesystem.

The containerd is shared by the tests of this worker: the pods here have their own uids (the
"gone" pod is only ever this test's) and the image removed is one built for the test; the
images other tests use are in use or the sandbox image while image GC runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE, PAUSE_IMAGE, oci

from nodeagent.clock import RealClock
from nodeagent.gc import ContainerGC, ImageGC, ImageGCError, ImageGCPolicy, ImageList
from nodeagent.gc.podstate import PodExists
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.remote import CriClient
from nodeagent.nodestatus import setters

pytestmark = pytest.mark.integration

EXIT_TIMEOUT = 30.0
NAMESPACE = "gc-test"


class Pods:
    """The API server's side: every pod exists except those listed in ``gone``."""

    def __init__(self) -> None:
        self.gone: set[str] = set()

    def pod_exists(self) -> PodExists | None:
        return lambda uid: uid not in self.gone


class Events:
    def __init__(self) -> None:
        self.recorded: list[tuple[str, str, str]] = []

    def record(self, type: str, reason: str, message: str) -> None:
        self.recorded.append((type, reason, message))


class Pod:
    def __init__(self, client: CriClient, config: cri.PodSandboxConfig, sandbox_id: str) -> None:
        self.client = client
        self.config = config
        self.sandbox_id = sandbox_id

    @property
    def uid(self) -> str:
        return self.config.metadata.uid

    @property
    def log_dir(self) -> Path:
        return Path(self.config.log_directory)

    async def start(self, name: str, attempt: int, command: list[str], image: str) -> str:
        """Create and start a container labelled as the kubelet labels it."""
        config = cri.ContainerConfig(
            metadata=cri.ContainerMetadata(name=name, attempt=attempt),
            image=cri.ImageSpec(image=image),
            command=command,
            labels={
                labels.POD_NAME: self.config.metadata.name,
                labels.POD_NAMESPACE: NAMESPACE,
                labels.POD_UID: self.uid,
                labels.CONTAINER_NAME: name,
            },
            log_path=f"{name}/{attempt}.log",
        )
        await asyncio.to_thread(os.makedirs, self.log_dir / name, exist_ok=True)
        container_id = await self.client.create_container(self.sandbox_id, config, self.config)
        await self.client.start_container(container_id)
        return container_id

    async def wait_exited(self, container_id: str) -> None:
        async with asyncio.timeout(EXIT_TIMEOUT):
            while True:
                status = (await self.client.container_status(container_id)).status
                if status.state == cri.CONTAINER_EXITED:
                    return
                await asyncio.sleep(0.1)

    async def containers(self) -> list[str]:
        listed = await self.client.list_containers(
            cri.ContainerFilter(label_selector={labels.POD_UID: self.uid})
        )
        return [c.id for c in sorted(listed, key=lambda c: c.created_at)]

    async def sandboxes(self) -> list[str]:
        listed = await self.client.list_pod_sandbox(
            cri.PodSandboxFilter(label_selector={labels.POD_UID: self.uid})
        )
        return [s.id for s in listed]


@contextlib.asynccontextmanager
async def open_pod(runtime: RuntimeEnv, pod_logs: Path) -> AsyncIterator[Pod]:
    name = f"gc-{uuid.uuid4().hex[:8]}"
    uid = str(uuid.uuid4())
    log_dir = pod_logs / f"{NAMESPACE}_{name}_{uid}"
    await asyncio.to_thread(os.makedirs, log_dir)
    config = cri.sandbox_config(name=name, namespace=NAMESPACE, uid=uid, log_directory=str(log_dir))
    async with CriClient.open(runtime.endpoint) as client:
        pod = Pod(client, config, await client.run_pod_sandbox(config))
        try:
            yield pod
        finally:
            for container_id in await pod.containers():
                with contextlib.suppress(Exception):
                    await client.stop_container(container_id, 0)
                    await client.remove_container(container_id)
            for sandbox_id in await pod.sandboxes():
                with contextlib.suppress(Exception):
                    await client.stop_pod_sandbox(sandbox_id)
                    await client.remove_pod_sandbox(sandbox_id)


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


async def test_container_gc_keeps_one_dead_container_then_clears_a_pod_that_is_gone(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    pod_logs, container_logs = tmp_path / "pods", tmp_path / "containers"
    pods = Pods()
    async with open_pod(containerd, pod_logs) as pod:
        dead = []
        for attempt in range(3):
            container_id = await pod.start(
                "app", attempt, ["echo", f"run {attempt}"], BUSYBOX_IMAGE
            )
            await pod.wait_exited(container_id)
            dead.append(container_id)
        gc = ContainerGC(
            runtime=pod.client,
            pods=pods,
            clock=RealClock(),
            events=Events(),
            pod_logs_dir=str(pod_logs),
            container_logs_dir=str(container_logs),
        )
        loop = asyncio.get_running_loop()
        started = loop.time()

        first = await gc.garbage_collect()

        first_took = loop.time() - started
        assert first.containers == dead[:2]  # oldest first; the newest is the pod's lastState
        assert await pod.containers() == [dead[2]]
        assert files_under(pod.log_dir) == ["app/2.log"]
        assert await pod.sandboxes() == [pod.sandbox_id]

        # The pod is deleted: its sandbox is stopped (by the pod worker), then GC clears the rest.
        await pod.client.stop_pod_sandbox(pod.sandbox_id)
        pods.gone.add(pod.uid)

        second = await gc.garbage_collect()

        assert second.containers == [dead[2]]
        assert second.sandboxes == [pod.sandbox_id]
        assert second.log_dirs == [str(pod.log_dir)]
        assert await pod.containers() == []
        assert await pod.sandboxes() == []
        assert not pod.log_dir.exists()
        print(f"container GC pass removing 2 containers: {first_took * 1000:.0f} ms")


@contextlib.contextmanager
def victim_image(runtime: RuntimeEnv, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """An image only this test has (its own content, so its own id): imported, then removed
    whatever happens."""
    marker = uuid.uuid4().hex
    name = f"localhost/gc-victim-{marker[:12]}:1"
    layout = oci.write_layout(
        tmp_path / "victim",
        entries=[oci.Entry(path="marker", kind="file", mode=0o644, data=marker.encode())],
        config=oci.ImageConfig(cmd=("/marker",)),
        names=[name],
    )
    tarball = tmp_path / "victim.tar"
    oci.pack(layout.path, tarball)
    runtime.containerd.import_image(tarball)
    try:
        yield name, layout.config_digest
    finally:
        with contextlib.suppress(Exception):
            runtime.ctr("images", "rm", name)


async def image_id(client: CriClient, ref: str) -> str:
    response = await client.image_status(ref)
    return response.image.id if response.HasField("image") else ""


async def test_image_gc_removes_an_unused_image_but_not_the_sandbox_image_or_one_in_use(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    events = Events()
    with victim_image(containerd, tmp_path) as (victim, victim_id):
        async with open_pod(containerd, tmp_path / "pods") as pod:
            await pod.start("sleeper", 0, ["sleep", "3600"], BUSYBOX_IMAGE)
            client = pod.client
            victim_size = (await client.image_status(victim)).image.size
            status = await client.status(verbose=True)
            assert json.loads(status.info["config"])["sandboxImage"] == PAUSE_IMAGE
            before = {ref: await image_id(client, ref) for ref in (PAUSE_IMAGE, BUSYBOX_IMAGE)}
            assert await image_id(client, victim) == victim_id
            # Thresholds low enough that the real disk of this machine is "full": usage >= 1%
            # starts GC, and freeing down to 0% cannot succeed, so GC removes every unused image
            # and reports the shortfall as the kubelet does.
            gc = ImageGC(
                images=client,
                runtime=client,
                clock=RealClock(),
                events=events,
                policy=ImageGCPolicy(high_threshold_percent=1, low_threshold_percent=0, min_age=0),
            )
            loop = asyncio.get_running_loop()
            started = loop.time()

            with pytest.raises(ImageGCError) as raised:
                await gc.garbage_collect(began=0.0)

            took = loop.time() - started
            assert await image_id(client, victim) == ""
            after = {ref: await image_id(client, ref) for ref in (PAUSE_IMAGE, BUSYBOX_IMAGE)}
            assert after == before
            assert all(after.values())

    mountpoint = containerd.containerd.root / "io.containerd.snapshotter.v1.overlayfs"
    st = os.statvfs(mountpoint)
    usage = 100 - (st.f_bavail * 100) // st.f_blocks
    match = re.fullmatch(
        r"Insufficient free disk space on the node's image filesystem \((\d+)% of "
        r"(\d+\.\d [KMGTPE]iB) used\)\. Failed to free sufficient space by deleting unused "
        r"images \(freed (\d+) bytes\)\. Investigate disk usage, as it could be used by active "
        r"images, logs, volumes, or other data\.",
        str(raised.value),
    )
    assert match, str(raised.value)
    assert abs(int(match.group(1)) - usage) <= 1
    assert int(match.group(3)) == victim_size
    assert events.recorded == [("Warning", "FreeDiskSpaceFailed", str(raised.value))]
    print(f"image GC pass: {took * 1000:.0f} ms, disk {usage}% used, freed {victim_size} bytes")


async def test_node_status_images_list_what_containerd_has_largest_first(
    containerd: RuntimeEnv,
) -> None:
    async with CriClient.open(containerd.endpoint) as client:
        image_list = ImageList(images=client)
        await image_list.refresh()
        busybox = (await client.image_status(BUSYBOX_IMAGE)).image
        pause = (await client.image_status(PAUSE_IMAGE)).image

    listed = setters.images(image_list.images() or [], max_images=50)

    sizes = [entry["sizeBytes"] for entry in listed]
    assert sizes == sorted(sizes, reverse=True)
    by_size = {entry["sizeBytes"]: entry["names"] for entry in listed}
    assert BUSYBOX_IMAGE in by_size[busybox.size]
    assert set(by_size[pause.size]) >= {PAUSE_IMAGE, "registry.k8s.io/pause:3.10"}

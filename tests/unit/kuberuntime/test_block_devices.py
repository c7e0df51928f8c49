"""A container's ``volumeDevices`` reach the runtime as CRI ``Device`` entries (the pod's link
to the block device, its path in the container, the cgroup permissions), as the kubelet's
``makeDevices`` passes them; a device the volumes cannot give fails the container with
``CreateContainerConfigError`` and the kubelet's message."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from nodeagent.kuberuntime.env import ContainerConfigError, EnvInputs
from nodeagent.kuberuntime.manager import RuntimeManager
from nodeagent.kuberuntime.mounts import HostDevice, HostMount, NoVolumes, PodMounts
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.kuberuntime.results import CREATE_CONTAINER_CONFIG_ERROR
from nodeagent.podspec import Container, Pod
from nodeagent.testing.fake_apiserver import LoopClock
from nodeagent.testing.fake_runtime import FakeRuntime
from nodeagent.testing.pods import BUSYBOX, MemoryFiles, container, pod

SETTINGS = PodRuntimeSettings(
    node_name="node-a", root_dir="/var/lib/na", cluster_domain="cluster.local"
)
LINK = "/var/lib/na/pods/u1/volumeDevices/kubernetes.io~local-volume/pv-1"


class LinkedDevices:
    """Each ``volumeDevices`` entry given from ``LINK``, read-write."""

    def container_devices(self, container: Container) -> Sequence[HostDevice]:
        return [HostDevice(d["devicePath"], LINK, "mrw") for d in container.volume_devices]

    async def container_mounts(
        self, container: Container, env: Mapping[str, str]
    ) -> Sequence[HostMount]:
        return ()


def db_pod() -> Pod:
    devices = [{"name": "data", "devicePath": "/dev/xvda"}]
    return pod(
        "db",
        uid="u1",
        containers=[container("db", volumeDevices=devices)],
        volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
    )


async def sync(p: Pod, volumes: PodMounts) -> tuple[FakeRuntime, dict[str, str]]:
    clock = LoopClock()
    fake = FakeRuntime(clock=clock)
    fake.add_image(BUSYBOX)
    manager = RuntimeManager(
        runtime=fake, images=fake, settings=SETTINGS, clock=clock, files=MemoryFiles()
    )
    result = await manager.sync_pod(
        p,
        await manager.pod_state(p.uid),
        inputs=EnvInputs(),
        host_dns=ResolvConf(),
        volumes=volumes,
    )
    return fake, {name: f.reason for name, f in result.failures.items()}


@pytest.mark.looptime
async def test_a_volume_device_is_a_cri_device_of_the_container() -> None:
    fake, failures = await sync(db_pod(), LinkedDevices())

    assert failures == {}
    (cid,) = fake.container_ids
    devices = fake.container_config(cid).devices
    assert [(d.container_path, d.host_path, d.permissions) for d in devices] == [
        ("/dev/xvda", LINK, "mrw")
    ]


@pytest.mark.looptime
async def test_a_device_without_its_volume_fails_the_container_config() -> None:
    fake, failures = await sync(db_pod(), NoVolumes())

    assert failures == {"db": CREATE_CONTAINER_CONFIG_ERROR}
    assert fake.container_ids == []
    with pytest.raises(ContainerConfigError, match='cannot find volume "data" to pass into'):
        NoVolumes().container_devices(db_pod().spec.containers[0])

"""A container's volume mounts and block devices as the runtime manager receives them, and
their CRI form.

The volume manager computes :class:`HostMount` values for a container (it knows where each
volume is on the host and checks ``subPath``) and :class:`HostDevice` values for its
``volumeDevices``; this module turns them into CRI ``Mount`` messages (``selinux_relabel`` off,
as nodeagent runs no SELinux labelling) and CRI ``Device`` messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal, Protocol

from cri_protos.runtime.v1 import api_pb2 as api
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.env import ContainerConfigError
from nodeagent.podspec import Container

Propagation = Literal["private", "host_to_container", "bidirectional"]
_CRI_PROPAGATION: Final = {
    "private": api.PROPAGATION_PRIVATE,
    "host_to_container": api.PROPAGATION_HOST_TO_CONTAINER,
    "bidirectional": api.PROPAGATION_BIDIRECTIONAL,
}


@dataclass(frozen=True, slots=True)
class HostMount:
    container_path: str
    host_path: str
    read_only: bool = False
    propagation: Propagation = "private"


@dataclass(frozen=True, slots=True)
class HostDevice:
    container_path: str
    host_path: str
    permissions: str
    """cgroup device permissions: ``mrw``, or ``r`` for a read-only claim."""


class PodMounts(Protocol):
    def container_devices(self, container: Container) -> Sequence[HostDevice]:
        """The block devices of ``container``'s ``volumeDevices``. Raises
        ``ContainerConfigError`` with the kubelet's message."""
        ...

    async def container_mounts(
        self, container: Container, env: Mapping[str, str]
    ) -> Sequence[HostMount]:
        """The mounts of ``container``'s ``volumeMounts``; ``env`` is its environment (for
        ``subPathExpr``). Raises ``ContainerConfigError`` with the kubelet's message."""
        ...


class NoVolumes:
    """A pod whose volumes no volume manager set up: a container that mounts one fails."""

    def container_devices(self, container: Container) -> Sequence[HostDevice]:
        for device in container.volume_devices:
            raise ContainerConfigError(
                f'cannot find volume "{device.get("name", "")}" to pass into container '
                f'"{container.name}"'
            )
        return ()

    async def container_mounts(
        self, container: Container, env: Mapping[str, str]
    ) -> Sequence[HostMount]:
        for mount in container.volume_mounts:
            raise ContainerConfigError(
                f'cannot find volume "{mount.name}" to mount into container "{container.name}"'
            )
        return ()


def device_to_cri(device: HostDevice) -> cri.Device:
    return cri.Device(
        container_path=device.container_path,
        host_path=device.host_path,
        permissions=device.permissions,
    )


def to_cri(mount: HostMount) -> cri.Mount:
    return cri.Mount(
        container_path=mount.container_path,
        host_path=mount.host_path,
        readonly=mount.read_only,
        selinux_relabel=False,
        propagation=_CRI_PROPAGATION[mount.propagation],
    )

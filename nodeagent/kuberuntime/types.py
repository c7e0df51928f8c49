"""The CRI runtime.v1 messages the agent uses, re-exported from the generated stubs.

Code outside ``nodeagent.kuberuntime`` imports messages from here, never from ``cri_protos``,
so the generated code stays behind one boundary. A few small builders cover the common cases.
"""

from __future__ import annotations

from collections.abc import Mapping

from cri_protos.runtime.v1.api_pb2 import (
    CONTAINER_CREATED,
    CONTAINER_CREATED_EVENT,
    CONTAINER_DELETED_EVENT,
    CONTAINER_EXITED,
    CONTAINER_RUNNING,
    CONTAINER_STARTED_EVENT,
    CONTAINER_STOPPED_EVENT,
    CONTAINER_UNKNOWN,
    SANDBOX_NOTREADY,
    SANDBOX_READY,
    AuthConfig,
    CgroupDriver,
    Container,
    ContainerConfig,
    ContainerEventResponse,
    ContainerEventType,
    ContainerFilter,
    ContainerMetadata,
    ContainerState,
    ContainerStateValue,
    ContainerStatus,
    ContainerStatusResponse,
    DNSConfig,
    ExecSyncResponse,
    FilesystemUsage,
    Image,
    ImageFilter,
    ImageFsInfoResponse,
    ImageSpec,
    ImageStatusResponse,
    KeyValue,
    LinuxContainerConfig,
    LinuxContainerResources,
    LinuxPodSandboxConfig,
    Mount,
    PodSandbox,
    PodSandboxConfig,
    PodSandboxFilter,
    PodSandboxMetadata,
    PodSandboxNetworkStatus,
    PodSandboxState,
    PodSandboxStateValue,
    PodSandboxStatus,
    PodSandboxStatusResponse,
    PortMapping,
    RuntimeCondition,
    RuntimeConfigResponse,
    RuntimeStatus,
    StatusResponse,
    VersionResponse,
)

__all__ = [
    "CONTAINER_CREATED",
    "CONTAINER_CREATED_EVENT",
    "CONTAINER_DELETED_EVENT",
    "CONTAINER_EXITED",
    "CONTAINER_RUNNING",
    "CONTAINER_STARTED_EVENT",
    "CONTAINER_STOPPED_EVENT",
    "CONTAINER_UNKNOWN",
    "SANDBOX_NOTREADY",
    "SANDBOX_READY",
    "AuthConfig",
    "CgroupDriver",
    "Container",
    "ContainerConfig",
    "ContainerEventResponse",
    "ContainerEventType",
    "ContainerFilter",
    "ContainerMetadata",
    "ContainerState",
    "ContainerStateValue",
    "ContainerStatus",
    "ContainerStatusResponse",
    "DNSConfig",
    "ExecSyncResponse",
    "FilesystemUsage",
    "Image",
    "ImageFilter",
    "ImageFsInfoResponse",
    "ImageSpec",
    "ImageStatusResponse",
    "KeyValue",
    "LinuxContainerConfig",
    "LinuxContainerResources",
    "LinuxPodSandboxConfig",
    "Mount",
    "PodSandbox",
    "PodSandboxConfig",
    "PodSandboxFilter",
    "PodSandboxMetadata",
    "PodSandboxNetworkStatus",
    "PodSandboxState",
    "PodSandboxStateValue",
    "PodSandboxStatus",
    "PodSandboxStatusResponse",
    "PortMapping",
    "RuntimeCondition",
    "RuntimeConfigResponse",
    "RuntimeStatus",
    "StatusResponse",
    "VersionResponse",
    "as_image_spec",
    "sandbox_config",
]


def as_image_spec(image: str | ImageSpec) -> ImageSpec:
    """An ImageSpec for a reference such as ``localhost:5000/busybox:1.36``."""
    return ImageSpec(image=image) if isinstance(image, str) else image


def sandbox_config(
    *,
    name: str,
    namespace: str,
    uid: str,
    attempt: int = 0,
    hostname: str = "",
    log_directory: str = "",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cgroup_parent: str = "",
) -> PodSandboxConfig:
    """A minimal PodSandboxConfig carrying the kubelet's three identity labels.

    Enough to start a sandbox by hand (integration tests); the pod workers build the full one.
    """
    all_labels = {
        **(labels or {}),
        "io.kubernetes.pod.name": name,
        "io.kubernetes.pod.namespace": namespace,
        "io.kubernetes.pod.uid": uid,
    }
    return PodSandboxConfig(
        metadata=PodSandboxMetadata(name=name, namespace=namespace, uid=uid, attempt=attempt),
        hostname=hostname or name,
        log_directory=log_directory,
        labels=all_labels,
        annotations=dict(annotations or {}),
        linux=LinuxPodSandboxConfig(cgroup_parent=cgroup_parent),
    )

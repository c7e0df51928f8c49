"""The kubelet's ``operation_type`` label for each CRI runtime.v1 RPC.

The kubelet's instrumented CRI services (``pkg/kubelet/kuberuntime/instrumented_services.go``,
v1.36.3) name each call by a constant of their own, not always the RPC's name in snake case:
``UpdateContainerResources`` is ``update_container``, the sandbox RPCs say ``podsandbox``
(``run_podsandbox``, ``podsandbox_status``, ``list_podsandbox_stats``), and the ``Stream*``
list RPCs its client uses under the ``CRIListStreaming`` gate count as the list they replace.
The kubelet's ``close`` operation is not an RPC and the kubelet never closes its client, so it
has no entry here.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

OPERATION_TYPES: Final[Mapping[str, str]] = MappingProxyType(
    {
        # RuntimeService
        "Version": "version",
        "Status": "status",
        "RuntimeConfig": "runtime_config",
        "UpdateRuntimeConfig": "update_runtime_config",
        "RunPodSandbox": "run_podsandbox",
        "StopPodSandbox": "stop_podsandbox",
        "RemovePodSandbox": "remove_podsandbox",
        "PodSandboxStatus": "podsandbox_status",
        "ListPodSandbox": "list_podsandbox",
        "StreamPodSandboxes": "list_podsandbox",
        "UpdatePodSandboxResources": "update_podsandbox_resources",
        "CreateContainer": "create_container",
        "StartContainer": "start_container",
        "StopContainer": "stop_container",
        "RemoveContainer": "remove_container",
        "ListContainers": "list_containers",
        "StreamContainers": "list_containers",
        "ContainerStatus": "container_status",
        "UpdateContainerResources": "update_container",
        "ReopenContainerLog": "reopen_container_log",
        "CheckpointContainer": "checkpoint_container",
        "ExecSync": "exec_sync",
        "Exec": "exec",
        "Attach": "attach",
        "PortForward": "port_forward",
        "ContainerStats": "container_stats",
        "ListContainerStats": "list_container_stats",
        "StreamContainerStats": "list_container_stats",
        "PodSandboxStats": "podsandbox_stats",
        "ListPodSandboxStats": "list_podsandbox_stats",
        "StreamPodSandboxStats": "list_podsandbox_stats",
        "ListMetricDescriptors": "list_metric_descriptors",
        "ListPodSandboxMetrics": "list_podsandbox_metrics",
        "StreamPodSandboxMetrics": "list_podsandbox_metrics",
        "GetContainerEvents": "get_container_events",
        # ImageService
        "ListImages": "list_images",
        "StreamImages": "list_images",
        "ImageStatus": "image_status",
        "PullImage": "pull_image",
        "RemoveImage": "remove_image",
        "ImageFsInfo": "image_fs_info",
    }
)
"""gRPC method name (``/runtime.v1.<Service>/<name>``) -> the kubelet's ``operation_type``."""

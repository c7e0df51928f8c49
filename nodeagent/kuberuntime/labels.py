"""The kubelet's ``io.kubernetes.*`` labels and annotations on sandboxes and containers.

They are how a restarted agent recognises what it created (adoption): the pod uid, name and
namespace on every sandbox and container, the container name, its restart count and the hash
of the spec it was created from. Pure functions (``pkg/kubelet/kuberuntime/labels.go``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

import msgspec

from nodeagent.podspec import (
    Container,
    ContainerPort,
    Lifecycle,
    LifecycleHandler,
    ObjectMeta,
    Pod,
    PodSpec,
    termination_grace_period,
)

POD_NAME: Final = "io.kubernetes.pod.name"
POD_NAMESPACE: Final = "io.kubernetes.pod.namespace"
POD_UID: Final = "io.kubernetes.pod.uid"
CONTAINER_NAME: Final = "io.kubernetes.container.name"
CONTAINER_HASH: Final = "io.kubernetes.container.hash"
RESTART_COUNT: Final = "io.kubernetes.container.restartCount"
TERMINATION_MESSAGE_PATH: Final = "io.kubernetes.container.terminationMessagePath"
TERMINATION_MESSAGE_POLICY: Final = "io.kubernetes.container.terminationMessagePolicy"
CONTAINER_PORTS: Final = "io.kubernetes.container.ports"
DELETION_GRACE_PERIOD: Final = "io.kubernetes.pod.deletionGracePeriod"
TERMINATION_GRACE_PERIOD: Final = "io.kubernetes.pod.terminationGracePeriod"
PRE_STOP_HANDLER: Final = "io.kubernetes.container.preStopHandler"

_FNV32_OFFSET: Final = 0x811C9DC5
_FNV32_PRIME: Final = 0x01000193


def pod_labels(pod: Pod) -> dict[str, str]:
    """Sandbox labels: the pod's own labels plus the three identity labels."""
    return {
        **pod.metadata.labels,
        POD_NAME: pod.name,
        POD_NAMESPACE: pod.namespace,
        POD_UID: pod.uid,
    }


def container_labels(pod: Pod, container: Container) -> dict[str, str]:
    """Container labels: exactly the three identity labels and the container name."""
    return {
        POD_NAME: pod.name,
        POD_NAMESPACE: pod.namespace,
        POD_UID: pod.uid,
        CONTAINER_NAME: container.name,
    }


def container_hash(container: Container) -> str:
    """Hex FNV-1a of the fields that may change in a running pod (name and image)."""
    data = json.dumps({"name": container.name, "image": container.image}, sort_keys=True)
    h = _FNV32_OFFSET
    for byte in data.encode():
        h = ((h ^ byte) * _FNV32_PRIME) & 0xFFFFFFFF
    return format(h, "x")


def container_annotations(pod: Pod, container: Container, restart_count: int) -> dict[str, str]:
    annotations = {
        CONTAINER_HASH: container_hash(container),
        RESTART_COUNT: str(restart_count),
        TERMINATION_MESSAGE_PATH: container.termination_message_path,
        TERMINATION_MESSAGE_POLICY: container.termination_message_policy,
        TERMINATION_GRACE_PERIOD: str(termination_grace_period(pod)),
    }
    if pod.metadata.deletion_grace_period_seconds is not None:
        annotations[DELETION_GRACE_PERIOD] = str(pod.metadata.deletion_grace_period_seconds)
    if container.lifecycle is not None and container.lifecycle.pre_stop is not None:
        annotations[PRE_STOP_HANDLER] = json.dumps(
            _without_nulls(msgspec.to_builtins(container.lifecycle.pre_stop)),
            separators=(",", ":"),
        )
    if container.ports:
        ports = [
            {
                **({"name": p.name} if p.name else {}),
                "containerPort": p.container_port,
                **({"hostPort": p.host_port} if p.host_port else {}),
                "protocol": p.protocol,
            }
            for p in container.ports
        ]
        annotations[CONTAINER_PORTS] = json.dumps(ports, separators=(",", ":"))
    return annotations


def restart_count_of(annotations: Mapping[str, str]) -> int:
    try:
        return int(annotations.get(RESTART_COUNT, "0"))
    except ValueError:
        return 0


def grace_period_of(annotations: Mapping[str, str], default: int | None) -> int | None:
    """The grace period recorded on a container (for killing one whose pod is gone)."""
    for key in (DELETION_GRACE_PERIOD, TERMINATION_GRACE_PERIOD):
        try:
            return int(annotations[key])
        except (KeyError, ValueError):
            continue
    return default


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def restore_pod_spec(
    annotations: Mapping[str, str], labels: Mapping[str, str]
) -> tuple[Pod, Container] | None:
    """The pod and container a running container was created from, as far as its labels and
    annotations tell (the kubelet's ``restoreSpecsFromContainerLabels``): enough to run its
    preStop hook when its pod is gone. None when it has no preStop hook (or an unreadable one)."""
    raw = annotations.get(PRE_STOP_HANDLER)
    if not raw:
        return None
    try:
        handler = msgspec.json.decode(raw, type=LifecycleHandler)
        ports = msgspec.json.decode(
            annotations.get(CONTAINER_PORTS) or "[]", type=tuple[ContainerPort, ...]
        )
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    container = Container(
        name=labels.get(CONTAINER_NAME, ""),
        ports=ports,
        lifecycle=Lifecycle(pre_stop=handler),
    )
    pod = Pod(
        metadata=ObjectMeta(
            name=labels.get(POD_NAME, ""),
            namespace=labels.get(POD_NAMESPACE, ""),
            uid=labels.get(POD_UID, ""),
        ),
        spec=PodSpec(containers=(container,)),
    )
    return pod, container

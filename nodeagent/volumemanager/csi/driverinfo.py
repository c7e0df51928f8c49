"""What a ``CSIDriver`` object asks of the node, with the API's defaults (no object: attach
required, no pod info, ``ReadWriteOnceWithFSType``, persistent volumes only), and the pure
decisions the kubelet's CSI mounter takes from it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from nodeagent.apiserver import Resource
from nodeagent.csi.types import AccessMode
from nodeagent.podspec import Pod

CSIDRIVERS: Final = Resource("storage.k8s.io", "v1", "csidrivers", "CSIDriver", namespaced=False)
FILE: Final = "File"
NONE: Final = "None"
RWO_WITH_FS_TYPE: Final = "ReadWriteOnceWithFSType"
TOKENS_ATTRIBUTE: Final = "csi.storage.k8s.io/serviceAccount.tokens"


@dataclass(frozen=True, slots=True)
class TokenRequest:
    audience: str
    expiration_seconds: int | None


@dataclass(frozen=True, slots=True)
class DriverInfo:
    name: str
    found: bool = False
    attach_required: bool = True
    pod_info_on_mount: bool = False
    fs_group_policy: str = RWO_WITH_FS_TYPE
    requires_republish: bool = False
    lifecycle_modes: tuple[str, ...] = ("Persistent",)
    token_requests: tuple[TokenRequest, ...] = ()
    token_in_secrets: bool = False
    raw_modes: Sequence[str] = field(default=(), repr=False)


def driver_info(name: str, obj: Mapping[str, Any] | None) -> DriverInfo:
    """The ``CSIDriver`` ``obj`` (None: there is none) with the API's defaults."""
    if obj is None:
        return DriverInfo(name)
    spec = obj.get("spec") or {}
    modes = tuple(spec.get("volumeLifecycleModes") or ("Persistent",))
    return DriverInfo(
        name=name,
        found=True,
        attach_required=spec.get("attachRequired") is not False,
        pod_info_on_mount=bool(spec.get("podInfoOnMount")),
        fs_group_policy=str(spec.get("fsGroupPolicy") or RWO_WITH_FS_TYPE),
        requires_republish=bool(spec.get("requiresRepublish")),
        lifecycle_modes=modes,
        token_requests=tuple(
            TokenRequest(str(t.get("audience") or ""), t.get("expirationSeconds"))
            for t in spec.get("tokenRequests") or ()
        ),
        token_in_secrets=bool(spec.get("serviceAccountTokenInSecrets")),
        raw_modes=tuple(spec.get("volumeLifecycleModes") or ()),
    )


def check_lifecycle_mode(info: DriverInfo, mode: str) -> None:
    """Raise ``ValueError`` (the kubelet's words) when the driver does not serve ``mode``."""
    if not info.found:
        if mode == "Persistent":
            return
        raise ValueError(
            f'volume mode "{mode}" not supported by driver {info.name} (no CSIDriver object)'
        )
    if mode not in info.lifecycle_modes:
        modes = "[" + " ".join(f'"{m}"' for m in info.raw_modes) + "]"
        raise ValueError(
            f'volume mode "{mode}" not supported by driver {info.name} (only supports {modes})'
        )


def pod_info_attributes(pod: Pod, *, ephemeral: bool) -> dict[str, str]:
    return {
        "csi.storage.k8s.io/pod.name": pod.name,
        "csi.storage.k8s.io/pod.namespace": pod.namespace,
        "csi.storage.k8s.io/pod.uid": pod.uid,
        "csi.storage.k8s.io/serviceAccount.name": pod.spec.service_account_name,
        "csi.storage.k8s.io/ephemeral": "true" if ephemeral else "false",
    }


def access_mode(pv_modes: Sequence[str], *, single_node_multi_writer: bool) -> AccessMode:
    """The CSI access mode of the PV's first access mode (``asCSIAccessModeV1``)."""
    first = pv_modes[0] if pv_modes else "ReadWriteOnce"
    match first:
        case "ReadOnlyMany":
            return AccessMode.MULTI_NODE_READER_ONLY
        case "ReadWriteMany":
            return AccessMode.MULTI_NODE_MULTI_WRITER
        case "ReadWriteOncePod":
            if single_node_multi_writer:
                return AccessMode.SINGLE_NODE_SINGLE_WRITER
            return AccessMode.SINGLE_NODE_WRITER
    if single_node_multi_writer:
        return AccessMode.SINGLE_NODE_MULTI_WRITER
    return AccessMode.SINGLE_NODE_WRITER


def applies_fs_group(
    info: DriverInfo,
    *,
    fs_group: int | None,
    read_only: bool,
    fs_type: str,
    pv_modes: Sequence[str] | None,
) -> bool:
    """Whether the node applies ``fsGroup`` after publishing (``supportsFSGroup``);
    ``pv_modes`` None for an inline volume."""
    if fs_group is None or info.fs_group_policy == NONE or read_only:
        return False
    if info.fs_group_policy == FILE:
        return True
    if not fs_type:
        return False
    if pv_modes is None:
        return True
    return any(m in ("ReadWriteOnce", "ReadWriteOncePod") for m in pv_modes)

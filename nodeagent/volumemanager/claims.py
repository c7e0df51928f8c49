"""From a pod's claim to its bound PersistentVolume, as the kubelet's volume populator
(``getPVCExtractPV``, ``getPVSpec``) resolves it, with its words.

A ``persistentVolumeClaim`` volume names the claim; a generic ``ephemeral`` volume's claim is
``<pod>-<volume>`` and must be owned (controller reference) by the pod. The claim must be
``Bound`` with a ``volumeName``, not being deleted without its protection finalizer; the PV's
``claimRef.uid`` must be the claim's. A failure is ``error processing PVC <ns>/<claim>: ...``
(``PVC is not bound``, ``failed to fetch PVC from API server: ...``), so the pod waits and
retries with the volume manager's back-off. One GET of each per resolution: the manager
resolves a claim once per pod, not on every sync.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from nodeagent.apiserver import Api, ApiError, Obj, PatchType, Resource
from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.source import VolumeSetupError

PVCS: Final = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", True)
PVS: Final = Resource("", "v1", "persistentvolumes", "PersistentVolume", False)
PROTECTION_FINALIZER: Final = "kubernetes.io/pvc-protection"
FILESYSTEM: Final = "Filesystem"
BLOCK: Final = "Block"


@dataclass(frozen=True, slots=True)
class BoundVolume:
    """A pod volume backed by a PersistentVolume."""

    claim: Obj
    pv: Obj
    read_only: bool
    """The pod's ``persistentVolumeClaim.readOnly`` (the kubelet's ``spec.ReadOnly``)."""

    @property
    def pv_name(self) -> str:
        return str(self.pv["metadata"]["name"])

    @property
    def pv_spec(self) -> dict[str, Any]:
        return dict(self.pv.get("spec") or {})

    @property
    def volume_mode(self) -> str:
        return str(self.pv_spec.get("volumeMode") or FILESYSTEM)


def claim_name(pod: Pod, volume: Volume) -> str:
    """The claim a ``persistentVolumeClaim`` or generic ``ephemeral`` volume uses."""
    if volume.persistent_volume_claim is not None:
        return volume.persistent_volume_claim.claim_name
    return f"{pod.name}-{volume.name}"  # the ephemeral controller's name for it


def uses_claim(volume: Volume) -> bool:
    return volume.persistent_volume_claim is not None or volume.ephemeral is not None


def check_claim(claim: Obj) -> str:
    """The claim's ``volumeName``; raises ``ValueError`` with the kubelet's reason."""
    meta = claim.get("metadata") or {}
    if meta.get("deletionTimestamp") and PROTECTION_FINALIZER not in (meta.get("finalizers") or ()):
        raise ValueError("PVC is being deleted")
    if (claim.get("status") or {}).get("phase") != "Bound":
        raise ValueError("PVC is not bound")
    name = (claim.get("spec") or {}).get("volumeName") or ""
    if not name:
        raise ValueError("PVC has empty pvc.Spec.VolumeName")
    return str(name)


def check_pv(pv: Obj, name: str, claim_uid: str) -> None:
    ref = (pv.get("spec") or {}).get("claimRef")
    if not ref:
        raise ValueError(
            f"found PV object {name} but it has a nil pv.Spec.ClaimRef indicating it is not "
            "yet bound to the claim"
        )
    if ref.get("uid", "") != claim_uid:
        raise ValueError(
            f"found PV object {name} but its pv.Spec.ClaimRef.UID {ref.get('uid', '')} does "
            f"not point to claim.UID {claim_uid}"
        )


def check_owned_by(pod: Pod, claim: Obj) -> None:
    """A generic ephemeral volume's claim must be the pod's (``ephemeral.VolumeIsForPod``)."""
    meta = claim.get("metadata") or {}
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("uid") == pod.uid:
            return
    raise ValueError(
        f"PVC {pod.namespace}/{meta.get('name', '')} was not created for pod "
        f"{pod.namespace}/{pod.name} (pod is not owner)"
    )


class ClaimResolver:
    def __init__(self, *, api: Api | None) -> None:
        self._api = api

    async def patch_claim_status(self, claim: Obj, patch: Obj) -> None:
        """Merge-patch the claim's status; raises ``ApiError``."""
        if self._api is None:
            return
        meta = claim["metadata"]
        await self._api.patch(
            PVCS,
            meta["name"],
            patch,
            patch_type=PatchType.MERGE,
            namespace=meta["namespace"],
            subresource="status",
        )

    async def resolve(self, pod: Pod, volume: Volume) -> BoundVolume:
        """The PV bound to ``volume``'s claim; raises :class:`VolumeSetupError`."""
        name = claim_name(pod, volume)
        where = f"error processing PVC {pod.namespace}/{name}"
        if self._api is None:
            raise VolumeSetupError(f"{where}: no API server configured", operation=None)
        try:
            claim = await self._api.get(PVCS, name, namespace=pod.namespace)
        except ApiError as e:
            raise VolumeSetupError(
                f"{where}: failed to fetch PVC from API server: {e.message}", operation=None
            ) from e
        if volume.ephemeral is not None:
            try:
                check_owned_by(pod, claim)
            except ValueError as e:
                raise VolumeSetupError(str(e), operation=None) from e
        try:
            pv_name = check_claim(claim)
        except ValueError as e:
            raise VolumeSetupError(f"{where}: {e}", operation=None) from e
        try:
            pv = await self._api.get(PVS, pv_name)
        except ApiError as e:
            raise VolumeSetupError(
                f"{where}: failed to fetch PV {pv_name} from API server: {e.message}",
                operation=None,
            ) from e
        try:
            check_pv(pv, pv_name, str((claim.get("metadata") or {}).get("uid", "")))
        except ValueError as e:
            raise VolumeSetupError(f"{where}: {e}", operation=None) from e
        read_only = bool(
            volume.persistent_volume_claim and volume.persistent_volume_claim.read_only
        )
        return BoundVolume(claim=claim, pv=pv, read_only=read_only)

"""Online expansion of a mounted claim, as the kubelet's ``NodeExpander`` decides it: the
external-resizer grew the volume (the PV's ``capacity`` is the new size) and left the claim's
``allocatedResourceStatuses.storage`` at ``NodeResizePending`` (or ``NodeResizeInProgress``);
the node then asks the CSI driver ``NodeExpandVolume`` on the published path and records the
end on the claim's status (``MarkNodeExpansionFinishedWithRecovery``): ``capacity.storage``
the new size, the ``storage`` resize status and the resize conditions gone. A read-only
claim is never expanded. Pure."""

from __future__ import annotations

from typing import Any, Final

from nodeagent.apiserver import Obj
from nodeagent.quantity import value

PENDING: Final = ("NodeResizePending", "NodeResizeInProgress")
RESIZE_CONDITIONS: Final = frozenset({"Resizing", "FileSystemResizePending"})


def _storage(obj: Any) -> str | None:
    raw = (obj or {}).get("storage")
    return str(raw) if raw is not None else None


def node_expansion_size(claim: Obj, pv: Obj) -> str | None:
    """The PV's capacity (its quantity text) when the node must expand the claim's
    filesystem now; None otherwise."""
    status = claim.get("status") or {}
    resize = (status.get("allocatedResourceStatuses") or {}).get("storage", "")
    if resize not in PENDING:
        return None
    pv_cap = _storage((pv.get("spec") or {}).get("capacity"))
    if pv_cap is None:
        return None
    claim_cap = _storage(status.get("capacity"))
    if claim_cap is not None and value(claim_cap) >= value(pv_cap):
        return None
    return pv_cap


def finished_patch(claim: Obj, size: str) -> Obj:
    """The merge patch of the claim's status once the node expanded it to ``size``."""
    status = claim.get("status") or {}
    conditions = [
        c for c in status.get("conditions") or () if c.get("type") not in RESIZE_CONDITIONS
    ]
    return {
        "status": {
            "capacity": {"storage": size},
            "allocatedResourceStatuses": {"storage": None},
            "conditions": conditions or None,
        }
    }

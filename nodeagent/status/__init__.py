"""Pod status: computed from the spec and the runtime (pure), patched to the API on change.

- :func:`generate_pod_status` — the whole ``status`` of one pod (``generate.py``), built from
  container statuses (``containers.py``) and the phase and conditions (``conditions.py``);
- :func:`with_container_readiness` — a status with new readiness probe results on its
  containers' ``ready`` flags and its Ready / ContainersReady conditions, without the runtime;
- :class:`StatusManager` — keeps the last status sent per pod and PATCHes
  ``pods/<name>/status`` only when it changed, or when another component changed a
  condition it reports (the node lifecycle controller's Ready False: sent again, as the
  kubelet reconciles); deletes the API object of a terminated pod (``manager.py``).
"""

from nodeagent.status.containers import WaitingReason
from nodeagent.status.generate import (
    generate_pod_status,
    rejected_status,
    with_container_readiness,
)
from nodeagent.status.manager import GracePeriodZeroDeleter, PodDeleter, StatusManager

__all__ = [
    "GracePeriodZeroDeleter",
    "PodDeleter",
    "StatusManager",
    "WaitingReason",
    "generate_pod_status",
    "rejected_status",
    "with_container_readiness",
]

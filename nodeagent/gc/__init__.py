"""Garbage collection of dead containers, sandboxes, pod logs and unused images (the
kubelet's ``kuberuntime_gc.go`` and ``images/image_gc_manager.go``).

Policy is pure (:mod:`.policy`, :mod:`.imagepolicy`); the managers (:mod:`.containers`,
:mod:`.images`, :mod:`.imagelist`) list, decide, remove and log. :func:`gc_managers` wires them.
"""

from __future__ import annotations

from nodeagent.gc.containers import ContainerGC, ContainerGCResult
from nodeagent.gc.imagelist import ImageList
from nodeagent.gc.imagepolicy import ImageGCPolicy
from nodeagent.gc.images import ImageGC, ImageGCError, ImageGCResult
from nodeagent.gc.podstate import PodPresence, PodsView
from nodeagent.gc.policy import ContainerGCPolicy
from nodeagent.gc.setup import GarbageCollectors, gc_managers

__all__ = [
    "ContainerGC",
    "ContainerGCPolicy",
    "ContainerGCResult",
    "GarbageCollectors",
    "ImageGC",
    "ImageGCError",
    "ImageGCPolicy",
    "ImageGCResult",
    "ImageList",
    "PodPresence",
    "PodsView",
    "gc_managers",
]

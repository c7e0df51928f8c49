"""Garbage collection of dead containers, sandboxes, pod logs and unused images (the
kubelet's ``kuberuntime_gc.go`` and ``images/image_gc_manager.go``).

Policy is pure (:mod:`.policy`, :mod:`.imagepolicy`); the managers (:mod:`.containers`,
:mod:`.images`, :mod:`.imagelist`) list, decide, remove and log. :func:`gc_managers` wires them.

In: CRI containers, sandboxes and images, ``ImageFsInfo`` and statvfs, the pod sources (which
pods still exist). Out: dead containers, sandboxes and their logs removed every 1 m; unused
images removed every 5 m while the image file system is above the high threshold; the
``status.images`` list for the node status; ``FreeDiskSpaceFailed`` / ``ImageGCFailed`` Events.
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

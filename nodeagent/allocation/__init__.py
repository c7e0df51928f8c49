"""In-place pod resize (InPlacePodVerticalScaling): allocations, their checkpoint, the resize
admission and the ``PodResizePending``/``PodResizeInProgress`` conditions."""

from nodeagent.allocation.manager import AllocationManager

__all__ = ["AllocationManager"]

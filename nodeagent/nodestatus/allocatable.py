"""This node's allocatable memory, read back from the Node object the status manager writes.

The managers that size themselves by it (the eviction manager's percentage thresholds, the
memory-backed volumes) read ``status.allocatable.memory`` from the node cache. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nodeagent.quantity import value


def allocatable_memory(node: Mapping[str, Any] | None) -> int | None:
    """``status.allocatable.memory`` in bytes; None while the Node is not known, when it has
    no such figure, or when the figure is not a quantity."""
    raw = (((node or {}).get("status") or {}).get("allocatable") or {}).get("memory")
    if raw is None:
        return None
    try:
        return value(raw)
    except (ValueError, ArithmeticError):
        return None

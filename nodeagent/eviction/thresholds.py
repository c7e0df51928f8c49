"""Eviction thresholds from the configuration (the kubelet's ``ParseThresholdConfig``).

A threshold is a signal (``memory.available``), the operator (always "less than"), a value
(bytes, or a percentage of the signal's capacity), a grace period (0 for a hard threshold) and
a minimum reclaim. Parsing is pure; the config's validation has already named bad fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from nodeagent.quantity import parse_quantity

MEMORY_AVAILABLE: Final = "memory.available"
ALLOCATABLE_MEMORY_AVAILABLE: Final = "allocatableMemory.available"
NODEFS_AVAILABLE: Final = "nodefs.available"
NODEFS_INODES_FREE: Final = "nodefs.inodesFree"
IMAGEFS_AVAILABLE: Final = "imagefs.available"
IMAGEFS_INODES_FREE: Final = "imagefs.inodesFree"
CONTAINERFS_AVAILABLE: Final = "containerfs.available"
CONTAINERFS_INODES_FREE: Final = "containerfs.inodesFree"
PID_AVAILABLE: Final = "pid.available"

#: The node condition each signal drives (``signalToNodeCondition``).
CONDITION: Final[Mapping[str, str]] = {
    MEMORY_AVAILABLE: "MemoryPressure",
    ALLOCATABLE_MEMORY_AVAILABLE: "MemoryPressure",
    NODEFS_AVAILABLE: "DiskPressure",
    NODEFS_INODES_FREE: "DiskPressure",
    IMAGEFS_AVAILABLE: "DiskPressure",
    IMAGEFS_INODES_FREE: "DiskPressure",
    CONTAINERFS_AVAILABLE: "DiskPressure",
    CONTAINERFS_INODES_FREE: "DiskPressure",
    PID_AVAILABLE: "PIDPressure",
}

#: The disk signals, for which node-level reclaim (dead containers, then unused images) runs
#: before a pod is evicted (``buildSignalToNodeReclaimFuncs``).
DISK_SIGNALS: Final = tuple(s for s, c in CONDITION.items() if c == "DiskPressure")

#: The resource each signal reclaims (``signalToResource``), named as in the eviction message.
RESOURCE: Final[Mapping[str, str]] = {
    MEMORY_AVAILABLE: "memory",
    ALLOCATABLE_MEMORY_AVAILABLE: "memory",
    NODEFS_AVAILABLE: "ephemeral-storage",
    NODEFS_INODES_FREE: "inodes",
    IMAGEFS_AVAILABLE: "ephemeral-storage",
    IMAGEFS_INODES_FREE: "inodes",
    CONTAINERFS_AVAILABLE: "ephemeral-storage",
    CONTAINERFS_INODES_FREE: "inodes",
    PID_AVAILABLE: "pids",
}


@dataclass(frozen=True, slots=True)
class Value:
    """Bytes (or a count), or a fraction of the capacity (``percentage`` in 0..1)."""

    quantity: int | None = None
    percentage: Fraction | None = None
    text: str = ""

    def amount(self, capacity: int) -> int:
        if self.quantity is not None:
            return self.quantity
        return int((self.percentage or Fraction(0)) * capacity)


@dataclass(frozen=True, slots=True)
class Threshold:
    signal: str
    value: Value
    grace_period: float = 0.0
    min_reclaim: Value = Value(quantity=0)
    hard: bool = True

    @property
    def condition(self) -> str:
        return CONDITION[self.signal]

    @property
    def resource(self) -> str:
        return RESOURCE[self.signal]


def parse_value(text: str) -> Value:
    """``"100Mi"`` or ``"10%"``; raises ValueError (the config's validation caught these)."""
    stripped = text.strip()
    if stripped.endswith("%"):
        pct = Fraction(stripped[:-1])
        if not 0 <= pct <= 100:
            raise ValueError(f"eviction percentage {text!r} must be between 0% and 100%")
        return Value(percentage=pct / 100, text=stripped)
    q = parse_quantity(stripped)
    if q < 0:
        raise ValueError(f"eviction threshold {text!r} must be positive")
    return Value(quantity=int(q), text=stripped)


def _zero(value: Value) -> bool:
    return value.quantity == 0 or value.percentage == 0


def parse_thresholds(
    *,
    hard: Mapping[str, str],
    soft: Mapping[str, str] = {},
    soft_grace: Mapping[str, float] = {},
    min_reclaim: Mapping[str, str] = {},
) -> list[Threshold]:
    """The thresholds the manager enforces; a zero hard threshold disables its signal (as
    ``evictionHard: {memory.available: "0%"}`` does for the kubelet)."""
    out: list[Threshold] = []
    for signal, text in hard.items():
        value = parse_value(text)
        if _zero(value):
            continue
        reclaim = parse_value(min_reclaim[signal]) if signal in min_reclaim else Value(quantity=0)
        out.append(Threshold(signal, value, 0.0, reclaim, True))
    for signal, text in soft.items():
        value = parse_value(text)
        if _zero(value):
            continue
        if signal not in soft_grace:
            raise ValueError(
                f"evictionSoftGracePeriod[{signal!r}] must be set for a soft threshold"
            )
        reclaim = parse_value(min_reclaim[signal]) if signal in min_reclaim else Value(quantity=0)
        out.append(Threshold(signal, value, float(soft_grace[signal]), reclaim, False))
    return out

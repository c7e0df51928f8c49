"""PSI-based contention node conditions (KEP-5394, feature gate ``PSINodeCondition``), pure.

Four conditions, each over the ``full`` line of one PSI file the stats sampler reads:

==================================  =============================================
``SystemMemoryContentionPressure``  ``/proc/pressure/memory`` (the node)
``SystemDiskContentionPressure``    ``/proc/pressure/io``
``KubepodsMemoryContentionPressure`` ``kubepods``' ``memory.pressure`` (the pods)
``KubepodsDiskContentionPressure``  ``kubepods``' ``io.pressure``
==================================  =============================================

No CPU condition: the KEP leaves CPU (a compressible resource) out of alpha. Each has its own
threshold in PSI percent (``systemMemoryContentionThreshold``, ...; 0 turns that condition
off), compared with ``avg10`` and ``avg60`` as the KEP's observation logic says:

- ``avg60 >= threshold``: an event says the pressure is high (once, on entering);
- ``avg60 >= threshold`` and ``avg10 >= threshold`` (trending higher): the condition is True;
- True, ``avg60`` still at or above but ``avg10`` below (trending lower): an event says so
  (once), the condition stays True;
- ``avg60 < threshold``: the condition is False.

So the 60 s average is the hysteresis: a condition set by a burst stays until the minute's
average has decayed below the threshold. The KEP leaves tainting to the node lifecycle
controller (``TaintNodesByCondition``); the kubelet side only reports conditions and events.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

Json = Mapping[str, Any]

SYSTEM_MEMORY: Final = "SystemMemoryContentionPressure"
SYSTEM_DISK: Final = "SystemDiskContentionPressure"
KUBEPODS_MEMORY: Final = "KubepodsMemoryContentionPressure"
KUBEPODS_DISK: Final = "KubepodsDiskContentionPressure"
CONDITION_TYPES: Final = (SYSTEM_MEMORY, SYSTEM_DISK, KUBEPODS_MEMORY, KUBEPODS_DISK)
DEFAULT_THRESHOLD: Final = 0.9
"""PSI percent (``avg`` as the kernel prints it): the kubelet implementation's default."""

HIGH_REASON: Final = "ContentionPressureHigh"
LOWER_REASON: Final = "ContentionPressureTrendingLower"
UNAVAILABLE_REASON: Final = "NodeStatusUnknown"

# condition type -> (scope, PSI resource in the summary, what a message calls it)
SOURCES: Final[Mapping[str, tuple[str, str, str]]] = {
    SYSTEM_MEMORY: ("node", "memory", "system memory"),
    SYSTEM_DISK: ("node", "io", "system io"),
    KUBEPODS_MEMORY: ("pods", "memory", "kubepods memory"),
    KUBEPODS_DISK: ("pods", "io", "kubepods io"),
}


@dataclass(frozen=True, slots=True)
class Reading:
    """The ``full`` averages of one PSI file, in percent."""

    avg10: float
    avg60: float


@dataclass(frozen=True, slots=True)
class State:
    """One condition as the monitor keeps it between passes."""

    status: str  # "True" | "False" | "Unknown"
    high: bool = False  # avg60 was at or above the threshold in the last pass
    lowering: bool = False  # True with avg10 below the threshold in the last pass


@dataclass(frozen=True, slots=True)
class Notice:
    """A node Event the observation logic asks for."""

    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Condition:
    """What the node status shows for one contention condition."""

    type: str
    status: str
    reason: str
    message: str


def condition(kind: str, state: State) -> Condition:
    """The condition's reason and message for its status (the kubelet's wording:
    ``KubeletHas<Type>`` / "kubelet has <Type>", and ``KubeletHasNo<Type>`` when False)."""
    if state.status == "True":
        return Condition(kind, "True", f"KubeletHas{kind}", f"kubelet has {kind}")
    if state.status == "False":
        return Condition(kind, "False", f"KubeletHasNo{kind}", f"kubelet has no {kind}")
    return Condition(
        kind,
        "Unknown",
        UNAVAILABLE_REASON,
        f"kubelet cannot read the {SOURCES[kind][2]} PSI (needs cgroup v2 and a kernel with PSI)",
    )


def _full(obj: Json | None) -> Reading | None:
    psi = (obj or {}).get("psi") or {}
    full = psi.get("full")
    if not isinstance(full, Mapping):
        return None
    a10, a60 = full.get("avg10"), full.get("avg60")
    if not isinstance(a10, int | float) or not isinstance(a60, int | float):
        return None
    return Reading(float(a10), float(a60))


def readings(summary: Json) -> dict[str, Reading | None]:
    """Each condition's PSI from a ``/stats/summary`` document (``node.memory.psi``,
    ``node.io.psi``, and the ``pods`` system container's), None where it is missing."""
    node = summary.get("node") or {}
    pods = next((c for c in node.get("systemContainers") or () if c.get("name") == "pods"), None)
    scopes: dict[str, Json | None] = {"node": node, "pods": pods}
    out: dict[str, Reading | None] = {}
    for kind, (scope, resource, _) in SOURCES.items():
        holder = scopes[scope]
        out[kind] = _full((holder or {}).get(resource)) if holder is not None else None
    return out


def _fmt(x: float) -> str:
    return f"{x:.2f}"


def step(
    kind: str, previous: State | None, reading: Reading | None, threshold: float
) -> tuple[State, list[Notice]]:
    """One observation of one condition: its new state and the events to record."""
    if reading is None:
        return State("Unknown"), []
    what = SOURCES[kind][2]
    high = reading.avg60 >= threshold
    rising = high and reading.avg10 >= threshold
    before = previous or State("False")
    notices: list[Notice] = []
    if high and not before.high:
        notices.append(
            Notice(
                "Warning",
                HIGH_REASON,
                f"{kind}: {what} PSI full avg60 {_fmt(reading.avg60)}% is at or above the "
                f"threshold {threshold:g}% (avg10 {_fmt(reading.avg10)}%)",
            )
        )
    if rising:
        status = "True"
    elif not high:
        status = "False"
    else:  # avg60 high, avg10 below: keep what it was (a False stays False)
        status = "True" if before.status == "True" else "False"
    lowering = status == "True" and high and not rising
    if lowering and not before.lowering:
        notices.append(
            Notice(
                "Normal",
                LOWER_REASON,
                f"{kind}: {what} PSI is trending lower: full avg10 {_fmt(reading.avg10)}% is "
                f"below the threshold {threshold:g}%, avg60 {_fmt(reading.avg60)}% is not yet",
            )
        )
    return State(status, high=high, lowering=lowering), notices

"""The Linux resources the runtime manager puts in a container's CRI config, as the kubelet's
kuberuntime computes them (helpers_linux.go, kuberuntime_container_linux.go). Pure functions.

- :func:`milli_cpu_to_shares`, :func:`milli_cpu_to_quota`: millicores to ``cpu.shares`` (the
  CRI unit) and to a CFS quota for a period (``milliCPUToShares``, ``milliCPUToQuota``).
- :func:`container_swap`: ``memory.swap.max`` of one container (``NoSwap``: 0;
  ``LimitedSwap``: request / node memory x node swap for Burstable, non-critical containers
  whose memory request differs from their limit), with the formula's inputs for the report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Final, Literal

from nodeagent.podspec import Container, Pod
from nodeagent.qos import QOSClass, is_critical_pod, pod_qos_class
from nodeagent.quantity import value

MIN_SHARES: Final = 2
MAX_SHARES: Final = 262144
SHARES_PER_CPU: Final = 1024
MIN_QUOTA_PERIOD: Final = 1000
SWAP_MAX_FILE: Final = "memory.swap.max"
OOM_GROUP_FILE: Final = "memory.oom.group"
NO_SWAP: Final = "NoSwap"
LIMITED_SWAP: Final = "LimitedSwap"

SwapBehavior = Literal["NoSwap", "LimitedSwap"]


def milli_cpu_to_shares(milli_cpu: int) -> int:
    if milli_cpu == 0:
        return MIN_SHARES
    return max(MIN_SHARES, min(MAX_SHARES, milli_cpu * SHARES_PER_CPU // 1000))


def milli_cpu_to_quota(milli_cpu: int, period: int) -> int:
    if milli_cpu == 0:
        return 0
    return max(MIN_QUOTA_PERIOD, milli_cpu * period // 1000)


# --- swap --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class SwapInputs:
    behavior: SwapBehavior = NO_SWAP
    cgroup_v2: bool = False
    controller: bool = False
    """``memory.swap.max`` exists in the agent's own cgroup (the kubelet's detection)."""
    memory_capacity: int = 0
    swap_capacity: int = 0


@dataclass(frozen=True, kw_only=True)
class SwapDecision:
    """One container's ``memory.swap.max`` and why; ``limit`` None: nothing is sent."""

    limit: int | None
    reason: str
    request: int = 0
    memory_limit: int = 0
    memory_capacity: int = 0
    swap_capacity: int = 0
    behavior: str = NO_SWAP
    formula: bool = field(default=False)

    @property
    def unified(self) -> dict[str, str]:
        return {} if self.limit is None else {SWAP_MAX_FILE: str(self.limit)}


def calc_swap_for_burstable(request: int, memory_capacity: int, swap_capacity: int) -> int:
    """The kubelet's ``calcSwapForBurstablePods`` (float64 arithmetic, truncated)."""
    if memory_capacity <= 0:
        raise ValueError(f"total node memory is 0 (request {request})")
    if request > memory_capacity:
        raise ValueError(
            f"container request {request} is larger than total node memory {memory_capacity}"
        )
    return math.trunc(float(request) / float(memory_capacity) * float(swap_capacity))


def container_swap(pod: Pod, container: Container, inputs: SwapInputs) -> SwapDecision:
    """The kubelet's ``configureContainerSwapResources`` on cgroup v2 (nothing on v1: the
    kubelet's maintenance mode)."""
    res = container.resources
    request = value(res.requests.get("memory", 0))
    limit = value(res.limits.get("memory", 0))

    def decide(amount: int | None, reason: str, *, formula: bool = False) -> SwapDecision:
        return SwapDecision(
            limit=amount,
            reason=reason,
            request=request,
            memory_limit=limit,
            memory_capacity=inputs.memory_capacity,
            swap_capacity=inputs.swap_capacity,
            behavior=inputs.behavior,
            formula=formula,
        )

    if not inputs.cgroup_v2:
        return decide(None, "cgroup v1: no swap setting sent")
    if not inputs.controller:
        return decide(None, "no swap cgroup controller present")
    if inputs.behavior != LIMITED_SWAP:
        return decide(0, "NoSwap")
    qos = pod_qos_class(pod)
    if is_critical_pod(pod):
        return decide(0, "critical pod: NoSwap")
    if qos is not QOSClass.BURSTABLE:
        return decide(0, f"{qos.value} pod: NoSwap")
    if request == 0 and limit == 0:
        return decide(0, "no memory request or limit: NoSwap")
    if request == limit:
        return decide(0, "memory request equals limit: NoSwap")
    try:
        amount = calc_swap_for_burstable(request, inputs.memory_capacity, inputs.swap_capacity)
    except ValueError as e:
        return decide(0, f"{e}: NoSwap")
    return decide(amount, "LimitedSwap: request / memory capacity x swap capacity", formula=True)

"""The node's pod network range, from its Node object to the container runtime
(the kubelet's ``updatePodCIDR``, kubelet_network.go, and ``UpdatePodCIDR`` of kuberuntime).

kube-controller-manager (``--allocate-node-cidrs``) writes ``spec.podCIDRs`` on the Node; the
kubelet joins them with commas and, whenever that string differs from what it last handed over,
sends it to the runtime in a CRI ``UpdateRuntimeConfig`` (``RuntimeConfig.network_config.
pod_cidr``). A runtime that builds its CNI config from a template (containerd's
``conf_template``) writes it then, and reports ``NetworkReady`` once a CNI config is in place;
until then the Node stays NotReady with "container runtime network not ready: NetworkReady=false
..." (`nodeagent.runtimestate`). A CNI DaemonSet such as flannel reads the Node itself and needs
nothing from the runtime, but the call is made all the same, as the kubelet makes it.

After a successful update the runtime's status is read again at once and the node status
synced (the kubelet's ``fastStatusUpdateOnce``: ``updateRuntimeUp`` then ``syncNodeStatus``).
A failed update is logged and retried at the node status period, the next time the kubelet would
look. The policy is the pure :func:`pod_cidr`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

from nodeagent.kuberuntime import CriError
from nodeagent.log import get_logger

RETRY: Final = 10.0  # nodeStatusUpdateFrequency: when the kubelet would try again


class NodeCache(Protocol):
    def get(self, name: str, namespace: str | None = None) -> Mapping[str, Any] | None: ...

    async def wait_for(self, predicate: Callable[[Any], bool]) -> None: ...


def pod_cidr(node: Mapping[str, Any] | None) -> str:
    """``spec.podCIDRs`` joined by commas, as the kubelet hands them over; '' when none."""
    if not node:
        return ""
    cidrs = (node.get("spec") or {}).get("podCIDRs") or []
    return ",".join(str(c) for c in cidrs)


class PodCIDRManager:
    """Manager: keeps the runtime's pod CIDR equal to the Node's ``spec.podCIDRs``."""

    def __init__(
        self,
        *,
        node_name: str,
        node_cache: NodeCache,
        update: Callable[[str], Awaitable[None]],
        on_change: Callable[[], None] = lambda: None,
        retry: float = RETRY,
    ) -> None:
        self._node_name = node_name
        self._cache = node_cache
        self._update = update
        self._on_change = on_change
        self._retry = retry
        self._applied = ""
        self._log = get_logger("podcidr")

    @property
    def name(self) -> str:
        return "podcidr"

    def pod_cidr(self) -> str:
        """What the runtime was last given ('' before the first update)."""
        return self._applied

    def _wanted(self) -> str:
        return pod_cidr(self._cache.get(self._node_name))

    async def run(self) -> None:
        while True:
            await self._cache.wait_for(lambda _: self._wanted() not in ("", self._applied))
            wanted = self._wanted()
            self._log.info("Updating runtime config through cri with podcidr", CIDR=wanted)
            try:
                await self._update(wanted)
            except CriError as e:
                self._log.error("Error updating pod CIDR", error=f"failed to update pod CIDR: {e}")
                await asyncio.sleep(self._retry)
                continue
            self._log.info("Updating Pod CIDR", originalPodCIDR=self._applied, newPodCIDR=wanted)
            self._applied = wanted
            self._on_change()

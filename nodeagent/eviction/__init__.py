"""Node-pressure eviction (the kubelet's ``pkg/kubelet/eviction``): thresholds, observations,
node conditions, node-level reclaim, ranking and one eviction per pass.

:mod:`.thresholds` parses the configuration, :mod:`.policy` decides (pure), :mod:`.manager`
observes, reports and acts through injected callables.
"""

from __future__ import annotations

from nodeagent.eviction.manager import Eviction, EvictionManager, Terminator
from nodeagent.eviction.thresholds import Threshold, parse_thresholds

__all__ = ["Eviction", "EvictionManager", "Terminator", "Threshold", "parse_thresholds"]

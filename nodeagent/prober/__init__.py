"""The prober manager: liveness, readiness and startup probes (issue 13), see ``manager``."""

from nodeagent.prober.manager import NoProbes, PodProbes, ProberManager
from nodeagent.prober.prober import ProbeIO, ProbeType

__all__ = ["NoProbes", "PodProbes", "ProbeIO", "ProbeType", "ProberManager"]

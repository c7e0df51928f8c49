"""Feature gates nodeagent understands (``kubelet.featureGates``), with their defaults.

The defaults are those of the kubelet release nodeagent tracks. A gate not listed here is a
configuration error, as it is for the kubelet ("unrecognized feature gate"). Managers receive
the effective gates as a frozen mapping; nothing reads a process-global gate.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

DEFAULTS: Final[Mapping[str, bool]] = MappingProxyType(
    {
        "ExtendWebSocketsToKubelet": True,
        "GracefulNodeShutdown": True,
        "GracefulNodeShutdownBasedOnPodPriority": True,
        "HostnameOverride": True,
        "ImageMaximumGCAge": True,
        "ImageVolume": True,  # GA in 1.36: volumes[].image through the runtime
        "KubeletFineGrainedAuthz": True,
        "KubeletEnsureSecretPulledImages": True,  # beta: pull records, credential checks
        "KubeletPSI": True,
        "KubeletServiceAccountTokenForCredentialProviders": True,  # beta: plugin tokenAttributes
        "NodeDeclaredFeatures": True,
        "NodeSwap": True,
        "PSINodeCondition": False,  # alpha (KEP-5394): PSI contention node conditions
        "QOSReserved": False,  # alpha: qosReserved memory limits on the QoS cgroups
        "RotateKubeletServerCertificate": True,
        "SystemdWatchdog": True,
        "TaintTolerationComparisonOperators": False,  # alpha: Lt/Gt tolerations at admission
    }
)


def effective(overrides: Mapping[str, bool]) -> Mapping[str, bool]:
    """The defaults with ``overrides`` applied (unknown names are left to validation)."""
    return MappingProxyType({**DEFAULTS, **overrides})


DECLARABLE: Final = ("ExtendWebSocketsToKubelet",)
"""Features the node may declare in ``status.declaredFeatures`` (NodeDeclaredFeatures), each
only because nodeagent serves it end to end: ``ExtendWebSocketsToKubelet`` (the apiserver
then passes exec/attach/port-forward WebSockets through, and the server translates them)."""


def declared(gates: Mapping[str, bool]) -> tuple[str, ...] | None:
    """``status.declaredFeatures`` for these effective gates, sorted as the kubelet sorts
    them; None when ``NodeDeclaredFeatures`` is off (the field is then left alone)."""
    if not gates.get("NodeDeclaredFeatures", False):
        return None
    return tuple(sorted(name for name in DECLARABLE if gates.get(name, False)))

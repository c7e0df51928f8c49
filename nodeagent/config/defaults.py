"""Defaults that depend on what else the user set (the kubelet's ``SetDefaults_*`` rules).

Static defaults live in the schema; these rules need to know whether a field was written at
all, so they run on the raw data (file plus flags) before it is decoded.
"""

from __future__ import annotations

from typing import Any


def apply_dependent_defaults(data: dict[str, Any]) -> None:
    """Fill dependent defaults into ``data`` in place.

    - ``nodeStatusReportFrequency`` defaults to ``nodeStatusUpdateFrequency`` when only the
      latter is set (kubelet backward-compatibility rule).
    - ``serializeImagePulls`` defaults to false when ``maxParallelImagePulls`` > 1.
    """
    kubelet = data.get("kubelet")
    if not isinstance(kubelet, dict):
        return
    if "nodeStatusUpdateFrequency" in kubelet and "nodeStatusReportFrequency" not in kubelet:
        kubelet["nodeStatusReportFrequency"] = kubelet["nodeStatusUpdateFrequency"]
    parallel = kubelet.get("maxParallelImagePulls")
    if "serializeImagePulls" not in kubelet and isinstance(parallel, int) and parallel > 1:
        kubelet["serializeImagePulls"] = False

"""What a runtime tells of itself in a verbose CRI ``Status``.

containerd puts its CRI plugin configuration, as JSON, under ``info["config"]``: the sandbox
image (``sandboxImage``), the runtimes and their options (``containerd.runtimes``), ...
"""

from __future__ import annotations

import json
from typing import Any

from nodeagent.kuberuntime import types as cri


def runtime_config_of(status: cri.StatusResponse) -> dict[str, Any]:
    """``info["config"]`` of a verbose ``Status`` as a dict; empty when absent or unreadable."""
    try:
        config = json.loads(status.info.get("config", "") or "{}")
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}

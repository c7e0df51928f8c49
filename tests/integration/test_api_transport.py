"""Watch events reach the agent's API client at once on a quiet apiserver.

The client as the agent builds it (``ApiClient()``: its production transport) with six watches
open, as the agent has (Node, Pods, Services, EndpointSlices, ...), and one write every 2 s:
each event must arrive within 1 s of the write. With every watch multiplexed on one HTTP/2
connection (the agent's transport before it had one connection per watch) the same probe saw
events 2-58 s late.
"""

from __future__ import annotations

from typing import Any

import pytest
from harness.watchprobe import probe_watch_latency

from nodeagent.apiserver import ApiClient, load_kubeconfig

pytestmark = pytest.mark.integration


async def test_each_single_write_reaches_a_watcher_within_a_second_with_six_watches_open(
    control_plane: Any,
) -> None:
    api = ApiClient(endpoint=load_kubeconfig(control_plane.admin_kubeconfig))
    try:
        probe = await probe_watch_latency(api, watches=6, writes=5, gap=2.0, deadline=30.0)
    finally:
        await api.aclose()

    assert probe.missed == 0, probe
    assert len(probe.latencies) == 5
    assert max(probe.latencies) < 1.0, [f"{x:.3f}s" for x in probe.latencies]

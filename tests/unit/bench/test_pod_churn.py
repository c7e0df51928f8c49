"""The churn bench's figures from pods' moments, and its loop against a fake apiserver
(creates spread evenly, each pod deleted its lifetime after it ran; nothing real runs)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from pod_churn import ChurnPod, Summary, Usage, backlog_max, churn, report, summarize


def test_backlog_counts_pods_created_and_not_yet_running() -> None:
    pods = [
        ChurnPod(created=0.0, running=3.0),
        ChurnPod(created=1.0, running=2.0),
        ChurnPod(created=2.0, running=4.0),  # created as the second one runs: 2 waiting
        ChurnPod(created=5.0),  # never ran: waiting until the end
    ]
    assert backlog_max(pods, end=10.0) == 2
    assert backlog_max([ChurnPod(created=float(i)) for i in range(3)], end=9.0) == 3


def test_summary_of_a_steady_run() -> None:
    pods = {
        f"c-{i}": ChurnPod(
            created=float(i), running=i + 1.0 + i / 100, delete_sent=i + 31.0, gone=i + 33.0
        )
        for i in range(100)
    }
    s = summarize(pods)
    assert (s.created, s.started, s.gone) == (100, 100, 100)
    assert s.create_span_s == 99.0
    assert s.span_s == 99 + 33.0
    assert s.start_p50 == pytest.approx(1.49)  # nearest rank: the 50th of 100
    assert s.start_p99 == pytest.approx(1.98)
    assert s.start_max == pytest.approx(1.99)
    assert s.delete_p50 == s.delete_p99 == 2.0
    # Running by the last create (t=99): pods 0..97; gone by then: 0..66.
    assert s.starts_per_s == pytest.approx(98 / 99)
    assert s.deletes_per_s == pytest.approx(67 / 99)
    assert s.backlog_max == 2


def test_summary_counts_a_pod_that_never_ran_or_never_went() -> None:
    pods = {
        "a": ChurnPod(created=0.0, running=1.0, delete_sent=2.0, gone=3.0),
        "b": ChurnPod(created=1.0, delete_sent=121.0),  # never ran; its delete never finished
    }
    s = summarize(pods)
    assert (s.created, s.started, s.gone) == (2, 1, 1)
    assert s.span_s == 121.0
    assert s.backlog_max == 1
    with pytest.raises(ValueError, match="no pods"):
        summarize({})


def test_report_puts_the_components_side_by_side() -> None:
    s = Summary(1000, 1000, 999, 640.0, 599.4, 1.6, 1.55, 1.2, 3.4, 5.0, 2.1, 4.0, 6.0, 4)
    u = Usage(120.0, 200.0, 90 * 1024, 85 * 1024, {"ListContainers": 30.0, "Version": 1.0})
    text = report({"nodeagent": (s, u), "kubelet": (s, u)}, markdown=True, header="h")
    lines = text.splitlines()
    assert lines[2] == "| | nodeagent | kubelet |"
    start = "| start latency p50 / p99 / max (s) | 1.20 / 3.40 / 5.00 | 1.20 / 3.40 / 5.00 |"
    assert start in lines
    cpu = "| component / containerd CPU seconds (per minute) | 120.0 / 200.0 (11.25 / 18.75)"
    assert cpu in text
    assert "ListContainers 30, Version 1" in text


class FakeApi:
    """Pods go Running 0.05 s after their create and are gone 0.02 s after their delete, as
    a watch would tell; one pod (``stuck``) never runs."""

    def __init__(self, stuck: str = "") -> None:
        self.calls: list[tuple[float, str, str]] = []
        self.stuck = stuck
        self.on_event: Any = None

    async def pods(self, namespace: str) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "1"}, "items": []}

    async def watch_events(self, namespace: str, version: str, on_event: Any) -> None:
        self.on_event = on_event
        await asyncio.Event().wait()

    def later(self, delay: float, kind: str, pod: dict[str, Any]) -> None:
        asyncio.get_running_loop().call_later(delay, self.on_event, kind, pod)

    async def call(self, method: str, path: str, body: Any = None) -> dict[str, Any]:
        now = asyncio.get_running_loop().time()
        if method == "POST":
            name = body["metadata"]["name"]
            self.calls.append((now, method, name))
            if name != self.stuck:
                running = {
                    **body,
                    "status": {
                        "phase": "Running",
                        "containerStatuses": [{"name": "sleep", "state": {"running": {}}}],
                    },
                }
                self.later(0.05, "MODIFIED", running)
        else:
            name = path.rsplit("/", 1)[1]
            self.calls.append((now, method, name))
            self.later(0.02, "DELETED", {"metadata": {"name": name}})
        return {}


def body(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"c-{i}"},
        "spec": {"containers": [{"name": "sleep"}]},
    }


def test_churn_spreads_creates_and_deletes_each_pod_after_its_lifetime() -> None:
    api = FakeApi(stuck="c-3")
    # FakeApi has the four methods churn calls, not pod_api.Api's type (an httpx client pair)
    records = asyncio.run(
        churn(api, "ns", body, pods=5, seconds=0.5, lifetime=0.2, start_within=0.3)  # type: ignore[arg-type]
    )
    assert sorted(records) == [f"c-{i}" for i in range(5)]
    # Lower bounds only (a sleep never ends early by more than the clock's resolution);
    # the upper ones are loose: a loaded machine may run the loop late.
    creates = [t for t, method, _ in api.calls if method == "POST"]
    assert [c for _, c, _ in api.calls].count("POST") == 5
    assert all(t - creates[0] >= i * 0.1 - 0.01 for i, t in enumerate(creates)), creates
    assert creates[-1] - creates[0] < 2.0
    for name, r in records.items():
        assert r.gone is not None and r.delete_sent is not None and r.gone > r.delete_sent
        if name == "c-3":  # never ran: deleted once start_within passed
            assert r.running is None
            assert 0.29 <= r.delete_sent - r.created < 2.0
        else:
            assert r.running is not None
            assert 0.19 <= r.delete_sent - r.running < 2.0
    s = summarize(records)
    assert (s.created, s.started, s.gone) == (5, 4, 5)
    assert not math.isnan(s.delete_p99)

"""Which Services count as changed between two polls of the watch caches."""

from __future__ import annotations

import datetime as dt

from proxy_builders import endpoint, endpoint_slice, service

from nodeagent.proxy.metrics import Histogram
from nodeagent.proxy.model import ServiceName
from nodeagent.proxy.tracking import ServiceTracker

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
WEB, API = ServiceName("default", "web"), ServiceName("default", "api")


def tracker() -> ServiceTracker:
    return ServiceTracker(now=lambda: NOW)


def test_unchanged_objects_report_nothing_and_replaced_ones_report_their_service() -> None:
    t = tracker()
    svc, eps = service("web", "10.96.0.10"), endpoint_slice("web", [endpoint("10.244.1.1")])
    assert t.poll([svc], [eps]).services == {WEB}
    assert t.poll([svc], [eps]).services == set()

    newer = endpoint_slice("web", [endpoint("10.244.1.2")])
    changes = t.poll([svc], [newer])

    assert changes.services == {WEB}
    assert changes.triggers == {WEB: NOW}
    assert t.slices(WEB) == [newer]


def test_a_slice_moving_to_another_service_changes_both() -> None:
    t = tracker()
    svcs = [service("web", "10.96.0.10"), service("api", "10.96.0.11")]
    t.poll(svcs, [endpoint_slice("web", [endpoint("10.244.1.1")], name="shared")])

    moved = endpoint_slice("api", [endpoint("10.244.1.1")], name="shared")
    assert t.poll(svcs, [moved]).services == {WEB, API}
    assert t.slices(WEB) == []
    assert t.slices(API) == [moved]


def test_deleted_objects_report_their_service_and_the_trigger_time_comes_from_the_slice() -> None:
    t = tracker()
    stamp = "2025-12-31T23:59:58Z"
    eps = endpoint_slice(
        "web",
        [endpoint("10.244.1.1")],
        annotations={"endpoints.kubernetes.io/last-change-trigger-time": stamp},
    )
    first = t.poll([service("web", "10.96.0.10")], [eps])
    assert first.triggers == {WEB: NOW - dt.timedelta(seconds=2)}

    gone = t.poll([], [])
    assert gone.services == {WEB}
    assert t.service(WEB) is None
    assert t.names() == []


def test_histograms_count_into_their_buckets() -> None:
    h = Histogram("x", "help", (0.1, 1.0))
    for value in (0.05, 0.1, 0.5, 3.0):
        h.observe(value)
    assert h.counts == [2, 1, 1]
    assert (h.count, h.sum) == (4, 3.65)

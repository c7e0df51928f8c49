"""The soak's fault records: the outage a control-plane fault caused lasts until the apiserver
answers again, which can be after its readyz passed."""

from __future__ import annotations

from soak import invariants as inv
from soak.run import FaultRecord


def test_an_outage_lasts_until_the_apiserver_answers_again() -> None:
    record = FaultRecord(2, "etcd-stop", None, start=100.0, end=142.5)
    assert record.window() == inv.Window("etcd-stop", 100.0, 142.5, None)
    record.served_again = 162.0  # Lease reads timed out for 20 s after readyz passed
    assert record.window() == inv.Window("etcd-stop", 100.0, 162.0, None)
    # a renewal gap of 78 s across it is within the outage plus the interval and slack
    bad, _ = inv.lease_gaps("node-1", [95.0, 173.0], [record.window()])
    assert bad == []
    bad, _ = inv.lease_gaps(
        "node-1", [95.0, 173.0], [FaultRecord(2, "etcd-stop", None, 100.0, 142.5).window()]
    )
    assert [v.invariant for v in bad] == ["lease-gap"]


def test_the_recovery_line_says_what_its_last_seconds_waited_for() -> None:
    record = FaultRecord(3, "cut-off", "node-3", start=100.0, end=166.8)
    record.converged_at, record.waited_for = 185.6, ["node node-3 not Ready"]
    assert record.recovery(60) == "18.8s, last waiting for: node node-3 not Ready"
    record.waited_for = []  # the first look after the fault found everything at its spec
    assert record.recovery(60) == "18.8s"
    record.converged_at, record.unconverged = None, ["pod soak/web-1 Pending, ready=False"]
    assert record.recovery(60) == "not in 60s: ['pod soak/web-1 Pending, ready=False']"

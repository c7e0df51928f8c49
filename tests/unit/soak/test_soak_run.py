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

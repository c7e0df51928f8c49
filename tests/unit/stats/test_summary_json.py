"""The Summary API's pure JSON builders."""

from __future__ import annotations

from nodeagent.stats.summary_json import nano_cores


def test_nano_cores_from_two_samples() -> None:
    assert nano_cores(None, (10, 10)) is None
    assert nano_cores((0, 0), (2_000_000_000, 1_000_000_000)) == 500_000_000  # half a core
    assert nano_cores((5, 10), (5, 20)) is None
    assert nano_cores((0, 20), (1, 10)) is None  # counter went back (a restart)

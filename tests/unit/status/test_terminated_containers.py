"""``kubelet_terminated_containers_total``: a container counts once, when a status first shows
it terminated (the kubelet's ``checkAndRecordTerminations``)."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.status.metrics import terminations


def terminated(name: str, code: int, reason: str) -> dict[str, Any]:
    return {"name": name, "state": {"terminated": {"exitCode": code, "reason": reason}}}


def running(name: str) -> dict[str, Any]:
    return {"name": name, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}


@pytest.mark.parametrize(
    ("old", "new", "counted"),
    [
        pytest.param(
            {"containerStatuses": [running("app")]},
            {"containerStatuses": [terminated("app", 1, "Error")]},
            [("container", "1", "Error")],
            id="running, then terminated",
        ),
        pytest.param(
            {"containerStatuses": [terminated("app", 1, "Error")]},
            {"containerStatuses": [terminated("app", 1, "Error")]},
            [],
            id="terminated already: not again",
        ),
        pytest.param(
            {},
            {"initContainerStatuses": [terminated("setup", 0, "Completed")]},
            [("init_container", "0", "Completed")],
            id="new and already terminated (an init container)",
        ),
        pytest.param(
            {"containerStatuses": [terminated("app", 137, "OOMKilled")]},
            {"containerStatuses": [running("app")]},
            [],
            id="restarted: nothing",
        ),
        pytest.param(
            {"ephemeralContainerStatuses": [running("debug")]},
            {"ephemeralContainerStatuses": [terminated("debug", 0, "Completed")]},
            [("ephemeral_container", "0", "Completed")],
            id="an ephemeral container",
        ),
        pytest.param(
            {"containerStatuses": [running("a"), running("b")]},
            {"containerStatuses": [terminated("a", 2, "Error"), running("b")]},
            [("container", "2", "Error")],
            id="only the one that ended",
        ),
    ],
)
def test_terminations(
    old: dict[str, Any], new: dict[str, Any], counted: list[tuple[str, str, str]]
) -> None:
    assert list(terminations(old, new)) == counted

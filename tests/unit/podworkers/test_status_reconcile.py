"""A condition the agent reports, changed in the API by another component, is set back: the
node lifecycle controller marks every pod of a node it lost Ready False (MarkPodsNotReady), and
once the node reaches the apiserver again nothing on it changes; the kubelet's status manager
sends its own status again (``needsReconcile``), and so does the agent. Found by the soak
(seed 60, a 67 s cut-off of node-3: its pods stayed Ready False for the last 26 minutes)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pod_stack import NODE, Stack, until

from nodeagent.apiserver import PODS
from nodeagent.status.manager import drifted
from nodeagent.testing.pods import pod_object

pytestmark = pytest.mark.looptime


def ready(pod: dict[str, Any] | None) -> str:
    conditions = ((pod or {}).get("status") or {}).get("conditions") or []
    return next((c["status"] for c in conditions if c["type"] == "Ready"), "")


def mark_not_ready(obj: dict[str, Any]) -> None:
    """What the node lifecycle controller writes on each pod of a NotReady node."""
    for c in obj["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", lastTransitionTime="2026-01-01T00:10:00Z")


async def test_ready_set_false_by_the_node_controller_is_set_back(stack: Stack) -> None:
    body = pod_object("web", node=NODE)
    del body["metadata"]["uid"]
    stack.server.seed(PODS, body)
    await until(lambda: ready(stack.pod("web")) == "True")
    await asyncio.sleep(5)
    patches = len(stack.server.calls_to("patch", "pods"))

    stack.server.modify(PODS, "web", mark_not_ready, "default")

    await until(lambda: ready(stack.pod("web")) == "True", within=5)
    assert len(stack.server.calls_to("patch", "pods")) == patches + 1
    pod = stack.pod("web") or {}
    containers_ready = [c for c in pod["status"]["conditions"] if c["type"] == "ContainersReady"]
    assert containers_ready[0]["status"] == "True"
    await asyncio.sleep(60)  # its own patch coming back is no drift: no second patch
    assert len(stack.server.calls_to("patch", "pods")) == patches + 1


def condition(type_: str, status: str) -> dict[str, str]:
    return {"type": type_, "status": status}


@pytest.mark.parametrize(
    ("api", "sent", "drift"),
    [
        ([condition("Ready", "False")], [condition("Ready", "True")], True),
        ([condition("Ready", "True")], [condition("Ready", "True")], False),
        ([], [condition("Ready", "True")], True),  # removed by another
        # a condition the agent does not own (a readiness gate's, DisruptionTarget) is others'
        ([condition("Ready", "True"), condition("example.com/gate", "False")],
         [condition("Ready", "True"), condition("DisruptionTarget", "True")], False),
        ([condition("Ready", "True"), condition("Initialized", "True")],
         [condition("Ready", "True")], False),  # what the agent did not send is not compared
    ],
)  # fmt: skip
def test_drifted(api: list[dict[str, str]], sent: list[dict[str, str]], drift: bool) -> None:
    assert drifted({"conditions": api}, {"phase": "Running", "conditions": sent}) is drift

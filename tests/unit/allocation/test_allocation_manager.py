"""The allocation manager: the checkpoint keeps what was accepted across a restart, pending
resizes are reported once per change, accepted ones start a resize in progress."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.allocation import AllocationManager
from nodeagent.allocation.manager import STATE_FILE
from nodeagent.events import ObjectReference
from nodeagent.podspec import Pod, decode_pod
from nodeagent.testing.pods import container, pod_object

ALLOCATABLE = {"cpu": "2", "memory": "4Gi", "pods": "110"}


@dataclass
class Events:
    seen: list[tuple[str, str]] = field(default_factory=list)

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.seen.append((type, reason))


def web(cpu_limit: str, *, generation: int = 1) -> Pod:
    """cpu limit 64: a request (64 cores) beyond the node's allocatable."""
    request = cpu_limit if cpu_limit == "64" else "100m"
    app = container("app", requests={"cpu": request}, limits={"cpu": cpu_limit})
    body = pod_object("web", uid="u1", containers=[app])
    body["metadata"]["generation"] = generation
    return decode_pod(body)


def manager(tmp_path: Path, events: Events | None = None) -> AllocationManager:
    return AllocationManager(
        path=tmp_path / STATE_FILE, allocatable=lambda: ALLOCATABLE, events=events
    )


async def test_a_restarted_agent_keeps_the_allocation_it_had_accepted(tmp_path: Path) -> None:
    first = manager(tmp_path)
    assert await first.allocate(web("200m")) == web("200m")
    stored = json.loads((tmp_path / STATE_FILE).read_text())
    assert stored["pods"]["u1"]["allocation"]["app"]["limits"] == {"cpu": "200m"}

    # the spec changed while the agent was down: it is a resize, judged on its merits
    again = manager(tmp_path)
    wanted = web("64", generation=2)
    allocated = await again.allocate(wanted)
    assert allocated.spec.containers[0].resources.limits == {"cpu": "200m"}
    [pending] = again.conditions("u1")
    assert (pending["type"], pending["reason"]) == ("PodResizePending", "Infeasible")


async def test_pending_is_reported_once_and_cleared_when_the_spec_goes_back(
    tmp_path: Path,
) -> None:
    events = Events()
    m = manager(tmp_path, events)
    await m.allocate(web("200m"))
    await m.allocate(web("64", generation=2))
    await m.allocate(web("64", generation=2))
    assert events.seen == [("Warning", "ResizeInfeasible")]
    assert await m.allocate(web("200m", generation=3)) == web("200m", generation=3)
    assert m.conditions("u1") == []


async def test_an_accepted_resize_is_in_progress_until_done(tmp_path: Path) -> None:
    events = Events()
    m = manager(tmp_path, events)
    await m.allocate(web("200m"))
    allocated = await m.allocate(web("400m", generation=2))
    assert allocated.spec.containers[0].resources.limits == {"cpu": "400m"}
    assert m.conditions("u1") == [
        {"type": "PodResizeInProgress", "status": "True", "observedGeneration": 2}
    ]
    m.resize_done(allocated)
    assert m.conditions("u1") == []
    assert events.seen == [("Normal", "ResizeStarted"), ("Normal", "ResizeCompleted")]
    stored = json.loads((tmp_path / STATE_FILE).read_text())
    assert stored["pods"]["u1"]["allocation"]["app"]["limits"] == {"cpu": "400m"}


async def test_an_unreadable_checkpoint_starts_empty(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text("{not json")
    m = manager(tmp_path)
    assert await m.allocate(web("400m")) == web("400m")
    assert m.allocation("u1")["app"]["limits"] == {"cpu": "400m"}


async def test_the_allocation_is_recorded_at_admission_and_written_by_the_first_sync(
    tmp_path: Path,
) -> None:
    """A resize that lands between admission and the pod's first sync is a resize (the
    kubelet checkpoints the allocation in ``AddPod``), not the pod's starting resources."""
    m = manager(tmp_path)
    await m.load()
    m.admitted(web("200m"))
    assert not (tmp_path / STATE_FILE).exists()  # no I/O on the admission path
    allocated = await m.allocate(web("64", generation=2))
    assert allocated.spec.containers[0].resources.limits == {"cpu": "200m"}
    [pending] = m.conditions("u1")
    assert (pending["type"], pending["reason"]) == ("PodResizePending", "Infeasible")
    stored = json.loads((tmp_path / STATE_FILE).read_text())
    assert stored["pods"]["u1"]["allocation"]["app"]["limits"] == {"cpu": "200m"}


async def test_admission_keeps_a_checkpointed_allocation(tmp_path: Path) -> None:
    first = manager(tmp_path)
    await first.allocate(web("200m"))
    again = manager(tmp_path)
    await again.load()
    again.admitted(web("64", generation=2))  # the spec moved while the agent was down
    assert again.allocation("u1")["app"]["limits"] == {"cpu": "200m"}

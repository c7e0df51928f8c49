"""The "used" sum admission compares a new pod with, against the kubelet's rules: which pods
count (``GetActivePods``: the pod manager's pods less the inactive ones), with their allocated
resources (``getAllocatedPods``) summed as ``NodeInfo`` sums them (``PodRequests`` with the
status resources). Each row is a node's pods in some state and the cpu the kubelet's
``Node didn't have enough resource: cpu, ... used: N`` would name."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from nodeagent.allocation.policy import Allocation, allocated_pod
from nodeagent.lifecycle.resources import used
from nodeagent.pods.activepods import Termination, is_inactive
from nodeagent.podspec import Pod
from nodeagent.testing.pods import container, pod

NOT_REQUESTED, REQUESTED, DONE = Termination.NOT_REQUESTED, Termination.REQUESTED, Termination.DONE


@dataclass
class OnNode:
    """One pod as the node knows it."""

    milli: int = 300
    termination: Termination | None = NOT_REQUESTED  # None: no worker (refused)
    api_phase: str = "Running"
    reported_phase: str | None = "Running"
    in_api: bool = True  # False: force-deleted, gone from the API (its worker may still run)
    deleted: bool = False
    allocation: int | None = None  # the node's allocation (an accepted or pending resize)
    running_with: int | None = None  # status.containerStatuses[].resources
    infeasible: bool = False
    init: list[int] = field(default_factory=list)  # plain init containers
    sidecars: list[int] = field(default_factory=list)
    overhead: int = 0

    def build(self) -> Pod:
        spec: dict[str, Any] = {}
        if self.overhead:
            spec["overhead"] = {"cpu": f"{self.overhead}m"}
        inits = [container(f"i{n}", requests={"cpu": f"{m}m"}) for n, m in enumerate(self.init)]
        inits += [
            container(f"s{n}", requests={"cpu": f"{m}m"}, restartPolicy="Always")
            for n, m in enumerate(self.sidecars)
        ]
        p = pod(
            containers=[container("app", requests={"cpu": f"{self.milli}m"})],
            init_containers=inits,
            deleted=self.deleted,
            **spec,
        )
        p.status["phase"] = self.api_phase
        if self.running_with is not None:
            p.status["containerStatuses"] = [
                {"name": "app", "resources": {"requests": {"cpu": f"{self.running_with}m"}}}
            ]
        if self.infeasible:
            p.status["conditions"] = [
                {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
            ]
        return p

    def allocation_of(self) -> Allocation | None:
        if self.allocation is None:
            return None
        return {"app": {"requests": {"cpu": f"{self.allocation}m"}, "limits": {}}}


def used_cpu(node: list[OnNode]) -> int:
    """What admission would name as used: the pods the API still has, less the inactive, as
    allocated, summed."""
    counted = []
    for entry in node:
        p = entry.build()
        if not entry.in_api or is_inactive(p, entry.termination, entry.reported_phase):
            continue
        counted.append(allocated_pod(p, entry.allocation_of())[0])
    return used(counted).get("cpu", 0)


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param([OnNode(), OnNode()], 600, id="two running pods"),
        pytest.param(
            [OnNode(), OnNode(in_api=False, termination=NOT_REQUESTED)],
            300,
            id="force-deleted, its worker still starting it: gone from the API, counts nothing",
        ),
        pytest.param(
            [OnNode(), OnNode(in_api=False, termination=REQUESTED)],
            300,
            id="force-deleted and being stopped: counts nothing",
        ),
        pytest.param(
            [OnNode(), OnNode(deleted=True, termination=REQUESTED)],
            600,
            id="deleted with a grace period, still stopping: counts until stopped",
        ),
        pytest.param(
            [OnNode(), OnNode(deleted=True, termination=DONE)],
            300,
            id="deleted and stopped, its object not yet gone: counts nothing",
        ),
        pytest.param(
            [OnNode(), OnNode(api_phase="Succeeded", reported_phase="Succeeded", termination=DONE)],
            300,
            id="completed and torn down",
        ),
        pytest.param(
            [OnNode(), OnNode(api_phase="Running", reported_phase="Failed", termination=REQUESTED)],
            600,
            id="failed, its sandbox still being stopped: counts until stopped",
        ),
        pytest.param(
            [OnNode(), OnNode(api_phase="Pending", reported_phase="Failed", termination=None)],
            300,
            id="refused at admission (Failed, no worker)",
        ),
        pytest.param(
            [OnNode(), OnNode(api_phase="Pending", reported_phase=None, termination=None)],
            300,
            id="not admitted yet (later in the same batch)",
        ),
        pytest.param(
            [OnNode(), OnNode(api_phase="Succeeded", reported_phase=None, termination=DONE)],
            300,
            id="terminal before the node ran it (after a restart)",
        ),
        pytest.param(
            [
                OnNode(),
                OnNode(api_phase="Failed", reported_phase="Failed", termination=NOT_REQUESTED),
            ],
            300,
            id="terminal and no termination asked: inactive",
        ),
        pytest.param(
            [OnNode(milli=100, init=[500, 300])],
            500,
            id="init containers maxed, not summed",
        ),
        pytest.param(
            [OnNode(milli=100, sidecars=[200], init=[250])],
            300,
            id="sidecars summed; an init container before the sidecar needs only itself",
        ),
        pytest.param(
            [OnNode(milli=100, overhead=150)],
            250,
            id="pod overhead added",
        ),
        pytest.param(
            [OnNode(milli=900, allocation=300)],
            300,
            id="a resize up not accepted (Deferred): the allocation",
        ),
        pytest.param(
            [OnNode(milli=300, allocation=300, running_with=600)],
            600,
            id="a resize down accepted but not actuated: what runs",
        ),
        pytest.param(
            [OnNode(milli=900, allocation=300, running_with=300, infeasible=True)],
            300,
            id="an infeasible resize: what runs and what is allocated",
        ),
    ],
)
def test_used_sum_follows_the_kubelet(node: list[OnNode], expected: int) -> None:
    assert used_cpu(node) == expected

"""The soak's seeded timeline: rounds of churn, each with one fault in it.

A round is some seconds of workload actions (`Action`), a fault that starts part-way through
them (`Fault`; the churn goes on while it lasts), then a pause while the checker waits for the
cluster to converge. Everything is drawn from one `random.Random(seed)`, against a model of
what the workload has created (`Model`), so the same seed and node count give the same
sequence of actions and faults: `python -m soak plan --seed N` prints it without a cluster.
Which pod a "delete a pod" or "unready a pod" action hits is chosen when it runs (by index into
the live pods, sorted), so a replay hits the same pod when the cluster is where it was.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

FAULT_KINDS = (
    "agent-kill",  # SIGKILL the agent, start it again after 0-10 s
    "agent-term",  # SIGTERM (an ordered stop), start it again at once
    "containerd-kill",  # SIGKILL the node's containerd, start it again after 0-5 s
    "apiserver-stop",  # stop kube-apiserver for 30-120 s
    "etcd-stop",  # stop etcd for 30-120 s
    "cut-off",  # drop the node's traffic to the apiserver (nft in its netns) for 30-120 s
    "disk-fill",  # fill the node's root dir past its eviction threshold for 60 s
    "cpu-throttle",  # the agent's CPU capped at 5 % of a core for 60 s
)
NODE_FAULTS = frozenset(FAULT_KINDS) - {"apiserver-stop", "etcd-stop"}

MAX_DEPLOYMENTS = 4
MAX_JOBS = 2
MAX_PODS = 3
MAX_REPLICAS = 4


@dataclass(frozen=True)
class Action:
    at: float  # seconds into the round
    kind: str
    name: str
    arg: int = 0

    def line(self) -> str:
        return f"+{self.at:5.1f}s {self.kind} {self.name} {self.arg}"


@dataclass(frozen=True)
class Fault:
    at: float  # seconds into the round
    kind: str
    node: str | None
    duration: float  # how long the fault lasts (a restart's delay for kills)

    def line(self) -> str:
        where = f" on {self.node}" if self.node else ""
        return f"+{self.at:5.1f}s FAULT {self.kind}{where} for {self.duration:.0f}s"


@dataclass(frozen=True)
class Round:
    number: int
    actions: tuple[Action, ...]
    fault: Fault
    churn: float  # seconds of actions before and during the fault

    def lines(self) -> list[str]:
        events = sorted(
            [(a.at, a.line()) for a in self.actions] + [(self.fault.at, self.fault.line())]
        )
        return [f"round {self.number}:"] + [f"  {text}" for _, text in events]


@dataclass
class Model:
    """What the workload has made, as the planner knows it."""

    deployments: dict[str, int] = field(default_factory=dict)  # name -> replicas
    jobs: list[str] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)
    serial: int = 0

    def new_name(self, prefix: str) -> str:
        self.serial += 1
        return f"{prefix}-{self.serial}"


def _action(rng: random.Random, model: Model, at: float) -> Action:
    choices = ["deploy-create", "job-create", "pod-create"]
    if model.deployments:
        choices += ["deploy-scale", "deploy-roll", "pod-kill", "pod-kill", "unready"]
        choices += ["deploy-delete"] if len(model.deployments) > 1 else []
    choices += ["job-delete"] if model.jobs else []
    choices += ["pod-delete", "pod-delete-now"] if model.pods else []
    kind = rng.choice(choices)
    if kind == "deploy-create" and len(model.deployments) >= MAX_DEPLOYMENTS:
        kind = "deploy-scale"
    if kind == "job-create" and len(model.jobs) >= MAX_JOBS:
        kind = "job-delete"
    if kind == "pod-create" and len(model.pods) >= MAX_PODS:
        kind = "pod-delete"
    if kind == "deploy-create":
        name = model.new_name("web")
        model.deployments[name] = rng.randint(1, 3)
        return Action(at, kind, name, model.deployments[name])
    if kind == "job-create":
        name = model.new_name("job")
        model.jobs.append(name)
        return Action(at, kind, name, rng.randint(3, 20))  # seconds each pod sleeps
    if kind == "pod-create":
        name = model.new_name("pod")
        model.pods.append(name)
        return Action(at, kind, name)
    if kind == "job-delete":
        name = model.jobs.pop(rng.randrange(len(model.jobs)))
        return Action(at, kind, name)
    if kind in ("pod-delete", "pod-delete-now"):
        name = model.pods.pop(rng.randrange(len(model.pods)))
        return Action(at, kind, name)
    name = rng.choice(sorted(model.deployments))
    if kind == "deploy-scale":
        model.deployments[name] = rng.randint(0, MAX_REPLICAS)
        return Action(at, kind, name, model.deployments[name])
    if kind == "deploy-delete":
        del model.deployments[name]
        return Action(at, kind, name)
    if kind == "deploy-roll":
        return Action(at, kind, name, rng.randint(1, 10**6))
    # pod-kill (grace 0 when the draw is even), unready (5-30 s): the pod is chosen at run time
    return Action(at, kind, name, rng.randint(0, 10**6))


def _fault(rng: random.Random, nodes: Sequence[str], kinds: Sequence[str], at: float) -> Fault:
    kind = rng.choice(list(kinds))
    node = rng.choice(list(nodes)) if kind in NODE_FAULTS else None
    if kind == "agent-kill":
        duration = rng.uniform(0, 10)
    elif kind == "containerd-kill":
        duration = rng.uniform(0, 5)
    elif kind == "agent-term":
        duration = 0.0
    elif kind in ("disk-fill", "cpu-throttle"):
        duration = 60.0
    else:
        duration = rng.uniform(30, 120)
    return Fault(at, kind, node, round(duration, 1))


def rounds(
    seed: int, nodes: Sequence[str], *, kinds: Sequence[str] = FAULT_KINDS
) -> Iterator[Round]:
    """The endless sequence of rounds for `seed`; the runner takes as many as fit."""
    rng = random.Random(seed)
    model = Model()
    number = 0
    while True:
        number += 1
        churn = rng.uniform(30, 90)
        fault_at = rng.uniform(5, churn - 5)
        fault = _fault(rng, nodes, kinds, fault_at)
        end = max(churn, fault_at + fault.duration)
        actions, t = [], 0.0
        while True:
            t = round(t + rng.uniform(2, 12), 1)
            if t > end:
                break
            actions.append(_action(rng, model, t))
        yield Round(number, tuple(actions), fault, end)

"""The soak's seeded timeline and its report, without a cluster."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from soak import report
from soak.__main__ import main, seconds
from soak.plan import FAULT_KINDS, MAX_DEPLOYMENTS, NODE_FAULTS, Round, rounds

NODES = ["node-1", "node-2", "node-3"]


def take(seed: int, n: int, kinds: tuple[str, ...] = FAULT_KINDS) -> list[Round]:
    return list(itertools.islice(rounds(seed, NODES, kinds=kinds), n))


def test_a_seed_gives_the_same_rounds_and_another_seed_others() -> None:
    assert take(42, 20) == take(42, 20)
    assert take(42, 20) != take(43, 20)


def test_every_round_has_one_fault_inside_its_churn_on_a_node_when_it_is_a_node_fault() -> None:
    kinds = set()
    for rnd in take(7, 200):
        f = rnd.fault
        kinds.add(f.kind)
        assert 0 < f.at < rnd.churn
        assert (f.node in NODES) if f.kind in NODE_FAULTS else f.node is None
        if f.kind in ("apiserver-stop", "etcd-stop", "cut-off"):
            assert 30 <= f.duration <= 120
        assert all(a.at <= rnd.churn for a in rnd.actions)
    assert kinds == set(FAULT_KINDS)


def test_the_workload_stays_within_its_limits_and_names_are_never_reused() -> None:
    live: set[str] = set()
    created: list[str] = []
    for rnd in take(3, 200):
        for a in rnd.actions:
            if a.kind == "deploy-create":
                created.append(a.name)
                live.add(a.name)
            elif a.kind == "deploy-delete":
                live.remove(a.name)
            elif a.kind in ("deploy-scale", "deploy-roll", "pod-kill", "unready"):
                assert a.name in live
            assert len(live) <= MAX_DEPLOYMENTS
    assert len(created) == len(set(created)) > 5


def test_only_the_chosen_fault_kinds_are_drawn() -> None:
    assert {r.fault.kind for r in take(1, 50, kinds=("agent-kill",))} == {"agent-kill"}


def test_durations_and_the_plan_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert (seconds("90s"), seconds("10m"), seconds("1h"), seconds("5")) == (90, 600, 3600, 5)
    assert main(["plan", "--seed", "5", "--rounds", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("round 1:") and "FAULT" in out and "round 2:" in out


def test_the_report_tables_a_recorded_run_and_plots_it(tmp_path: Path) -> None:
    t0 = 1_800_000_000.0
    run = {
        "seed": 9, "peer": "nodeagent", "duration": 600, "started": t0, "ended": t0 + 600,
        "nodes": ["node-1"], "kinds": ["agent-kill"], "actions": 40, "workload_errors": 2,
        "hits": 1000, "api_errors": 0, "cri_errors": 0, "lease_gaps": {},
        "faults": [
            {"round": 1, "kind": "agent-kill", "node": "node-1", "start": t0 + 60,
             "end": t0 + 65, "converged_at": t0 + 85, "unconverged": []},
            {"round": 2, "kind": "agent-kill", "node": "node-1", "start": t0 + 200,
             "end": t0 + 204, "converged_at": t0 + 214, "unconverged": []},
        ],
        "violations": [
            {"at": t0 + 300, "invariant": "leak", "subject": "soak/web-1", "detail": "cgroup"}
        ],
        "usage": {"node-1/agent": [[t0 + 15 * i, 7, (100 << 20) + i, 0.1 * i] for i in range(40)]},
        "rss_slopes": {"node-1/agent": {"per_hour": 0.0, "span": 585.0}},
    }  # fmt: skip
    (tmp_path / "soak.json").write_text(json.dumps(run))
    text = report.render([tmp_path], tmp_path)
    assert "| agent-kill | 2 | 2 | 10 s | 20 s |" in text
    assert "| leak | 1 |" in text and "| lease-gap | 0 |" in text
    assert "| node-1/agent | 100 → 100 MiB | +0.0 MiB/h over 10 min | 0.7 % |" in text
    svg = (tmp_path / "soak-nodeagent-9.svg").read_text()
    assert svg.startswith("<svg") and "<polyline" in svg and "agent-kill" in svg
    assert report.percentile([5, 1, 3], 50) == 3 and report.percentile([], 99) is None

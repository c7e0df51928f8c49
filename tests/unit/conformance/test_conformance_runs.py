"""Where a run keeps its reports (a focused run never overwrites another run's), and the CI list
growing from focused runs without shrinking."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

from conformance import report
from conformance.__main__ import KEEP_NARROW_RUNS, listed_specs, run_dir, write_ci_list
from conformance.report import Result, Run

NOW = dt.datetime(2026, 11, 27, 12, 30, 5, tzinfo=dt.UTC)
FAST = "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
SLOW = "[sig-node] Probing container should be restarted startup probe fails [NodeConformance]"
FOCUSED = (
    "[sig-node] Probing container should mark readiness on pods to false while pod is in "
    "progress of terminating when a pod has a readiness probe [NodeConformance]"
)


def test_a_full_run_owns_the_peer_directory_and_starts_it_empty(tmp_path: Path) -> None:
    (tmp_path / "nodeagent").mkdir()
    (tmp_path / "nodeagent" / "junit_01.xml").write_text("old")

    work = run_dir(tmp_path, "nodeagent", "full", NOW)

    assert work == tmp_path / "nodeagent"
    assert list(work.iterdir()) == []


def test_focused_runs_get_their_own_directories_and_leave_the_full_run_alone(
    tmp_path: Path,
) -> None:
    full = run_dir(tmp_path, "nodeagent", "full", NOW)
    (full / "junit_01.xml").write_text("the full run")

    first = run_dir(tmp_path, "nodeagent", "focus", NOW)
    (first / "junit_01.xml").write_text("first")
    second = run_dir(tmp_path, "nodeagent", "focus", NOW)  # the same second
    ci = run_dir(tmp_path, "nodeagent", "ci", NOW)

    assert first == tmp_path / "nodeagent-focus" / "20261127T123005Z"
    assert second == tmp_path / "nodeagent-focus" / "20261127T123005Z-1"
    assert ci == tmp_path / "nodeagent-ci" / "20261127T123005Z"
    assert list(second.iterdir()) == []
    assert (first / "junit_01.xml").read_text() == "first"
    assert (full / "junit_01.xml").read_text() == "the full run"


def test_only_the_latest_focused_runs_are_kept(tmp_path: Path) -> None:
    made = [
        run_dir(tmp_path, "kubelet", "focus", NOW + dt.timedelta(minutes=n))
        for n in range(KEEP_NARROW_RUNS + 3)
    ]

    kept = sorted((tmp_path / "kubelet-focus").iterdir())

    assert kept == made[-KEEP_NARROW_RUNS:]


def saved(docs: Path, peer: str, results: list[Result]) -> None:
    run = Run(
        peer=peer,
        started="2026-11-25 08:00 UTC",
        machine="host, 2 cores",
        commit="abc1234",
        seconds=600,
        procs=12,
        results=tuple(results),
    )
    report.save_run(docs / "conformance" / f"{peer}.json", run)


def test_ci_list_keeps_a_spec_added_from_a_focused_run(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    failed_in_full_run = Result(FOCUSED, "failed", "Timed out after 300.001s.", 300.0)
    saved(docs, "nodeagent", [Result(FAST, "passed", seconds=4), failed_in_full_run])
    saved(docs, "kubelet", [Result(FAST, "passed", seconds=4), Result(FOCUSED, "passed")])
    listed = tmp_path / "ci-specs.txt"
    listed.write_text(f"# the subset\n{FOCUSED}\n")

    write_ci_list(600, 12, path=listed, docs=docs)

    assert listed_specs(listed) == sorted([FAST, FOCUSED])


def test_ci_list_adds_saved_passes_only_within_the_budget(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    saved(
        docs, "nodeagent", [Result(FAST, "passed", seconds=4), Result(SLOW, "passed", seconds=80)]
    )
    listed = tmp_path / "ci-specs.txt"

    write_ci_list(60, 1, path=listed, docs=docs)

    assert listed_specs(listed) == [FAST]

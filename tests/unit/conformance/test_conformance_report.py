"""docs/conformance.md from the suite's JUnit report: parsing, grouping, explaining, merging."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from conformance import report
from conformance.report import Result, Run

FIXTURE = Path(__file__).with_name("junit_fixture.xml")
DNS = "[sig-network] DNS should provide DNS for services  [Conformance]"
HOOK = (
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should execute "
    "poststart exec hook properly [NodeConformance] [Conformance]"
)
HOST_IP = "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
REMOVED = "[sig-node] Pods should be submitted and removed [NodeConformance] [Conformance]"
UP_DOWN = "[sig-network] Services should be able to up and down services [LinuxOnly]"


def run_of(peer: str, results: list[Result]) -> Run:
    return Run(
        peer=peer,
        started="2026-11-25 08:00 UTC",
        machine="host, 2 cores",
        commit="abc1234",
        seconds=600,
        procs=8,
        results=tuple(results),
    )


def test_every_selected_spec_is_read_with_its_status_and_one_line_of_why() -> None:
    results = {r.name: r for r in report.parse_junit(FIXTURE)}

    assert set(results) == {DNS, HOOK, HOST_IP, REMOVED, UP_DOWN}
    assert results[HOST_IP].status == "passed"
    assert results[HOST_IP].seconds == 4.0
    assert results[DNS].status == "failed"
    assert results[DNS].why == (
        "Unable to read agnhost_udp@dns-test-service from pod dns-1234/dns-test-abc: "
        "the server could not find the requested resource"
    )
    assert results[REMOVED].status == "failed"
    assert results[REMOVED].why == "A suite timeout occurred"
    assert results[UP_DOWN].status == "skipped"
    assert results[UP_DOWN].why == "skipped - Requires at least 2 nodes (not 1)"


def test_a_selected_spec_the_run_never_started_says_so() -> None:
    selected = {HOST_IP, "[sig-storage] CSI mock volume should not be selected"}

    results = {r.name: r for r in report.parse_junit(FIXTURE, selected=selected)}

    not_run = results["[sig-storage] CSI mock volume should not be selected"]
    assert (not_run.status, not_run.why) == ("skipped", report.NOT_RUN)


def test_a_failed_suite_setup_node_is_reported_as_the_cause(tmp_path: Path) -> None:
    broken = FIXTURE.read_text().replace(
        '<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" '
        'status="passed" time="1.2"></testcase>',
        '<testcase name="[SynchronizedBeforeSuite]" classname="Kubernetes e2e suite" '
        'status="failed" time="1.2"><failure type="failed">[FAILED] no nodes are Ready'
        "</failure></testcase>",
    )
    path = tmp_path / "junit.xml"
    path.write_text(broken)

    results = {r.name: r for r in report.parse_junit(path)}

    assert results["[SynchronizedBeforeSuite]"].why == "no nodes are Ready"


def test_groups_are_the_sig_and_the_first_describe_text() -> None:
    assert report.group_of(HOOK) == "[sig-node] Container Lifecycle Hook"
    assert report.group_of(HOST_IP) == "[sig-node] Pods"
    assert report.group_of(DNS) == "[sig-network] DNS"
    assert (
        report.group_of("[sig-network] Networking Granular Checks: Pods should function for x")
        == "[sig-network] Networking Granular Checks: Pods"
    )
    assert report.group_of("no label here") == "(no SIG label)"


def test_long_messages_are_cut_to_one_line() -> None:
    why = report.one_line("[FAILED] " + "x" * 400 + "\nsecond line")

    assert len(why) == report.WHY_MAX
    assert why.endswith("…")
    assert "\n" not in why


def test_failures_are_explained_by_capability_and_issue() -> None:
    pull = Result(name=HOST_IP, status="failed", why='Back-off pulling image "x": ErrImagePull')
    logs = Result(name="[sig-node] Kubelet should print the output to logs", status="failed")

    assert report.explain(pull) == ("image not available here", "16")
    assert report.explain(logs) == ("the kubelet API on :10250", "12")
    assert report.explain(Result(name="[sig-node] x", status="failed", why="?"))[1] == "?"
    volume = Result(name="[sig-node] ImageVolume should succeed", status="failed", why="x")
    assert report.explain(volume)[1] == "28"


def test_the_report_lists_the_kubelet_pass_nodeagent_fail_specs_first() -> None:
    nodeagent = report.parse_junit(FIXTURE)
    kubelet = [replace(r, status="passed", why="") if r.name != UP_DOWN else r for r in nodeagent]

    text = report.render(
        nodeagent=run_of("nodeagent", nodeagent), kubelet=run_of("kubelet", kubelet)
    )

    gap = text.index("## Pass with the kubelet, fail with nodeagent (2)")
    assert gap < text.index("## Per spec group")
    section = text[gap : text.index("## Per spec group")]
    assert DNS in section
    assert REMOVED in section
    assert HOST_IP not in section
    assert "| [sig-node] Pods | 2 | 1 / 1 / 0 | 2 / 0 / 0 |" in text
    assert "| [sig-network] Services | 1 | 0 / 0 / 1 | 0 / 0 / 1 |" in text
    assert "## Failures with kubelet (0)" in text
    assert "commit `abc1234`" in text


def test_a_failure_both_nodes_share_is_marked_as_such() -> None:
    nodeagent = report.parse_junit(FIXTURE)
    kubelet = [replace(r, status="passed", why="") if r.name != DNS else r for r in nodeagent]

    text = report.render(
        nodeagent=run_of("nodeagent", nodeagent), kubelet=run_of("kubelet", kubelet)
    )

    dns_line = next(line for line in text.splitlines() if line.startswith(f"- {DNS}"))
    assert dns_line.endswith("; fails with the kubelet too (this harness or host)")
    assert "## Pass with the kubelet, fail with nodeagent (1)" in text


def test_a_missing_run_leaves_its_column_empty() -> None:
    text = report.render(nodeagent=run_of("nodeagent", report.parse_junit(FIXTURE)), kubelet=None)

    assert "- **kubelet**: no run recorded yet (`make conformance PEER=kubelet`)" in text
    assert "| [sig-node] Pods | 2 | 1 / 1 / 0 | - |" in text
    assert "None (needs both runs)." in text


def test_a_saved_run_loads_back_equal(tmp_path: Path) -> None:
    run = run_of("kubelet", report.parse_junit(FIXTURE))
    report.save_run(tmp_path / "kubelet.json", run)

    assert report.load_run(tmp_path / "kubelet.json") == run
    assert report.load_run(tmp_path / "missing.json") is None

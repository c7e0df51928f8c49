"""The soak's invariants judged on recorded observations: each passes a clean record and
finds the fault planted in a dirty one."""

from __future__ import annotations

import pytest
from soak import invariants as inv
from soak.invariants import (
    ApiNode,
    ApiPod,
    ApiWorkload,
    DeletedPod,
    Hit,
    NodeArtifacts,
    RssSample,
    RuntimeContainer,
    RuntimeSandbox,
    Window,
)

UID = "0f3a6c1e-0000-4000-8000-000000000001"
OTHER = "0f3a6c1e-0000-4000-8000-000000000002"


def container(cid: str, *, uid: str = UID, attempt: int = 0, state: str = "running",
              node: str = "node-1", exit_code: int | None = None) -> RuntimeContainer:  # fmt: skip
    return RuntimeContainer(node, cid, uid, "soak/web-1", "web", attempt, state, exit_code)


def test_one_running_container_per_pod_container_is_fine_whatever_exited_beside_it() -> None:
    seen = [container("a" * 64, state="exited", exit_code=137), container("b" * 64, attempt=1)]
    assert inv.duplicates(0, seen, []) == []


def test_two_running_containers_for_one_pod_container_are_a_violation() -> None:
    seen = [container("a" * 64), container("b" * 64, attempt=1)]
    (v,) = inv.duplicates(5, seen, [])
    assert (v.invariant, v.subject) == ("duplicate-container", "soak/web-1/web")
    assert "node-1:aaaaaaaaaaaa#0" in v.detail and "node-1:bbbbbbbbbbbb#1" in v.detail


def test_two_ready_sandboxes_for_one_pod_even_on_two_nodes_are_a_violation() -> None:
    sandboxes = [
        RuntimeSandbox("node-1", "s1", UID, "soak/web-1", 0, True),
        RuntimeSandbox("node-2", "s2", UID, "soak/web-1", 0, True),
        RuntimeSandbox("node-1", "s0", OTHER, "soak/web-2", 0, False),
    ]
    (v,) = inv.duplicates(5, [], sandboxes)
    assert v.invariant == "duplicate-sandbox"


def pod(name: str, **kw: object) -> ApiPod:
    base: dict[str, object] = dict(
        uid=UID, namespace="soak", name=name, node="node-1", phase="Running", ready=True,
        deleting_since=None, grace=30.0, owner="",
    )  # fmt: skip
    base.update(kw)
    return ApiPod(**base)  # type: ignore[arg-type]


def test_a_cluster_at_its_spec_has_converged() -> None:
    nodes = [ApiNode("node-1", True)]
    work = [
        ApiWorkload("Deployment", "soak", "web", 2, 2, 2, True),
        ApiWorkload("Job", "soak", "batch", 2, 2, 2, True, done=True),
    ]
    pods = [pod("bare"), pod("web-x", owner="ReplicaSet", ready=False)]
    assert inv.unconverged(100, nodes, work, pods) == []


def test_what_is_not_at_its_spec_is_named() -> None:
    nodes = [ApiNode("node-2", False)]
    work = [
        ApiWorkload("Deployment", "soak", "web", 3, 2, 3, True),
        ApiWorkload("Deployment", "soak", "roll", 2, 2, 2, False),
        ApiWorkload("Job", "soak", "batch", 2, 1, 1, True),
    ]
    pods = [
        pod("bare", phase="Pending", ready=False),
        pod("stuck", deleting_since=10.0, grace=5.0),
        pod("fresh", deleting_since=90.0, grace=5.0),
    ]
    got = inv.unconverged(100, nodes, work, pods)
    assert got == [
        "node node-2 not Ready",
        "Deployment soak/web: 2 ready, 3 updated of 3",
        "Deployment soak/roll: 2 ready, 2 updated of 2 (generation not observed)",
        "Job soak/batch: 1 of 2 succeeded",
        "pod soak/bare Pending, ready=False",
        "pod soak/stuck still terminating 90s after deletion (grace 5s)",
    ]


def test_convergence_within_the_bound_is_fine_late_or_never_is_not() -> None:
    fault = Window("agent-kill", 100, 110, "node-1")
    assert inv.convergence_violation(fault, 110 + inv.CONVERGE_WITHIN, []) == []
    (late,) = inv.convergence_violation(fault, 110 + inv.CONVERGE_WITHIN + 1, ["x"])
    assert "after 181s" in late.detail and late.subject == "after agent-kill on node-1"
    (never,) = inv.convergence_violation(fault, None, ["Deployment soak/web: 0 ready"])
    assert "never" in never.detail and "soak/web" in never.detail
    assert inv.recovery_times([110, 200], [130, None]) == [20]


def test_a_deleted_pods_leftovers_are_leaks_once_it_has_been_gone_long_enough() -> None:
    gone = DeletedPod(UID, "soak/web-1", "node-1", "10.244.1.7", gone_at=1000)
    dirty = NodeArtifacts(
        "node-1",
        sandboxes=frozenset({UID}),
        cgroups=frozenset({UID}),
        nft_ips=frozenset({"10.244.1.7"}),
        conntrack_ips=frozenset({"10.244.1.7"}),
    )
    assert inv.leaks(1100, [gone], [dirty], live_ips=frozenset(), quiet_since=0) == []
    (v,) = inv.leaks(1200, [gone], [dirty], live_ips=frozenset(), quiet_since=0)
    assert v.invariant == "leak"
    assert v.detail.endswith("sandbox, cgroup, nft element, conntrack entry")
    # a fault restarts the clock; an IP a live pod holds now is that pod's
    assert inv.leaks(1200, [gone], [dirty], live_ips=frozenset(), quiet_since=1100) == []
    (v,) = inv.leaks(1200, [gone], [dirty], live_ips=frozenset({"10.244.1.7"}), quiet_since=0)
    assert v.detail.endswith("sandbox, cgroup")
    clean = NodeArtifacts("node-1", sandboxes=frozenset({OTHER}))
    assert inv.leaks(5000, [gone], [clean], live_ips=frozenset(), quiet_since=0) == []


def test_at_the_end_everything_a_node_holds_belongs_to_a_live_pod_there() -> None:
    held = NodeArtifacts("node-1", pod_dirs=frozenset({UID, OTHER}), mounts=frozenset({UID}))
    assert inv.orphans(0, [held], {UID: "node-1", OTHER: "node-1"}) == []
    got = inv.orphans(0, [held], {UID: "node-2"})
    assert sorted(v.subject for v in got) == [
        "node-1 mount",
        "node-1 pod directory",
        "node-1 pod directory",
    ]


def test_traffic_to_a_pod_after_it_turned_not_ready_is_a_violation_past_the_tolerance() -> None:
    readiness = {"web-1": [(100.0, True), (200.0, False), (300.0, True)]}
    hits = [
        Hit(150, "node-1", "soak/web", "web-1"),  # ready
        Hit(203, "node-1", "soak/web", "web-1"),  # inside the tolerance
        Hit(250, "node-1", "soak/web", "web-1"),  # not ready for 50 s
        Hit(310, "node-1", "soak/web", "web-1"),  # ready again
        Hit(250, "node-1", "soak/web", "web-9"),  # a pod never seen: not judged
    ]
    (v,) = inv.traffic_to_unready(hits, readiness, [])
    assert (v.at, v.subject) == (250, "soak/web -> web-1")
    # a fault on the client's node or the control plane excuses it; one elsewhere does not
    assert inv.traffic_to_unready(hits, readiness, [Window("cut-off", 240, 260, "node-1")]) == []
    assert inv.traffic_to_unready(hits, readiness, [Window("apiserver", 190, 210)]) == []
    assert len(inv.traffic_to_unready(hits, readiness, [Window("kill", 0, 300, "node-2")])) == 1


def test_a_fault_that_restarts_or_kills_a_running_container_is_a_violation() -> None:
    fault = Window("agent-kill", 100, 105, "node-1")
    before = [container("a" * 64), container("c" * 64, uid=OTHER)]
    same = [container("a" * 64), container("c" * 64, uid=OTHER)]
    alive = frozenset({UID, OTHER})
    assert inv.restarted(fault, before, same, alive_uids=alive) == []
    restarted = [container("a" * 64, state="exited", exit_code=137), container("b" * 64, attempt=1)]
    (v,) = inv.restarted(fault, before, restarted, alive_uids=alive)
    assert v.invariant == "restarted-by-fault" and "attempt 0 -> 1" in v.detail
    killed = [container("a" * 64, state="exited", exit_code=143)]
    (v,) = inv.restarted(fault, before, killed, alive_uids=alive)
    assert "exited 143" in v.detail
    # deleted pods, a container that finished by itself, and other nodes are not judged
    assert inv.restarted(fault, before, killed, alive_uids=frozenset({OTHER})) == []
    done = [container("a" * 64, state="exited", exit_code=0)]
    assert inv.restarted(fault, before, done, alive_uids=alive) == []
    elsewhere = Window("agent-kill", 100, 105, "node-2")
    assert inv.restarted(elsewhere, before, restarted, alive_uids=alive) == []


def test_a_lease_gap_may_be_as_long_as_the_outage_behind_it_and_no_longer() -> None:
    renewals = [0, 10, 20, 30, 100, 110, 140]
    outage = [Window("apiserver-stop", 35, 95)]
    bad, gaps = inv.lease_gaps("node-1", renewals, outage)
    assert gaps == [10, 10, 10, 70, 10, 30]
    (v,) = bad  # 110 -> 140 with no fault
    assert v.at == 140 and "no fault" in v.detail
    (v,) = inv.lease_gaps("node-1", [0, 10, 100], [Window("agent-kill", 12, 30, "node-1")])[0]
    assert "agent-kill" in v.detail and "allowed 43.0s" in v.detail
    # another node's outage does not excuse this one's gap
    assert inv.lease_gaps("node-1", [0, 60], [Window("cut-off", 5, 55, "node-2")])[0]


def rss(pid: int, start: float, minutes: int, base: int, per_min: int) -> list[RssSample]:
    return [RssSample(start + 60 * m, pid, base + per_min * m) for m in range(minutes)]


def test_rss_that_rises_within_each_process_lifetime_is_growth() -> None:
    flat = rss(1, 0, 30, 100 << 20, 0) + rss(2, 1800, 30, 90 << 20, 0)
    assert inv.rss_growth("node-1", 3600, flat) == []
    # a restart drops RSS: not a fall, and a rise after it is not hidden by the drop
    rising = rss(1, 0, 30, 100 << 20, 1 << 20) + rss(2, 1800, 30, 80 << 20, 1 << 20)
    slope = inv.rss_slope(rising)
    assert round(slope.per_hour / 2**20) == 60 and slope.segments == 2
    (v,) = inv.rss_growth("node-1", 3600, rising)
    assert v.invariant == "rss-growth" and "+60.0 MiB/h" in v.detail
    # too short to judge
    assert inv.rss_growth("node-1", 600, rss(1, 0, 8, 100 << 20, 1 << 20)) == []


def test_a_bare_pod_the_node_evicted_is_at_its_end_one_failed_otherwise_is_not() -> None:
    # Recorded after a root-dir fill (seed 614776): the node evicted bare pods, phase Failed,
    # reason Evicted; nothing starts them again, on the kubelet either.
    nodes = [ApiNode("node-1", True)]
    evicted = pod("pod-18", phase="Failed", ready=False, reason="Evicted")
    failed = pod("pod-19", phase="Failed", ready=False)
    assert inv.unconverged(100, nodes, [], [evicted]) == []
    assert inv.unconverged(100, nodes, [], [failed]) == ["pod soak/pod-19 Failed, ready=False"]


def test_after_a_root_dir_fill_the_bound_adds_the_pressure_transition_period() -> None:
    # The node keeps DiskPressure (its taint, its pod rejections) 5 min after the fill is
    # gone, as the kubelet does: recorded, DiskPressure=True 150 s after the fill ended.
    fill = Window("disk-fill", 100, 160, "node-1")
    late = 160 + inv.CONVERGE_WITHIN + 60
    assert inv.convergence_violation(fill, late, []) == []
    assert inv.convergence_violation(Window("agent-kill", 100, 160, "node-1"), late, ["x"])
    (v,) = inv.convergence_violation(fill, None, ["Deployment soak/web-13: 0 ready"])
    assert "bound 480s" in v.detail


def test_traffic_just_after_the_control_plane_returned_is_not_the_nodes() -> None:
    # Recorded (seed 614776): the apiserver was back at 209.0 s, the pod force-deleted at
    # 219.6 s, answers until 227.9 s; kube-controller-manager took its lease back at 232 s
    # (it had restarted during the outage), so the EndpointSlice kept the pod until then.
    readiness = {"soak/web-2-x": [(10.0, True), (219.6, False)]}
    hits = [Hit(at, "node-1", "soak/web-2", "soak/web-2-x") for at in (225.2, 227.9)]
    outage = Window("apiserver-stop", 149.8, 209.0)
    assert inv.traffic_to_unready(hits, readiness, [outage]) == []
    earlier = Window("apiserver-stop", 100.0, 150.0)
    assert len(inv.traffic_to_unready(hits, readiness, [earlier])) == 2
    on_the_node = Window("agent-kill", 149.8, 209.0, "node-1")
    assert len(inv.traffic_to_unready(hits, readiness, [on_the_node])) == 2


def test_a_lease_gap_is_judged_only_as_far_as_the_checker_saw_it() -> None:
    renewals = [100.0, 110.0, 130.2, 140.0]
    # the checker saw 110 until its read at 119, then nothing until 131: a renewal at ~120,
    # replaced by the one at 130.2 before 131, would never have been seen (soak, 12:28)
    looked = [101.0, 111.0, 113.0, 116.0, 119.0, 131.0]
    bad, gaps = inv.lease_gaps("node-2", renewals, [], looked=looked)
    assert bad == [] and gaps == pytest.approx([10.0, 20.2, 9.8])
    assert inv.unseen_lease_gaps("node-2", renewals, [], looked=looked) == [
        "node-2: 20.2s between renewals (allowed 15.0s; no fault), but the checker's last look "
        "before the later one was 9.0s after the earlier one: a renewal in between cannot be "
        "told from none"
    ]
    # seen past the bound with the earlier renewal still in place: a gap for sure
    looked = [101.0, 111.0, 119.0, 126.0, 131.0]
    [v] = inv.lease_gaps("node-2", renewals, [], looked=looked)[0]
    assert v.detail == "20.2s without a renewal (allowed 15.0s; no fault)"
    assert inv.unseen_lease_gaps("node-2", renewals, [], looked=looked) == []
    # no reads recorded: the whole gap is judged, as before
    bad, _ = inv.lease_gaps("node-2", renewals, [])
    assert [v.detail for v in bad] == ["20.2s without a renewal (allowed 15.0s; no fault)"]

"""The soak's invariants as pure judgements on recorded observations.

Every function here takes what the checker saw from outside the node (the API, CRI, the
kernel) and returns the `Violation`s it finds; none of them reads a clock or a file, so each
is unit-tested on recorded observations (tests/unit/soak). Times are wall-clock seconds
(`time.time()`); the API's timestamps are parsed to the same scale.

The bounds are stated here, and `docs/reliability.md` repeats them:

- `CONVERGE_WITHIN`: after the last fault ends, every workload reaches its spec this soon;
  after a pressure fault (the root dir filled) `PRESSURE_TRANSITION` later, since the node
  keeps its pressure condition, taint and pod rejections that long after the signal clears
  (the kubelet's evictionPressureTransitionPeriod, 5 min by default);
- `LEAK_WITHIN`: a deleted pod's sandbox, containers, cgroup, mounts, directory, nft elements
  and UDP conntrack entries are gone this soon after the pod left the API (the kubelet's
  container GC runs once a minute; its housekeeping every 2 s);
- `UNREADY_TOLERANCE`: a Service may still send a request to a pod this long after the pod
  turned not-ready (probe period, EndpointSlice controller, proxy sync);
- `CONTROL_PLANE_SETTLE`: after the apiserver or etcd is back, its controllers may need this
  long to act again (a kube-controller-manager that lost its lease waits up to its 15 s lease
  duration to take it back, then starts its controllers and syncs their caches): a pod that
  turns not-ready in that time leaves its EndpointSlice late, whatever the node does;
- `LEASE_INTERVAL` + `LEASE_SLACK`: the Lease is renewed every 10 s; a gap may be longer only
  by the outage that overlaps it;
- `RSS_SLOPE_LIMIT`: the agent's resident memory grows by no more than this per hour, within
  each process lifetime, after `RSS_WARMUP` seconds of it.
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

CONVERGE_WITHIN = 180.0
PRESSURE_TRANSITION = 300.0
PRESSURE_FAULTS = frozenset({"disk-fill"})
LEAK_WITHIN = 150.0
UNREADY_TOLERANCE = 5.0
CONTROL_PLANE_SETTLE = 60.0
LEASE_INTERVAL = 10.0
LEASE_SLACK = 5.0
LEASE_REQUEST_TIMEOUT = 10.0  # a renewal sent while the apiserver was away waits this long
RSS_WARMUP = 180.0
RSS_SLOPE_LIMIT = 8 * 2**20  # bytes per hour
RSS_MIN_SPAN = 600.0  # seconds of samples (after warm-up) needed to judge a slope

RUNNING = "running"
EXITED = "exited"


@dataclass(frozen=True, order=True)
class Violation:
    at: float
    invariant: str
    subject: str
    detail: str

    def line(self) -> str:
        return f"{self.invariant}: {self.subject}: {self.detail}"


@dataclass(frozen=True)
class Window:
    """A fault's effect: from `start` to `end`, on `node` (None: the whole cluster)."""

    kind: str
    start: float
    end: float
    node: str | None = None

    def covers(self, node: str | None) -> bool:
        return self.node is None or node is None or self.node == node

    def overlaps(self, start: float, end: float) -> bool:
        return self.start <= end and start <= self.end


# --- never two running containers for one pod's container ---------------------------------------


@dataclass(frozen=True)
class RuntimeContainer:
    """One container as CRI lists it, with the pod labels the node put on it."""

    node: str
    id: str
    pod_uid: str
    pod: str  # namespace/name
    name: str
    attempt: int
    state: str  # running, exited, created, unknown
    exit_code: int | None = None


@dataclass(frozen=True)
class RuntimeSandbox:
    node: str
    id: str
    pod_uid: str
    pod: str
    attempt: int
    ready: bool


def duplicates(
    at: float, containers: Iterable[RuntimeContainer], sandboxes: Iterable[RuntimeSandbox]
) -> list[Violation]:
    """Two running containers for one (pod, container name), or two ready sandboxes for one
    pod, on any node or across nodes."""
    running: dict[tuple[str, str], list[RuntimeContainer]] = defaultdict(list)
    for c in containers:
        if c.state == RUNNING:
            running[(c.pod_uid, c.name)].append(c)
    ready: dict[str, list[RuntimeSandbox]] = defaultdict(list)
    for s in sandboxes:
        if s.ready:
            ready[s.pod_uid].append(s)
    out = [
        Violation(
            at,
            "duplicate-container",
            f"{group[0].pod}/{name}",
            "running twice: " + ", ".join(f"{c.node}:{c.id[:12]}#{c.attempt}" for c in group),
        )
        for (_, name), group in sorted(running.items())
        if len(group) > 1
    ]
    out += [
        Violation(
            at,
            "duplicate-sandbox",
            group[0].pod,
            "ready twice: " + ", ".join(f"{s.node}:{s.id[:12]}#{s.attempt}" for s in group),
        )
        for _, group in sorted(ready.items())
        if len(group) > 1
    ]
    return out


# --- convergence to spec --------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiPod:
    uid: str
    namespace: str
    name: str
    node: str
    phase: str
    ready: bool
    deleting_since: float | None  # deletionTimestamp minus the grace period: when it was asked
    grace: float  # the deletion's grace period
    owner: str  # Deployment's ReplicaSet, Job, DaemonSet, or "" for a bare pod
    ip: str = ""
    reason: str = ""  # status.reason: Evicted, ...

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class ApiWorkload:
    """A Deployment (`desired` replicas, `ready` ready and updated ones) or a Job (`desired`
    completions, `ready` succeeded ones; `done` when complete or failed)."""

    kind: str
    namespace: str
    name: str
    desired: int
    ready: int
    updated: int
    observed: bool  # status.observedGeneration caught up with metadata.generation
    done: bool = False


@dataclass(frozen=True)
class ApiNode:
    name: str
    ready: bool


def unconverged(
    at: float,
    nodes: Sequence[ApiNode],
    workloads: Sequence[ApiWorkload],
    pods: Sequence[ApiPod],
    *,
    terminate_slack: float = 60.0,
) -> list[str]:
    """What is not yet as its spec says, one line each; empty when all of it is. A bare pod
    the node evicted or rejected (phase Failed with a status reason) is at its end: nothing
    starts it again, on the kubelet either."""
    out = [f"node {n.name} not Ready" for n in nodes if not n.ready]
    for w in workloads:
        if w.kind == "Deployment" and not (
            w.observed and w.ready == w.desired and w.updated == w.desired
        ):
            out.append(
                f"Deployment {w.namespace}/{w.name}: {w.ready} ready, {w.updated} updated"
                f" of {w.desired}" + ("" if w.observed else " (generation not observed)")
            )
        if w.kind == "Job" and not w.done:
            out.append(f"Job {w.namespace}/{w.name}: {w.ready} of {w.desired} succeeded")
    for p in pods:
        if p.deleting_since is not None:
            if at - p.deleting_since > p.grace + terminate_slack:
                out.append(
                    f"pod {p.key} still terminating {at - p.deleting_since:.0f}s after deletion"
                    f" (grace {p.grace:.0f}s)"
                )
        elif p.owner == "" and not (p.phase == "Running" and p.ready) and not _ended(p):
            out.append(f"pod {p.key} {p.phase}, ready={p.ready}")
    return out


def _ended(p: ApiPod) -> bool:
    return p.phase == "Failed" and p.reason != ""


def converge_bound(kind: str) -> float:
    """Seconds after a fault of `kind` ends within which everything must be at its spec."""
    return CONVERGE_WITHIN + (PRESSURE_TRANSITION if kind in PRESSURE_FAULTS else 0.0)


def recovery_times(ends: Sequence[float], converged_at: Sequence[float | None]) -> list[float]:
    """Seconds from each fault's end to the first converged observation after it (None: it
    never converged, not counted here: `convergence_violations` reports it)."""
    return [c - e for e, c in zip(ends, converged_at, strict=True) if c is not None]


def convergence_violation(
    fault: Window, converged_at: float | None, last: list[str]
) -> list[Violation]:
    bound = converge_bound(fault.kind)
    if converged_at is not None and converged_at - fault.end <= bound:
        return []
    took = "never" if converged_at is None else f"after {converged_at - fault.end:.0f}s"
    return [
        Violation(
            fault.end + bound,
            "no-convergence",
            f"after {fault.kind}" + (f" on {fault.node}" if fault.node else ""),
            f"converged {took} (bound {bound:.0f}s): " + "; ".join(last[:6]),
        )
    ]


# --- what a deleted pod leaves behind -------------------------------------------------------------


@dataclass(frozen=True)
class DeletedPod:
    uid: str
    pod: str  # namespace/name
    node: str
    ip: str
    gone_at: float  # when the checker first saw it absent from the API


@dataclass(frozen=True)
class NodeArtifacts:
    """What one node holds, by pod UID (and pod IP for the proxy's and conntrack's state)."""

    node: str
    sandboxes: frozenset[str] = frozenset()  # pod UIDs with any sandbox, whatever its state
    containers: frozenset[str] = frozenset()
    cgroups: frozenset[str] = frozenset()
    mounts: frozenset[str] = frozenset()
    pod_dirs: frozenset[str] = frozenset()
    nft_ips: frozenset[str] = frozenset()  # pod IPs in the proxy's endpoint rules
    conntrack_ips: frozenset[str] = frozenset()  # pod IPs in UDP conntrack entries

    def by_uid(self) -> dict[str, frozenset[str]]:
        return {
            "sandbox": self.sandboxes,
            "container": self.containers,
            "cgroup": self.cgroups,
            "mount": self.mounts,
            "pod directory": self.pod_dirs,
        }


def leaks(
    at: float,
    deleted: Iterable[DeletedPod],
    artifacts: Iterable[NodeArtifacts],
    *,
    live_ips: frozenset[str],
    quiet_since: float,
    within: float = LEAK_WITHIN,
) -> list[Violation]:
    """A deleted pod's leftovers on any node, once it has been gone `within` seconds and the
    cluster has been free of faults that long (`quiet_since`: the end of the last fault). An
    IP another live pod holds now is not judged: its rules and entries are that pod's."""
    nodes = list(artifacts)
    out = []
    for d in deleted:
        if at - max(d.gone_at, quiet_since) < within:
            continue
        for n in nodes:
            left = [what for what, uids in n.by_uid().items() if d.uid in uids]
            if d.ip and d.ip not in live_ips:
                left += ["nft element"] if d.ip in n.nft_ips else []
                left += ["conntrack entry"] if d.ip in n.conntrack_ips else []
            if left:
                out.append(
                    Violation(
                        at,
                        "leak",
                        f"{d.pod} ({d.uid[:8]}, ip {d.ip or '-'})",
                        f"on {n.node} {at - d.gone_at:.0f}s after deletion: " + ", ".join(left),
                    )
                )
    return out


def orphans(
    at: float, artifacts: Iterable[NodeArtifacts], live: Mapping[str, str]
) -> list[Violation]:
    """At the end: every pod UID a node holds anything for is a live pod bound to that node
    (`live`: UID to node)."""
    out = []
    for n in artifacts:
        for what, uids in n.by_uid().items():
            for uid in sorted(uids):
                if live.get(uid) != n.node:
                    out.append(
                        Violation(at, "orphan", f"{n.node} {what}", f"pod UID {uid} is not live")
                    )
    return out


# --- Services never send traffic to a not-ready endpoint ------------------------------------------


@dataclass(frozen=True)
class Hit:
    """One answered request from a client pod: the Service and the pod that answered."""

    at: float
    client_node: str
    service: str
    pod: str  # the answering pod's name (its hostname)


def traffic_to_unready(
    hits: Iterable[Hit],
    readiness: Mapping[str, Sequence[tuple[float, bool]]],
    excused: Sequence[Window],
    *,
    tolerance: float = UNREADY_TOLERANCE,
    settle: float = CONTROL_PLANE_SETTLE,
) -> list[Violation]:
    """A hit at `t` on pod P is a violation when P's last Ready transition before `t` (from
    `readiness`: pod name to (time, ready) transitions, sorted) turned it not-ready more than
    `tolerance` seconds earlier, and no fault window (the client's node, the control plane)
    overlaps the time between (a control-plane window `settle` seconds longer). A terminating
    pod's transitions are in `readiness` too."""
    out = []
    for h in hits:
        transitions = readiness.get(h.pod, ())
        last = None
        for t, ready in transitions:
            if t > h.at:
                break
            last = (t, ready)
        if last is None or last[1]:
            continue
        since = last[0]
        if h.at - since <= tolerance:
            continue
        if any(
            w.covers(h.client_node)
            and (w.end + (settle if w.node is None else 0.0)) >= since
            and w.start <= h.at
            for w in excused
        ):
            continue
        out.append(
            Violation(
                h.at,
                "traffic-to-unready",
                f"{h.service} -> {h.pod}",
                f"answered from {h.client_node} {h.at - since:.1f}s after the pod turned not-ready",
            )
        )
    return out


# --- faults on the node do not restart containers -------------------------------------------------


def restarted(
    fault: Window,
    before: Iterable[RuntimeContainer],
    after: Iterable[RuntimeContainer],
    *,
    alive_uids: frozenset[str],
) -> list[Violation]:
    """Containers running on the faulted node before the fault that were restarted or killed
    by it: a later attempt of the same (pod, container), or the old one exited non-zero. Pods
    deleted or being deleted since (`alive_uids` excludes them) are not judged."""
    later: dict[tuple[str, str], list[RuntimeContainer]] = defaultdict(list)
    by_id = {}
    for c in after:
        later[(c.pod_uid, c.name)].append(c)
        by_id[c.id] = c
    out = []
    for b in before:
        if b.state != RUNNING or not fault.covers(b.node) or b.pod_uid not in alive_uids:
            continue
        newer = [c for c in later.get((b.pod_uid, b.name), []) if c.attempt > b.attempt]
        now = by_id.get(b.id)
        killed = now is not None and now.state == EXITED and now.exit_code not in (0, None)
        if newer or killed:
            what = (
                f"attempt {b.attempt} -> {max(c.attempt for c in newer)}"
                if newer
                else f"{b.id[:12]} exited {now.exit_code if now else '?'}"
            )
            out.append(
                Violation(
                    fault.end,
                    "restarted-by-fault",
                    f"{b.pod}/{b.name} on {b.node}",
                    f"{what} across {fault.kind}",
                )
            )
    return out


# --- the Lease has no gap longer than the outage that caused it -----------------------------------


@dataclass(frozen=True)
class _Gap:
    end: float
    length: float
    allowed: float
    cause: str
    seen: float
    """How much of the gap the checker saw with the earlier renewal still in place: from it to
    the checker's last read before the later one (the whole gap without recorded reads)."""


def _gaps(
    node: str,
    renewals: Sequence[float],
    outages: Sequence[Window],
    *,
    interval: float,
    slack: float,
    request_timeout: float,
    looked: Sequence[float],
) -> Iterable[_Gap]:
    times = sorted(set(renewals))
    reads = sorted(looked)
    for a, b in itertools.pairwise(times):
        overlapping = [w for w in outages if w.covers(node) and w.overlaps(a, b)]
        outage = sum(min(w.end, b) - max(w.start, a) for w in overlapping)
        allowed = interval + slack + (outage + request_timeout if overlapping else 0.0)
        cause = ", ".join(sorted({w.kind for w in overlapping})) or "no fault"
        before = [t for t in reads if a <= t < b]
        seen = (before[-1] - a) if before else (b - a)
        yield _Gap(b, b - a, allowed, cause, seen)


def lease_gaps(
    node: str,
    renewals: Sequence[float],
    outages: Sequence[Window],
    *,
    interval: float = LEASE_INTERVAL,
    slack: float = LEASE_SLACK,
    request_timeout: float = LEASE_REQUEST_TIMEOUT,
    looked: Sequence[float] = (),
) -> tuple[list[Violation], list[float]]:
    """Gaps between consecutive distinct renewTimes longer than the renew interval plus slack,
    or, where an outage of this node (or the cluster) overlaps the gap, longer than the
    outage plus the interval, one request timeout (a renewal sent during the outage waits it
    out after it, on the kubelet as on nodeagent) and slack. Also returns every gap (for the
    report).

    ``looked``: when the checker read the Leases. It keeps only the latest renewTime it reads,
    so a renewal made after its last read that still showed the earlier one, and replaced by
    the later one before its next read, is never seen: such a gap is judged only as far as it
    was seen, from the earlier renewal to that last read (`unseen_lease_gaps` names the rest).
    Without recorded reads the whole gap is judged."""
    args = {"interval": interval, "slack": slack, "request_timeout": request_timeout}
    out, gaps = [], []
    for g in _gaps(node, renewals, outages, looked=looked, **args):
        gaps.append(g.length)
        if g.length > g.allowed and g.seen > g.allowed:
            detail = f"{g.length:.1f}s without a renewal (allowed {g.allowed:.1f}s; {g.cause})"
            out.append(Violation(g.end, "lease-gap", node, detail))
    return out, gaps


def unseen_lease_gaps(
    node: str,
    renewals: Sequence[float],
    outages: Sequence[Window],
    *,
    looked: Sequence[float],
    interval: float = LEASE_INTERVAL,
    slack: float = LEASE_SLACK,
    request_timeout: float = LEASE_REQUEST_TIMEOUT,
) -> list[str]:
    """The gaps over their bound that `lease_gaps` could not judge, said for the log."""
    args = {"interval": interval, "slack": slack, "request_timeout": request_timeout}
    return [
        f"{node}: {g.length:.1f}s between renewals (allowed {g.allowed:.1f}s; {g.cause}), but "
        f"the checker's last look before the later one was {g.seen:.1f}s after the earlier "
        "one: a renewal in between cannot be told from none"
        for g in _gaps(node, renewals, outages, looked=looked, **args)
        if g.length > g.allowed and g.seen <= g.allowed
    ]


# --- the agent's RSS has no upward slope ----------------------------------------------------------


@dataclass(frozen=True)
class RssSample:
    at: float
    pid: int
    rss: int  # bytes


@dataclass(frozen=True)
class Slope:
    per_hour: float  # bytes per hour
    span: float  # seconds of samples it rests on
    samples: int
    segments: int
    stderr: float = field(default=0.0)


def rss_slope(samples: Sequence[RssSample], *, warmup: float = RSS_WARMUP) -> Slope:
    """The within-process slope of RSS over time (least squares with one intercept per process
    lifetime, so a restart's drop is not read as a fall), after `warmup` seconds of each."""
    by_pid: dict[int, list[RssSample]] = defaultdict(list)
    for s in sorted(samples, key=lambda s: s.at):
        by_pid[s.pid].append(s)
    sxx = sxy = 0.0
    residual_inputs = []
    span = 0.0
    n = segments = 0
    for group in by_pid.values():
        kept = [s for s in group if s.at - group[0].at >= warmup]
        if len(kept) < 2:
            continue
        segments += 1
        mt = sum(s.at for s in kept) / len(kept)
        mr = sum(s.rss for s in kept) / len(kept)
        sxx += sum((s.at - mt) ** 2 for s in kept)
        sxy += sum((s.at - mt) * (s.rss - mr) for s in kept)
        residual_inputs.append((kept, mt, mr))
        span += kept[-1].at - kept[0].at
        n += len(kept)
    if sxx == 0:
        return Slope(0.0, span, n, segments)
    beta = sxy / sxx
    sse = sum(
        (s.rss - mr - beta * (s.at - mt)) ** 2 for kept, mt, mr in residual_inputs for s in kept
    )
    dof = max(n - segments - 1, 1)
    stderr = math.sqrt(sse / dof / sxx) * 3600
    return Slope(beta * 3600, span, n, segments, stderr)


def rss_growth(
    node: str, at: float, samples: Sequence[RssSample], *, limit: float = RSS_SLOPE_LIMIT
) -> list[Violation]:
    """A slope above `limit` bytes per hour, by more than two standard errors, over at least
    `RSS_MIN_SPAN` seconds of samples."""
    slope = rss_slope(samples)
    if slope.span < RSS_MIN_SPAN or slope.per_hour - 2 * slope.stderr <= limit:
        return []
    return [
        Violation(
            at,
            "rss-growth",
            node,
            f"{slope.per_hour / 2**20:+.1f} MiB/h (±{slope.stderr / 2**20:.1f}) over"
            f" {slope.span / 60:.0f} min in {slope.segments} process lifetimes"
            f" (limit {limit / 2**20:.0f} MiB/h)",
        )
    ]

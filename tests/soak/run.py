"""The soak's loop: rounds of churn with a fault in each, the checker observing all the time,
the invariants judged as it goes and at the end. Everything it saw goes to `<out>/soak.json`
(what `report` renders), every line it prints to `<out>/soak.log`."""

from __future__ import annotations

import json
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harness.multinode import Cluster

from soak import invariants as inv
from soak import observe
from soak.faults import Injector
from soak.peers import Peer
from soak.plan import FAULT_KINDS, Action, Fault, Round, rounds
from soak.workload import NAMESPACE, Workload

TICK = 3.0  # seconds between observations
USAGE_EVERY = 15.0  # seconds between RSS/CPU samples
NO_RESTART_CHECK = frozenset({"disk-fill"})  # evicting pods is what that fault is for
CONTROL_PLANE_FAULTS = frozenset({"apiserver-stop", "etcd-stop"})
FINAL_DRAIN = 60.0  # seconds for the workload's deletion before the final leak wait


def uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


@dataclass
class FaultRecord:
    round: int
    kind: str
    node: str | None
    start: float
    end: float
    converged_at: float | None = None
    unconverged: list[str] = field(default_factory=list)
    waited_for: list[str] = field(default_factory=list)
    """What was still unconverged at the last observation before convergence (empty when the
    first one after the fault was converged): what the recovery time was spent waiting for."""
    served_again: float | None = None
    """After a control-plane fault: the first observation the apiserver answered in full (pods,
    Leases, Services). Its readyz passes before every resource's etcd client is back: after
    an etcd restart Lease reads still timed out for 20 s (seed 21)."""

    def recovery(self, bound: float | None = None) -> str:
        """The seconds from the fault's end to convergence and what the last of them waited
        for, or what was left unconverged when it never came."""
        if self.converged_at is None:
            within = f" in {bound:.0f}s" if bound is not None else ""
            return f"not{within}: {self.unconverged[:4]}"
        took = f"{self.converged_at - self.end:.1f}s"
        if self.waited_for:
            took += f", last waiting for: {'; '.join(self.waited_for[:4])}"
        return took

    def window(self) -> inv.Window:
        """The outage as the cluster saw it: to the fault's end, or to when the apiserver
        answered again if that came later."""
        return inv.Window(self.kind, self.start, max(self.end, self.served_again or 0), self.node)


@dataclass
class Soak:
    cluster: Cluster
    peer: Peer
    seed: int
    duration: float
    out: Path
    kinds: tuple[str, ...] = FAULT_KINDS
    say: Callable[[str], None] = print
    started: float = field(default_factory=time.time)
    violations: list[inv.Violation] = field(default_factory=list)
    faults: list[FaultRecord] = field(default_factory=list)
    readiness: dict[str, list[tuple[float, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    live: dict[str, inv.ApiPod] = field(default_factory=dict)
    deleted: dict[str, inv.DeletedPod] = field(default_factory=dict)
    renewals: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    leases_read: list[float] = field(default_factory=list)  # when the Leases were read
    usage: dict[str, list[tuple[float, int, int, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )  # "node-1/agent" -> (time, pid, rss, cpu seconds)
    hits: list[inv.Hit] = field(default_factory=list)
    hits_offset: dict[str, int] = field(default_factory=dict)
    targets: list[tuple[str, str]] = field(default_factory=list)
    last_usage: float = 0.0
    active: Fault | None = None
    harness_errors: list[str] = field(default_factory=list)
    api_errors: int = 0
    cri_errors: int = 0

    def __post_init__(self) -> None:
        self.workload = Workload(self.cluster.plane, self.out / "probe")
        self.injector = Injector(self.cluster, self.peer)
        self.uptime_offset = time.time() - uptime()
        self.nodes = [n.name for n in self.cluster.nodes]

    def log(self, message: str) -> None:
        line = f"[{time.time() - self.started:7.1f}s] {message}"
        self.say(line)
        with (self.out / "soak.log").open("a") as f:
            f.write(line + "\n")

    def _harness(self, what: str, call: Callable[[Fault], None], fault: Fault) -> None:
        """A fault the harness failed to inject or undo is logged and counted, not a
        violation of the node's; the run goes on."""
        try:
            call(fault)
        except Exception as error:
            self.harness_errors.append(f"{what}: {error}")
            self.log(f"HARNESS ERROR {what}: {error}")

    def violate(self, found: list[inv.Violation]) -> None:
        for v in found:
            self.log(f"VIOLATION {v.line()}")
        self.violations += found

    # --- observing ---------------------------------------------------------------------------

    def observe(self) -> None:
        now = time.time()
        for name in self.injector.supervise(self.active):
            self.log(f"{name} exited; started again (as the kubelet restarts its static pod)")
        self._observe_api(now)
        self._observe_runtime(now)
        self._read_hits()
        if now - self.last_usage >= USAGE_EVERY:
            self.last_usage = now
            self._sample_usage(now)

    def _observe_api(self, now: float) -> None:
        try:
            items = observe.pods(self.cluster.plane)
            renewals = observe.lease_renewals(self.cluster.plane)
            services = observe.api_get(
                self.cluster.plane, f"/api/v1/namespaces/{NAMESPACE}/services"
            )["items"]
        except observe.Unavailable:
            self.api_errors += 1
            return
        for record in self.faults:
            if record.served_again is None and record.kind in CONTROL_PLANE_FAULTS:
                record.served_again = now
        seen = {}
        for item in items:
            pod = observe.to_api_pod(item)
            seen[pod.uid] = pod
            tr = observe.ready_transition(item)
            history = self.readiness[pod.name]
            if tr is not None and (not history or history[-1][1] != tr[1]):
                history.append((max(tr[0], history[-1][0]) if history else tr[0], tr[1]))
        for uid, pod in self.live.items():
            if uid not in seen:
                self.deleted[uid] = inv.DeletedPod(uid, pod.key, pod.node, pod.ip, now)
                if self.readiness[pod.name] and self.readiness[pod.name][-1][1]:
                    self.readiness[pod.name].append((now, False))
        self.live = seen
        self.leases_read.append(now)
        for name, at in renewals.items():
            if not self.renewals[name] or self.renewals[name][-1] != at:
                self.renewals[name].append(at)
        targets = sorted(
            (s["metadata"]["name"], s["spec"]["clusterIP"])
            for s in services
            if s["spec"].get("clusterIP") not in (None, "None")
        )
        if targets != self.targets:
            self.targets = targets
            self.workload.write_targets(targets)

    def runtimes(self) -> dict[str, observe.Runtime]:
        out = {}
        for node in self.cluster.nodes:
            try:
                out[node.name] = observe.runtime(node)
            except observe.Unavailable:
                self.cri_errors += 1
        return out

    def _observe_runtime(self, now: float) -> None:
        rts = self.runtimes()
        containers = [c for rt in rts.values() for c in rt.containers]
        sandboxes = [s for rt in rts.values() for s in rt.sandboxes]
        self.violate(inv.duplicates(now, containers, sandboxes))

    def _read_hits(self) -> None:
        for path in sorted((self.out / "probe").glob("*.hits")):
            node = path.stem
            offset = self.hits_offset.get(node, 0)
            with path.open("rb") as f:
                f.seek(offset)
                data = f.read()
            end = data.rfind(b"\n") + 1
            self.hits_offset[node] = offset + end
            for line in data[:end].decode(errors="replace").splitlines():
                parts = line.split()
                if len(parts) == 3:
                    at = float(parts[0]) + self.uptime_offset
                    self.hits.append(inv.Hit(at, node, f"{NAMESPACE}/{parts[1]}", parts[2]))

    def _sample_usage(self, now: float) -> None:
        for node in self.cluster.nodes:
            pids = {**self.peer.pids(node), "containerd": node.containerd_pid}
            for what, pid in pids.items():
                got = observe.proc_usage(pid)
                if got is not None and pid is not None:
                    self.usage[f"{node.name}/{what}"].append((now, pid, got[0], got[1]))

    def wait(self, until: float) -> None:
        while time.time() < until:
            t = time.time()
            self.observe()
            time.sleep(max(0.0, min(TICK - (time.time() - t), until - time.time())))

    # --- judging -----------------------------------------------------------------------------

    def unconverged(self) -> list[str] | None:
        try:
            nodes = observe.nodes(self.cluster.plane)
            work = observe.workloads(self.cluster.plane, NAMESPACE)
            items = [observe.to_api_pod(p) for p in observe.pods(self.cluster.plane)]
        except observe.Unavailable as error:
            return [str(error)]
        soak = [p for p in items if p.namespace == NAMESPACE]
        return inv.unconverged(time.time(), nodes, work, soak)

    def wait_converged(
        self, since: float, bound: float
    ) -> tuple[float | None, list[str], list[str]]:
        """When everything converged after ``since`` (None: not within the bound), what was
        unconverged at the last look, and what the last look before convergence waited for."""
        last: list[str] = []
        waited: list[str] = []
        while time.time() - since <= bound + 30:
            self.observe()
            last = self.unconverged() or []
            if not last:
                return time.time(), [], waited
            waited = last
            time.sleep(2)
        return None, last, waited

    def check_leaks(self, *, quiet_since: float) -> None:
        now = time.time()
        due = [
            d for d in self.deleted.values() if now - max(d.gone_at, quiet_since) >= inv.LEAK_WITHIN
        ]
        if not due:
            return
        rts = self.runtimes()
        arts = [
            observe.artifacts(
                n, rts[n.name], self.cluster.plane.cluster_cidr, self.peer.root_dir(n)
            )
            for n in self.cluster.nodes
            if n.name in rts
        ]
        live_ips = frozenset(p.ip for p in self.live.values() if p.ip)
        self.violate(inv.leaks(now, due, arts, live_ips=live_ips, quiet_since=quiet_since))
        for d in due:
            self.deleted.pop(d.uid, None)  # judged once

    # --- the run -----------------------------------------------------------------------------

    def run_round(self, rnd: Round) -> None:
        for line in rnd.lines():
            self.log(line)
        t0 = time.time()
        fault = rnd.fault
        events: list[tuple[float, int, Any]] = [(a.at, 2, a) for a in rnd.actions]
        events += [(fault.at, 0, "begin"), (fault.at + fault.duration, 1, "end")]
        record = None
        before: list[inv.RuntimeContainer] = []

        def end() -> None:
            self._harness(f"{fault.kind} end", self.injector.end, fault)
            self.active = None
            self.workload.deadline = None
            assert record is not None
            record.end = time.time()
            self.faults.append(record)
            self.log(f"fault {fault.kind} ends after {record.end - record.start:.1f}s")

        planned_end = t0 + fault.at + fault.duration
        for at, _, what in sorted(events, key=lambda e: (e[0], e[1])):
            self.wait(t0 + at)
            if what == "begin":
                before = [c for rt in self.runtimes().values() for c in rt.containers]
                self.log(f"fault {fault.kind} begins" + (f" on {fault.node}" if fault.node else ""))
                record = FaultRecord(rnd.number, fault.kind, fault.node, time.time(), 0.0)
                self.active = fault
                self.workload.deadline = planned_end
                self._harness(f"{fault.kind} begin", self.injector.begin, fault)
            elif what == "end":
                if self.active is fault:
                    end()
            else:
                assert isinstance(what, Action)
                # while the control plane is away an action waits for kubectl (at most until
                # the fault's planned end): a fault whose time is up ends before the next one,
                # not after the backlog
                if self.active is fault and time.time() >= planned_end:
                    end()
                self.workload.apply(what)
        assert record is not None
        bound = inv.converge_bound(fault.kind)
        record.converged_at, record.unconverged, record.waited_for = self.wait_converged(
            record.end, bound
        )
        self.log(f"converged after {fault.kind}: {record.recovery(bound)}")
        if record.converged_at is None:  # what the checker saw of the pods, for the diagnosis
            for pod in sorted(self.live.values(), key=lambda p: p.key):
                if not pod.ready:
                    self.log(f"  not ready: {pod.key} on {pod.node or '-'}: {pod.phase}")
                    self.diagnose(pod.key)
        self.violate(
            inv.convergence_violation(record.window(), record.converged_at, record.unconverged)
        )
        if fault.kind not in NO_RESTART_CHECK:
            after = self.runtimes()
            ids = {c.id for c in before}
            after = {n: observe.runtime(self.cluster.node(n), exit_codes_of=ids) for n in after}
            alive = frozenset(uid for uid, p in self.live.items() if p.deleting_since is None)
            self.violate(
                inv.restarted(
                    record.window(),
                    before,
                    [c for rt in after.values() for c in rt.containers],
                    alive_uids=alive,
                )
            )
        self.check_leaks(quiet_since=record.end)

    def diagnose(self, key: str) -> None:
        """Keep what a user would look at for a pod that did not converge: `kubectl
        describe` (its events name probe failures) and, where the pod runs, its /www and
        processes; in diagnosis/<pod>.txt."""
        ns, name = key.split("/", 1)
        plane = self.cluster.plane
        parts = []
        look = "ls -la /www; ps -o pid,ppid,args"
        for args in (
            ("describe", "pod", "-n", ns, name),
            ("exec", "-n", ns, name, "-c", "web", "--", "sh", "-c", look),
        ):
            try:
                got = plane.kubectl(*args, check=False)
                parts.append(f"$ kubectl {' '.join(args)}\n{got.stdout}{got.stderr}")
            except subprocess.TimeoutExpired:
                parts.append(f"$ kubectl {' '.join(args)}\n(no answer)")
        out = self.out / "diagnosis"
        out.mkdir(exist_ok=True)
        (out / f"{name}.txt").write_text("\n".join(parts))

    def run(self) -> None:
        self.log(f"soak: seed {self.seed}, {self.duration / 60:.0f} min, peer {self.peer.name},"
                 f" nodes {self.nodes}, faults {list(self.kinds)}")  # fmt: skip
        self.workload.setup()
        try:
            for rnd in rounds(self.seed, self.nodes, kinds=self.kinds):
                if time.time() - self.started > self.duration - 60:
                    break
                self.run_round(rnd)
            self.finish()
        finally:
            self.injector.cleanup()
            self.save()

    def finish(self) -> None:
        last = self.faults[-1].end if self.faults else self.started
        self.log("the last fault is over: the workload stops; deleting it")
        self.cluster.plane.kubectl(
            "delete", "deployments,jobs,pods,services", "--all", "-n", NAMESPACE,
            "--wait=false", check=False,
        )  # fmt: skip
        self.wait(time.time() + FINAL_DRAIN)
        deadline = max(time.time(), last) + inv.LEAK_WITHIN
        self.wait(deadline)
        now = time.time()
        self.check_leaks(quiet_since=last)
        rts = self.runtimes()
        arts = [
            observe.artifacts(
                n, rts[n.name], self.cluster.plane.cluster_cidr, self.peer.root_dir(n)
            )
            for n in self.cluster.nodes
            if n.name in rts
        ]
        live = {uid: p.node for uid, p in self.live.items()}
        self.violate(inv.orphans(now, arts, live))
        windows = [f.window() for f in self.faults]
        for node in self.nodes:
            bad, _ = inv.lease_gaps(node, self.renewals[node], windows, looked=self.leases_read)
            self.violate(bad)
            for note in inv.unseen_lease_gaps(
                node, self.renewals[node], windows, looked=self.leases_read
            ):
                self.log(f"lease gap not judged: {note}")
            samples = [inv.RssSample(t, pid, rss) for t, pid, rss, _ in self.usage[f"{node}/agent"]]
            self.violate(inv.rss_growth(node, now, samples))
        self.violate(inv.traffic_to_unready(self.hits, self.readiness, windows))
        self.log(f"done: {len(self.violations)} violations, {len(self.faults)} faults,"
                 f" {self.workload.done} actions, {len(self.hits)} requests answered")  # fmt: skip

    def save(self) -> None:
        windows = [f.window() for f in self.faults]
        gaps = {n: inv.lease_gaps(n, self.renewals[n], windows)[1] for n in self.nodes}
        slopes = {
            key: asdict(inv.rss_slope([inv.RssSample(t, p, r) for t, p, r, _ in samples]))
            for key, samples in self.usage.items()
        }
        data = {
            "seed": self.seed,
            "peer": self.peer.name,
            "duration": self.duration,
            "started": self.started,
            "ended": time.time(),
            "nodes": self.nodes,
            "kinds": list(self.kinds),
            "violations": [asdict(v) for v in sorted(self.violations)],
            "faults": [asdict(f) for f in self.faults],
            "actions": self.workload.done,
            "workload_errors": len(self.workload.errors),
            "workload_error_samples": self.workload.errors[:20],
            "hits": len(self.hits),
            "api_errors": self.api_errors,
            "cri_errors": self.cri_errors,
            "harness_errors": self.harness_errors,
            "lease_gaps": gaps,
            "usage": self.usage,
            "rss_slopes": slopes,
        }
        (self.out / "soak.json").write_text(json.dumps(data, indent=1))

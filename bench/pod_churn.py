"""Pod churn benchmark: pods created and deleted at a steady rate; nodeagent, then the kubelet.

    PYTHONPATH=tests .venv/bin/python bench/pod_churn.py [--pods 1000] [--minutes 10]
        [--lifetime 30] [--only nodeagent|kubelet] [--markdown] [--json FILE]

Each component in turn runs as a new Node on a fresh containerd (`pod_startup`'s node setup:
the same control plane, images and bridge network). Then ``--pods`` pods (busybox ``sleep
3600``, ``terminationGracePeriodSeconds: 1``, through the scheduler) are created evenly over
``--minutes`` (1,000 in 10 minutes: one every 0.6 s); each is deleted through the API
``--lifetime`` seconds after the watch showed it Running (or ``--timeout`` seconds after its
create if it never ran). The run ends when every pod is gone.

Per pod, timed by this process's clock through one watch (`pod_api`):

- start latency: create returned -> the watch delivers it Running (every container running);
- delete latency: delete returned -> the watch delivers DELETED (the node stopped the
  containers and confirmed; the object is removed);

and per run: pods started per second over the create span, the most pods created and not yet
Running at once (the node's backlog), the component's and containerd's CPU seconds from the
first create to the last pod gone, the component's RSS (sampled every second) and containerd's
CRI calls per minute by method over the same span, beside the component's own calls by
operation (its ``/metrics``). The shims' CPU is not counted (same for both components).
``--profile DIR`` records nodeagent with py-spy through its run.

Needs root and the reference kubelet (`harness build --peers`), as `pod_startup.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import cri_calls
import node_measure as m
import pod_api
import pod_startup
from harness.images import BUSYBOX_IMAGE
from node_idle import machine, say, versions_line
from pod_startup import COMPONENTS, PodBench, Result, cpu_s, script, session

DELETE_WAIT = 300.0  # how long a deleted pod may take to be gone before it is counted as stuck


@dataclass
class ChurnPod:
    """One pod's moments (``time.monotonic()``); None: not reached."""

    created: float
    running: float | None = None
    delete_sent: float | None = None
    gone: float | None = None


@dataclass
class Usage:
    cpu_s: float  # the component, first create -> last pod gone
    runtime_cpu_s: float  # containerd, same span
    rss_max_kib: int
    rss_final_kib: int
    runtime_calls_per_min: dict[str, float] = field(default_factory=dict)
    calls_per_min: dict[str, float] = field(default_factory=dict)  # the component's, by op


@dataclass
class Summary:
    created: int
    started: int
    gone: int
    span_s: float  # first create -> last pod gone
    create_span_s: float  # first create -> last create
    starts_per_s: float  # pods Running per second of the create span
    deletes_per_s: float  # pods gone per second of the create span
    start_p50: float
    start_p99: float
    start_max: float
    delete_p50: float
    delete_p99: float
    delete_max: float
    backlog_max: int  # most pods created and not yet Running at one moment


def backlog_max(pods: Iterable[ChurnPod], *, end: float) -> int:
    """The most pods created and not yet Running at one moment (a pod that never ran counts
    until ``end``)."""
    moves: list[tuple[float, int]] = []
    for p in pods:
        moves.append((p.created, 1))
        moves.append((p.running if p.running is not None else end, -1))
    most = now = 0
    for _, step in sorted(moves):  # at a tie the -1 sorts first: a start frees its slot
        now += step
        most = max(most, now)
    return most


def summarize(pods: dict[str, ChurnPod]) -> Summary:
    """The run's figures from its pods' moments (pure)."""
    if not pods:
        raise ValueError("no pods were created")
    every = list(pods.values())
    first = min(p.created for p in every)
    last_create = max(p.created for p in every)
    moments = [t for p in every for t in (p.created, p.running, p.delete_sent, p.gone) if t]
    end = max(moments)
    starts = sorted(p.running - p.created for p in every if p.running is not None)
    deletes = sorted(
        p.gone - p.delete_sent for p in every if p.gone is not None and p.delete_sent is not None
    )
    span = max(last_create - first, 1e-9)
    started_in_span = sum(1 for p in every if p.running is not None and p.running <= last_create)
    gone_in_span = sum(1 for p in every if p.gone is not None and p.gone <= last_create)
    return Summary(
        created=len(every),
        started=len(starts),
        gone=len(deletes),
        span_s=end - first,
        create_span_s=last_create - first,
        starts_per_s=started_in_span / span,
        deletes_per_s=gone_in_span / span,
        start_p50=pod_api.percentile(starts, 50),
        start_p99=pod_api.percentile(starts, 99),
        start_max=max(starts, default=float("nan")),
        delete_p50=pod_api.percentile(deletes, 50),
        delete_p99=pod_api.percentile(deletes, 99),
        delete_max=max(deletes, default=float("nan")),
        backlog_max=backlog_max(every, end=end),
    )


def rows(summary: Summary, usage: Usage) -> list[tuple[str, str]]:
    per_min = 60 / summary.span_s if summary.span_s else 0.0

    def busiest(calls: dict[str, float]) -> str:
        top = sorted(calls.items(), key=lambda kv: -kv[1])[:4]
        return ", ".join(f"{name} {rate:.0f}" for name, rate in top) or "-"

    return [
        ("pods created / Running / gone",
         f"{summary.created} / {summary.started} / {summary.gone}"),
        ("creates spread over (s); all gone after (s)",
         f"{summary.create_span_s:.0f}; {summary.span_s:.0f}"),
        ("pods started / deleted per second (create span)",
         f"{summary.starts_per_s:.2f} / {summary.deletes_per_s:.2f}"),
        ("start latency p50 / p99 / max (s)",
         f"{summary.start_p50:.2f} / {summary.start_p99:.2f} / {summary.start_max:.2f}"),
        ("delete latency p50 / p99 / max (s)",
         f"{summary.delete_p50:.2f} / {summary.delete_p99:.2f} / {summary.delete_max:.2f}"),
        ("most pods waiting to start at once", str(summary.backlog_max)),
        ("component / containerd CPU seconds (per minute)",
         f"{usage.cpu_s:.1f} / {usage.runtime_cpu_s:.1f} "
         f"({usage.cpu_s * per_min:.2f} / {usage.runtime_cpu_s * per_min:.2f})"),
        ("component RSS max / final (MiB)",
         f"{usage.rss_max_kib / 1024:.1f} / {usage.rss_final_kib / 1024:.1f}"),
        ("its busiest CRI operations (calls/min)", busiest(usage.calls_per_min)),
        ("containerd's busiest CRI methods (calls/min)", busiest(usage.runtime_calls_per_min)),
    ]  # fmt: skip


def report(results: dict[str, tuple[Summary, Usage]], *, markdown: bool, header: str) -> str:
    names = list(results)
    table = {n: dict(rows(*results[n])) for n in names}
    labels = [label for label, _ in rows(*results[names[0]])] if names else []
    if markdown:
        lines = [header, "", "| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
        lines += [f"| {lb} | " + " | ".join(table[n][lb] for n in names) + " |" for lb in labels]
    else:
        width = max((len(lb) for lb in labels), default=0)
        lines = [header, ""] + [
            f"{lb:<{width}}  " + "  |  ".join(f"{n}: {table[n][lb]}" for n in names)
            for lb in labels
        ]
    return "\n".join(lines)


async def churn(
    api: pod_api.Api,
    namespace: str,
    body: Callable[[int], dict[str, Any]],
    *,
    pods: int,
    seconds: float,
    lifetime: float,
    start_within: float,
) -> dict[str, ChurnPod]:
    """Create ``pods`` pods evenly over ``seconds``, delete each ``lifetime`` s after it ran
    (or ``start_within`` s after its create if it did not), return when every one is gone
    (or stuck past DELETE_WAIT)."""
    records: dict[str, ChurnPod] = {}
    running: dict[str, asyncio.Event] = {}
    gone: dict[str, asyncio.Event] = {}
    path = f"/api/v1/namespaces/{namespace}/pods"

    def on_event(kind: str, pod: dict[str, Any]) -> None:
        now = time.monotonic()
        name = pod["metadata"]["name"]
        record = records.get(name)
        if record is None:
            return
        if kind == "DELETED":
            if record.gone is None:
                record.gone = now
                gone[name].set()
        elif record.running is None and pod_api.is_running(pod):
            record.running = now
            running[name].set()

    async def one(i: int, at: float) -> None:
        await asyncio.sleep(max(0.0, at - time.monotonic()))
        manifest = body(i)
        name = manifest["metadata"]["name"]
        running[name], gone[name] = asyncio.Event(), asyncio.Event()
        await api.call("POST", path, manifest)
        records[name] = ChurnPod(created=time.monotonic())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(running[name].wait(), start_within)
        if records[name].running is not None:
            await asyncio.sleep(lifetime)
        await api.call("DELETE", f"{path}/{name}")
        records[name].delete_sent = time.monotonic()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(gone[name].wait(), DELETE_WAIT)

    listed = await api.pods(namespace)
    version = listed["metadata"]["resourceVersion"]
    watching = asyncio.create_task(api.watch_events(namespace, version, on_event))
    try:
        await asyncio.sleep(0.5)  # the watch is established before the first create
        start, step = time.monotonic(), seconds / max(1, pods)
        work = asyncio.gather(*(one(i, start + i * step) for i in range(pods)))
        done, _ = await asyncio.wait({work, watching}, return_when=asyncio.FIRST_COMPLETED)
        if watching in done:
            work.cancel()
            watching.result()  # raises what ended the watch
    finally:
        watching.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watching
    return records


class ChurnBench(PodBench):
    def churn_run(self, component: str) -> tuple[Summary, Usage, dict[str, ChurnPod]]:
        with self.node(component, Result()) as node:
            pod_startup.wait_quiet(node.proc, max_load=self.args.max_load, max_wait=180)
            say(f"{component}: {self.args.pods} pods over {self.args.minutes:g} min, "
                f"each deleted {self.args.lifetime:g} s after it runs")  # fmt: skip
            samples: list[m.Sample] = []
            before = (cpu_s(node.proc.pid), cpu_s(node.ctd.pid))
            served = self.runtime_operations(node.ctd)
            made = self.cri_operations(node.proc, node.port)
            with self.profiled(component, node.proc.pid):
                records = asyncio.run(self.timed(node, samples))
            after = (cpu_s(node.proc.pid), cpu_s(node.ctd.pid))
            served_after = self.runtime_operations(node.ctd)
            made_after = self.cri_operations(node.proc, node.port)
            calls = own = {}
            if served[1] and served_after[1]:
                window = served_after[0] - served[0]
                calls = cri_calls.per_minute(served[1], served_after[1], window)
            if made[1] is not None and made_after[1] is not None:
                own = cri_calls.per_minute(made[1], made_after[1], made_after[0] - made[0])
            if not node.proc.alive():
                raise RuntimeError(f"{component} exited; last log lines:\n{node.proc.tail()}")
        usage = Usage(
            cpu_s=after[0] - before[0],
            runtime_cpu_s=after[1] - before[1],
            rss_max_kib=max(s.rss_kib for s in samples),
            rss_final_kib=samples[-1].rss_kib,
            runtime_calls_per_min=calls,
            calls_per_min=own,
        )
        summary = summarize(records)
        say(f"{component}: {summary.started}/{summary.created} started, start p99 "
            f"{summary.start_p99:.2f} s, delete p99 {summary.delete_p99:.2f} s")  # fmt: skip
        return summary, usage, records

    @contextlib.contextmanager
    def profiled(self, component: str, pid: int) -> Iterator[None]:
        """With ``--profile DIR`` and nodeagent: py-spy samples it for the whole run and
        writes DIR/nodeagent-churn.txt (collapsed stacks, the agent's own threads)."""
        if self.args.profile is None or component != "nodeagent":
            yield
            return
        self.args.profile.mkdir(parents=True, exist_ok=True)
        out = self.args.profile / "nodeagent-churn.txt"
        pyspy = Path(sys.executable).with_name("py-spy")
        argv = [str(pyspy), "record", "--pid", str(pid), "--format", "raw", "-o", str(out),
                "--rate", "50", "--nonblocking"]  # fmt: skip
        spy = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            yield
        finally:
            spy.send_signal(signal.SIGINT)
            try:
                spy.wait(timeout=60)
            except subprocess.TimeoutExpired:
                spy.kill()
            say(f"nodeagent: py-spy profile in {out}")

    async def timed(self, node: pod_startup.Node, samples: list[m.Sample]) -> dict[str, ChurnPod]:
        admin = self.plane.pki.admin

        def body(i: int) -> dict[str, Any]:
            return pod_api.sleep_pod(
                f"c-{i:04d}",
                namespace=node.namespace,
                node=node.name,
                image=BUSYBOX_IMAGE,
                by_scheduler=True,
            )

        async def sample() -> None:
            while True:
                samples.append(m.sample(node.proc.pid, now=time.time()))
                await asyncio.sleep(1)

        sampling = asyncio.create_task(sample())
        try:
            async with pod_api.Api.open(
                server=self.plane.server, ca=self.plane.ca_path, cert=admin.cert, key=admin.key
            ) as api:
                return await churn(
                    api,
                    node.namespace,
                    body,
                    pods=self.args.pods,
                    seconds=self.args.minutes * 60,
                    lifetime=self.args.lifetime,
                    start_within=self.args.timeout,
                )
        finally:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--pods", type=int, default=1000, help="pods created (and deleted) in the run")
    add("--minutes", type=float, default=10.0, help="the creates are spread over this")
    add("--lifetime", type=float, default=30.0, help="seconds a pod runs before its delete")
    add("--timeout", type=float, default=120.0, help="a pod not Running by then is deleted")
    add("--max-load", type=float, default=1.0, help="wait for this 1-min load before the run")
    add("--max-pods", type=int, default=0, help="both components' maxPods (default 110)")
    add("--only", choices=COMPONENTS, action="append", help="repeatable")
    add("--markdown", action="store_true", help="print the table as markdown")
    add("--json", type=Path, help="write every pod's moments here")
    add("--profile", type=Path, help="py-spy nodeagent through the run; stacks in this dir")
    add("--keep-logs", type=Path, help="copy every component's log here")
    parser.set_defaults(verbosity=0, node_name=False)
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    components = args.only or list(COMPONENTS)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, tuple[Summary, Usage]] = {}
    moments: dict[str, dict[str, dict[str, float | None]]] = {}
    with session(components, prefix="na-churn-", keep_logs=args.keep_logs) as run:
        bench = ChurnBench(
            plane=run.plane, kubelet=run.kubelet, work=run.work, log_dir=run.log_dir, args=args
        )
        for component in components:
            summary, usage, records = bench.churn_run(component)
            results[component] = (summary, usage)
            moments[component] = {n: asdict(r) for n, r in sorted(records.items())}
    header = (f"pod churn, {started}: {args.pods} pods over {args.minutes:g} min, "
              f"each deleted {args.lifetime:g} s after Running; "
              f"{', '.join(f'{k} {v}' for k, v in machine().items())}; "
              f"{versions_line(run.kubelet)}")  # fmt: skip
    print(report(results, markdown=args.markdown, header=header))
    if args.json:
        args.json.write_text(json.dumps(moments, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    script(main)

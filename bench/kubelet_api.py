"""The kubelet API as a user meets it: nodeagent vs the kubelet, each as the node.

    PYTHONPATH=tests .venv/bin/python bench/kubelet_api.py [--pods 30] [--lines 100]
        [--execs 30] [--only nodeagent|kubelet] [--markdown]

``pod_startup``'s harness (one control plane; per component a fresh containerd and the
component as a new Node, its kubelet API server on a free port of every address, x509 client
certificates against the cluster CA, ``AlwaysAllow`` for both, so the apiserver's kubelet client
certificate is all that is checked). ``--pods`` pods are created at once through the scheduler:
one ``ticker`` pod writing ``tick <n>`` every 200 ms, the rest busybox ``sleep``. Then:

- **idle**: the component's RSS and CPU for ``--idle`` seconds with the pods and no follower;
- **logs -f**: two ``kubectl logs -f`` of the ticker through the apiserver: one discards what
  it reads, the other (``--timestamps --tail=1``) is timed: for ``--lines`` lines, the arrival
  of the line at this process minus the CRI log timestamp the runtime wrote when the container
  wrote it (same host, same clock). The component's RSS and CPU are sampled every second meanwhile:
  RSS with all the pods and two followers open;
- **exec**: ``--execs`` sequential ``kubectl exec ticker -- true`` (wall time of the kubectl
  process: its start, the apiserver, the component, CRI ``Exec`` and the runtime's streaming
  server), then as many raw ``/exec`` WebSocket requests (``v5.channel.k8s.io``) through the
  apiserver from this process, connect to the status on the error channel, without kubectl.

Needs root and the reference kubelet (``PYTHONPATH=tests .venv/bin/python -m harness build
--peers``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import http.client
import json
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import node_measure as m
import pod_api
import pod_startup as ps
from harness.images import BUSYBOX_IMAGE
from harness.pki import tls_client_context
from node_idle import machine, say, versions_line

TICKER_POD, TICKER = "ticker", "ticker"
TICK = "i=0; while true; do echo tick $i; i=$((i+1)); sleep 0.2; done"
EXEC_PROTOCOL = "v5.channel.k8s.io"
ERROR_CHANNEL = 3


@dataclass
class Usage:
    """The component over a window: RSS samples and CPU seconds (own + reaped children)."""

    seconds: float = 0.0
    rss_max_kib: int = 0
    rss_final_kib: int = 0
    cpu_s: float = 0.0
    load_mean: float = 0.0


@dataclass
class Result:
    idle: Usage = field(default_factory=Usage)
    following: Usage = field(default_factory=Usage)
    log_latency_s: list[float] = field(default_factory=list)
    direct_latency_s: list[float] = field(default_factory=list)
    lines_in_order: bool = True
    kubectl_exec_s: list[float] = field(default_factory=list)
    raw_exec_s: list[float] = field(default_factory=list)
    exec_failures: list[str] = field(default_factory=list)
    hwm_kib: int = 0
    all_running_s: float | None = None
    notes: list[str] = field(default_factory=list)


def ticker_pod(name: str, *, namespace: str, node: str, image: str, by_scheduler: bool) -> dict:
    body = pod_api.sleep_pod(
        name, namespace=namespace, node=node, image=image, by_scheduler=by_scheduler
    )
    container = body["spec"]["containers"][0]
    container["name"] = TICKER
    container["command"] = ["sh", "-c", TICK]
    return body


def stamp_seconds(stamp: str) -> float:
    """An RFC 3339 timestamp with nanoseconds (``kubectl logs --timestamps``), in seconds."""
    head, _, rest = stamp.partition(".")
    fraction = rest.rstrip("Z").split("+")[0][:6]
    moment = datetime.datetime.fromisoformat(f"{head}.{fraction.ljust(6, '0')}+00:00")
    return moment.timestamp()


def latencies(lines: list[tuple[float, str]]) -> tuple[list[float], bool]:
    """(arrival - CRI timestamp) for each ``(arrival, "<stamp> tick <n>")`` line, and whether
    the ticks came in order without a gap."""
    found, ticks = [], []
    for arrived, raw in lines:
        stamp, _, text = raw.partition(" ")
        found.append(arrived - stamp_seconds(stamp))
        ticks.append(int(text.split()[1]))
    in_order = ticks == list(range(ticks[0], ticks[0] + len(ticks))) if ticks else True
    return found, in_order


def usage(samples: list[m.Sample]) -> Usage:
    return Usage(
        seconds=samples[-1].at - samples[0].at,
        rss_max_kib=max(s.rss_kib for s in samples),
        rss_final_kib=samples[-1].rss_kib,
        cpu_s=(samples[-1].cpu_ticks - samples[0].cpu_ticks) / m.CLOCK_TICKS,
        load_mean=sum(s.load1 for s in samples) / len(samples),
    )


class Sampler:
    """The component's /proc figures every second, in a thread, until stopped."""

    def __init__(self, pid: int) -> None:
        self.pid, self.samples = pid, [m.sample(pid, now=time.time())]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self.stop_event.wait(1.0):
            self.samples.append(m.sample(self.pid, now=time.time()))

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop_event.set()
        self.thread.join()
        self.samples.append(m.sample(self.pid, now=time.time()))


class ApiBench(ps.PodBench):
    def argv(
        self, component: str, *, name: str, root: Path, endpoint: str, cgroups: str
    ) -> list[str]:
        """pod_startup's (both x509 only, AlwaysAllow), with the server on every address (the
        apiserver dials the node's InternalIP)."""
        argv = super().argv(component, name=name, root=root, endpoint=endpoint, cgroups=cgroups)
        path = root.parent / f"{component}-config.yaml"
        config = json.loads(path.read_text())
        section = config["kubelet"] if component == "nodeagent" else config
        section["address"] = "0.0.0.0"
        path.write_text(json.dumps(config, indent=2) + "\n")
        return argv

    def measure_on(self, node: ps.Node, result: Result) -> None:
        proc, ns, args = node.proc, node.namespace, self.args

        def place(make: Callable[..., dict], name: str) -> dict:
            return make(name, namespace=ns, node=node.name, image=BUSYBOX_IMAGE, by_scheduler=True)

        bodies = [place(ticker_pod, TICKER_POD)]
        bodies += [place(pod_api.sleep_pod, f"p-{i:03d}") for i in range(1, args.pods)]
        ps.wait_quiet(proc, max_load=args.max_load, max_wait=args.max_wait)
        say(f"{proc.name}: creating {len(bodies)} pods at once")
        batch = asyncio.run(self.create(ns, bodies))
        result.all_running_s = batch.all_running_s
        if batch.all_running_s is None:
            raise RuntimeError(f"only {len(batch.latencies())}/{len(bodies)} pods Running")
        # A node declaring ExtendWebSocketsToKubelet gets WebSocket streams as they come; to
        # any other the apiserver makes them SPDY (another round trip per stream it opens).
        declared = self.plane.kubectl(
            "get", "node", node.name, "-o", "jsonpath={.status.declaredFeatures}"
        ).stdout.strip()
        result.notes.append(f"node {node.name} declaredFeatures: {declared or 'none'}")
        ps.sleep_watching(args.settle, proc)
        ps.wait_quiet(proc, max_load=args.max_load, max_wait=args.max_wait)

        say(f"{proc.name}: idle {args.idle:g} s, then two log followers")
        with Sampler(proc.pid) as idle:
            ps.sleep_watching(args.idle, proc)
        result.idle = usage(idle.samples)

        port = self.plane.kubectl(
            "get",
            "node",
            node.name,
            "-o",
            "jsonpath={.status.daemonEndpoints.kubeletEndpoint.Port}",
        ).stdout.strip()
        direct: list[tuple[float, str]] = []
        with (
            Sampler(proc.pid) as following,
            self.follower(ns, timed=False),
            self.direct_follower(ns, int(port), direct, args.lines + 1),
        ):
            lines = self.follow(ns, args.lines + 1)[1:]  # the first is --tail=1's old line
        result.following = usage(following.samples)
        result.log_latency_s, result.lines_in_order = latencies(lines)
        result.direct_latency_s, _ = latencies(direct[1:])

        say(f"{proc.name}: {args.execs} kubectl exec, {args.execs} raw /exec")
        for _ in range(args.execs):
            started = time.monotonic()
            done = self.plane.kubectl("exec", "-n", ns, TICKER_POD, "--", "true", check=False)
            elapsed = time.monotonic() - started
            if done.returncode == 0:
                result.kubectl_exec_s.append(elapsed)
            else:
                result.exec_failures.append(f"kubectl exec: {done.stderr.strip()[:200]}")
        raw, failures = asyncio.run(self.raw_execs(ns, args.execs))
        result.raw_exec_s, result.exec_failures = raw, result.exec_failures + failures
        result.hwm_kib = m.sample(proc.pid, now=time.time()).hwm_kib
        self.delete(proc, ns)

    def kubectl_argv(self, *args: str) -> list[str]:
        plane = self.plane
        return [str(plane.kubectl_path), f"--kubeconfig={plane.admin_kubeconfig}", *args]

    @contextlib.contextmanager
    def follower(self, namespace: str, *, timed: bool) -> Iterator[subprocess.Popen[str]]:
        flags = ["--timestamps", "--tail=1"] if timed else ["--tail=1"]
        argv = self.kubectl_argv("logs", "-f", *flags, "-n", namespace, TICKER_POD)
        out = subprocess.PIPE if timed else subprocess.DEVNULL
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, text=True)
        try:
            yield proc
        finally:
            proc.terminate()
            proc.communicate(timeout=10)

    @contextlib.contextmanager
    def direct_follower(
        self, namespace: str, port: int, got: list[tuple[float, str]], count: int
    ) -> Iterator[None]:
        """A third follower straight to the node's ``/containerLogs`` (no apiserver, no
        kubectl), with the admin client certificate, in a thread: ``count`` lines into ``got``.
        Its latency is the node's own part of the ``kubectl logs -f`` figure."""
        admin = self.plane.pki.admin
        context = tls_client_context(admin)  # the node's serving certificate is not the point
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=60)
        conn.request(
            "GET",
            f"/containerLogs/{namespace}/{TICKER_POD}/{TICKER}"
            "?follow=true&timestamps=true&tailLines=1",
        )
        response = conn.getresponse()
        if response.status != 200:
            raise RuntimeError(f"direct follow: HTTP {response.status} {response.read()[:200]!r}")

        def read() -> None:
            with contextlib.suppress(OSError, ValueError, http.client.HTTPException):
                while len(got) < count and (raw := response.readline()):
                    got.append((time.time(), raw.decode().rstrip("\n")))

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        try:
            yield
        finally:
            thread.join(timeout=30)
            conn.close()

    def follow(self, namespace: str, count: int) -> list[tuple[float, str]]:
        """``count`` lines of a timed follower: (arrival, the line as kubectl printed it)."""
        got: list[tuple[float, str]] = []
        with self.follower(namespace, timed=True) as proc:
            assert proc.stdout is not None
            for raw in proc.stdout:
                got.append((time.time(), raw.rstrip("\n")))
                if len(got) == count:
                    break
        if len(got) < count:
            raise RuntimeError(f"kubectl logs -f ended after {len(got)} lines")
        return got

    async def raw_execs(self, namespace: str, count: int) -> tuple[list[float], list[str]]:
        """``count`` WebSocket ``/exec`` of ``true`` in the ticker, each a new connection as
        kubectl makes it: (seconds from connect to the exit status, failures)."""
        context = tls_client_context(self.plane.pki.admin, ca=self.plane.ca_path)
        url = (
            f"{self.plane.server}/api/v1/namespaces/{namespace}/pods/{TICKER_POD}/exec"
            f"?command=true&container={TICKER}&stdout=true&stderr=true"
        )
        times, failures = [], []
        async with aiohttp.ClientSession() as session:
            for _ in range(count):
                started = time.monotonic()
                status = ""
                async with session.ws_connect(url, protocols=(EXEC_PROTOCOL,), ssl=context) as ws:
                    async for message in ws:
                        data = message.data
                        if message.type == aiohttp.WSMsgType.BINARY and data[0] == ERROR_CHANNEL:
                            status = data[1:].decode()
                elapsed = time.monotonic() - started
                if '"Success"' in status:
                    times.append(elapsed)
                else:
                    failures.append(f"raw exec: {status[:200] or 'no status'}")
        return times, failures


def _ms(values: list[float], p: float, digits: int = 0) -> str:
    return "-" if not values else f"{1000 * pod_api.percentile(sorted(values), p):.{digits}f}"


def _mib(kib: int) -> str:
    return f"{kib / 1024:.1f}"


def rows(r: Result, args: argparse.Namespace) -> list[tuple[str, str]]:
    lat, kx, rx, d = r.log_latency_s, r.kubectl_exec_s, r.raw_exec_s, r.direct_latency_s
    f, i = r.following, r.idle
    return [
        (f"**`kubectl logs -f`** line latency p50 / p99 / max (ms), {len(lat)} lines",
         f"{_ms(lat, 50, 1)} / {_ms(lat, 99, 1)} / {_ms(lat, 100, 1)}"),
        (f"  straight from the node (no apiserver, no kubectl), {len(d)} lines",
         f"{_ms(d, 50, 1)} / {_ms(d, 99, 1)} / {_ms(d, 100, 1)}"),
        ("  lines in order, none lost", "yes" if r.lines_in_order else "**no**"),
        (f"**`kubectl exec -- true`** p50 / p99 (ms), {len(kx)} runs",
         f"{_ms(kx, 50)} / {_ms(kx, 99)}"),
        (f"raw `/exec` (WebSocket, through the apiserver) p50 / p99 (ms), {len(rx)} runs",
         f"{_ms(rx, 50)} / {_ms(rx, 99)}"),
        ("exec failures", str(len(r.exec_failures))),
        (f"**RSS, {args.pods} pods + 2 followers**: max / final (MiB)",
         f"{_mib(f.rss_max_kib)} / {_mib(f.rss_final_kib)}"),
        (f"  CPU while following ({f.seconds:.0f} s, share of one core)",
         f"{f.cpu_s:.2f} s ({100 * f.cpu_s / max(f.seconds, 1e-9):.1f}%)"),
        (f"RSS, {args.pods} pods, no follower ({i.seconds:.0f} s): max (MiB)",
         _mib(i.rss_max_kib)),
        ("  CPU idle (share of one core)",
         f"{i.cpu_s:.2f} s ({100 * i.cpu_s / max(i.seconds, 1e-9):.1f}%)"),
        ("RSS peak since start, VmHWM (MiB)", _mib(r.hwm_kib)),
        (f"{args.pods} pods all Running after (s)",
         "-" if r.all_running_s is None else f"{r.all_running_s:.2f}"),
        ("load average (1 min) mean: idle / following",
         f"{i.load_mean:.2f} / {f.load_mean:.2f}"),
    ]  # fmt: skip


def table(results: dict[str, Result], args: argparse.Namespace, *, markdown: bool) -> str:
    columns = {name: rows(r, args) for name, r in results.items()}
    labels = [label for label, _ in next(iter(columns.values()))]
    body = [[label, *(c[n][1] for c in columns.values())] for n, label in enumerate(labels)]
    header = ["", *columns]
    if markdown:
        lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
    body = [[label.replace("**", "").replace("`", ""), *rest] for label, *rest in body]
    widths = [max(len(row[n]) for row in [header, *body]) for n in range(len(header))]
    return "\n".join(
        "  ".join(c.ljust(w) if n == 0 else c.rjust(w) for n, (c, w) in enumerate(
            zip(row, widths, strict=True)))
        for row in [header, *body]
    )  # fmt: skip


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--pods", type=int, default=30, help="pods on the node (one of them the ticker)")
    add("--lines", type=int, default=100, help="log lines timed (one every 200 ms)")
    add("--execs", type=int, default=30, help="kubectl exec runs, and as many raw /exec")
    add("--idle", type=float, default=20.0, help="seconds of the no-follower window")
    add("--settle", type=float, default=15.0, help="seconds between Running and measuring")
    add("--timeout", type=float, default=300.0, help="seconds the pods may take to be Running")
    add("--max-load", type=float, default=1.5, help="wait for this 1-min load before measuring")
    add("--max-wait", type=float, default=120.0, help="... but at most this many seconds")
    add("--verbosity", type=int, default=0, help="nodeagent's --v")
    add("--only", choices=ps.COMPONENTS, action="append", help="repeatable")
    add("--markdown", action="store_true", help="print the table as markdown")
    add("--keep-logs", type=Path, help="copy every component's log here")
    args = parser.parse_args(argv)
    args.node_name = False  # pod_startup's flags this bench does not vary
    return args


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    components = args.only or list(ps.COMPONENTS)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, Result] = {}
    with ps.session(components, prefix="na-api-", keep_logs=args.keep_logs) as run:
        bench = ApiBench(
            plane=run.plane, kubelet=run.kubelet, work=run.work, log_dir=run.log_dir, args=args
        )
        for component in components:
            result, holder = Result(), ps.Result()
            with bench.node(component, holder) as node:
                bench.measure_on(node, result)
            result.notes = holder.notes + result.notes
            results[component] = result
            say(f"{component}: done")
    lines = [table(results, args, markdown=args.markdown), ""]
    for component, result in results.items():
        lines += [f"{component}: {n}" for n in result.notes + result.exec_failures[:3]]
    lines += ["", f"started {started}; {versions_line(run.kubelet)}"]
    lines += [", ".join(f"{k}: {v}" for k, v in machine().items())]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    ps.script(main)

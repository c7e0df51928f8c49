"""Pod startup benchmark: nodeagent, then the reference kubelet, each on a fresh containerd.

    PYTHONPATH=tests .venv/bin/python bench/pod_startup.py [--singles 20] [--gap 5] [--pods 30]
        [--more 70] [--idle-minutes 2] [--settle 30] [--max-pods 110] [--only nodeagent|kubelet]
        [--markdown]

Starts the harness control plane once. Then, for each component in turn: a fresh private
containerd (the local pause and busybox images imported, a bridge CNI network), the component as
a new Node with a node client certificate and a cgroup root of its own; once the Node is Ready
and untainted, ``--singles`` pods are created one at a time, ``--gap`` seconds apart (a quiet
node: each create -> Running on its own); then ``--pods`` pods (busybox ``sleep
3600``, image present, no service account token volume) are created at once through the
scheduler and watched until every one is Running and Ready; after ``--settle`` seconds the
component's RSS and CPU are sampled every second for ``--idle-minutes``, and its CRI calls
per minute by operation read from its ``/metrics`` at both ends, with the calls containerd
served and the time it spent on them by method from containerd's own (`cri_calls`); then ``--more``
pods are created at once (startup recorded the same way) and the idle window is repeated with
all of them. Finally the pods are deleted through the API (the component kills them and
removes the objects), the component and containerd are stopped, and its Node, Lease, cgroups,
log links and host changes are removed. Ctrl-C still cleans up.

Needs root and the reference kubelet (``PYTHONPATH=tests .venv/bin/python -m harness build
--peers``). Timings: see `pod_api`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import secrets
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

import cri_calls
import node_components as comp
import node_measure as m
import pod_api
import pod_report
from harness import cni, netsafety
from harness.build import Binaries, binaries
from harness.cgroups import remove_cgroup_tree
from harness.containerd import Containerd, ContainerdConfig, start_containerd, unmount_and_remove
from harness.controlplane import ControlPlane, new_run_dir, start_control_plane
from harness.controlplane_args import free_port
from harness.hoststate import HostState
from harness.images import BUSYBOX_IMAGE, build_images
from harness.processes import Proc, StartupError, start, wait_for
from harness.versions import load_versions
from node_idle import nodeagent_identity, say, sleep_watching

COMPONENTS = ("nodeagent", "kubelet")
SUBNET = "10.244.251.0/24"  # node_idle uses .250, the test workers 10.244.<n>.0/24 from 0
BRIDGE = "na-pods0"
READY_TIMEOUT = 180.0
DELETE_TIMEOUT = 300.0


@dataclass
class Burst:
    batch: pod_api.Batch
    count: int
    cpu_s: float  # the component's CPU from the first create to the last pod Running
    runtime_cpu_s: float  # containerd's, same span
    load1: float  # at the first create


@dataclass
class Window:
    pods: int
    seconds: float
    rss_max_kib: int
    rss_final_kib: int
    cpu_s: float
    runtime_cpu_s: float
    load_mean: float
    load_max: float
    cri_per_min: dict[str, float] | None = None  # by operation_type; None: /metrics not read
    # containerd's side, by CRI method: calls/min and ms/min serving them (None: not read)
    runtime_calls_per_min: dict[str, float] | None = None
    runtime_ms_per_min: dict[str, float] | None = None


@dataclass
class Node:
    proc: Proc
    ctd: Containerd
    name: str
    namespace: str
    port: int  # its kubelet API (/metrics), on 127.0.0.1


@dataclass
class Result:
    singles: list[float] = field(default_factory=list)  # quiet node: create -> Running (s)
    bursts: list[Burst] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    hwm_kib: int = 0
    deleted_s: float | None = None
    notes: list[str] = field(default_factory=list)


@contextlib.contextmanager
def pod_containerd(base: Path, *, log_path: Path) -> Iterator[Containerd]:
    """A fresh containerd with the bridge network and the local images."""
    net = cni.CniNetwork(
        conf_dir=base / "net.d", ipam_dir=base / "ipam", subnet=SUBNET, bridge=BRIDGE
    )
    ip_forward_before = cni.read_ip_forward()
    cni.check_subnet_free(net)
    cni.write_conflist(net)
    try:
        ctd = start_containerd(
            ContainerdConfig(
                base_dir=base / "c",
                cni_conf_dir=net.conf_dir,
                log_path=log_path,
                metrics_address=f"127.0.0.1:{free_port()}",
            )
        )
        try:
            for image in build_images().values():
                ctd.import_image(image.tarball)
            yield ctd
        finally:
            ctd.stop()
    finally:
        cni.remove_network(net, ip_forward_before=ip_forward_before)


def schedulable(plane: ControlPlane, name: str) -> bool:
    done = plane.kubectl("get", "node", name, "-o", "json", check=False)
    if done.returncode != 0:
        return False
    node = json.loads(done.stdout)
    conditions = node.get("status", {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and not node["spec"].get("taints")


def load1() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def cpu_s(pid: int) -> float:
    return m.cpu_ticks(Path(f"/proc/{pid}/stat").read_text()) / m.CLOCK_TICKS


def wait_quiet(proc: Proc, *, max_load: float, max_wait: float) -> float:
    """Wait (up to ``max_wait`` s) until the 1-minute load is at most ``max_load``."""
    deadline = time.monotonic() + max_wait
    while load1() > max_load and time.monotonic() < deadline:
        sleep_watching(5, proc)
    return load1()


class PodBench:
    def __init__(
        self,
        *,
        plane: ControlPlane,
        kubelet: Path,
        work: Path,
        log_dir: Path,
        args: argparse.Namespace,
    ) -> None:
        self.plane, self.kubelet, self.args = plane, kubelet, args
        self.work, self.log_dir = work, log_dir

    def argv(
        self, component: str, *, name: str, root: Path, endpoint: str, cgroups: str
    ) -> list[str]:
        kubeconfig = self.plane.node_kubeconfig(name)
        versions = load_versions()
        if component == "nodeagent":
            config = comp.nodeagent_config(
                root=root, versions=versions, cgroup_root=cgroups, ca=self.plane.ca_path
            )
            kubelet_section = config["kubelet"]
            if self.args.max_pods and isinstance(kubelet_section, dict):
                kubelet_section["maxPods"] = self.args.max_pods
            path = comp.write_config(root.parent / "nodeagent-config.yaml", config)
            argv = comp.nodeagent_argv(
                name=name, kubeconfig=kubeconfig, root=root, endpoint=endpoint, config=path
            )
            return argv + ([f"--v={self.args.verbosity}"] if self.args.verbosity else [])
        config = comp.kubelet_config(
            root=root, endpoint=endpoint, ca=self.plane.ca_path, versions=versions
        )
        config["cgroupRoot"] = cgroups
        if self.args.max_pods:
            config["maxPods"] = self.args.max_pods
        path = comp.write_config(root.parent / "kubelet-config.yaml", config)
        return comp.kubelet_argv(
            self.kubelet, name=name, kubeconfig=kubeconfig, root=root, config=path
        )

    @staticmethod
    def server_port(component: str, root: Path) -> int:
        """The port of the component's kubelet API, from the config `argv` wrote."""
        config = json.loads((root.parent / f"{component}-config.yaml").read_text())
        return int((config["kubelet"] if component == "nodeagent" else config)["port"])

    @contextlib.contextmanager
    def node(self, component: str, result: Result) -> Iterator[Node]:
        """The component running as a new, Ready Node on a fresh containerd, with a namespace
        of its own; everything is stopped and removed on exit (also on error)."""
        suffix = secrets.token_hex(2)
        name, namespace = f"bench-{component}-{suffix}", f"pods-{suffix}"
        cgroup_name = f"na-bench-{component}-{suffix}"
        base = self.work / component
        root = base / "root"
        root.mkdir(parents=True)
        host = HostState.snapshot()
        with contextlib.ExitStack() as stack:  # undone in reverse: the component stops first
            stack.callback(self.forget, name=name, namespace=namespace)
            stack.callback(unmount_and_remove, base)
            stack.callback(self.restore_host, host, result.notes)
            stack.callback(comp.remove_log_links, namespace)
            stack.callback(remove_cgroup_tree, cgroup_name)
            cgroups = comp.make_cgroup_root(cgroup_name)
            ctd = stack.enter_context(
                pod_containerd(base / "rt", log_path=self.log_dir / f"containerd-{component}.log")
            )
            argv = self.argv(
                component, name=name, root=root, endpoint=ctd.endpoint, cgroups=cgroups
            )
            say(f"{component}: starting as node {name}")
            proc = start(name=component, argv=argv, log=self.log_dir / f"{component}.log")
            stack.callback(proc.stop, timeout=30)
            wait_for(
                lambda: schedulable(self.plane, name),
                what=f"node {name} Ready, untainted",
                timeout=READY_TIMEOUT,
                watch=[proc],
            )
            self.plane.kubectl("create", "namespace", namespace)
            wait_for(
                lambda: self.exists("sa", "default", "-n", namespace),
                what="the namespace's default ServiceAccount",
                timeout=60,
            )
            port = self.server_port(component, root)
            yield Node(proc=proc, ctd=ctd, name=name, namespace=namespace, port=port)
            if component == "nodeagent":
                result.notes.append(nodeagent_identity(self.log_dir / "nodeagent.log"))
            result.notes.append(f"node {name}: pods in {namespace}, cgroup root {cgroups}")

    def run(self, component: str) -> Result:
        result = Result()
        with self.node(component, result) as node:
            proc, ctd, name, namespace = node.proc, node.ctd, node.name, node.namespace
            created = 0
            if self.args.singles > 0:
                wait_quiet(proc, max_load=self.args.max_load, max_wait=self.args.max_wait)
                say(f"{component}: {self.args.singles} single pods {self.args.gap:g} s apart")
                for i in range(self.args.singles):
                    body = pod_api.sleep_pod(
                        f"s-{i:03d}",
                        namespace=namespace,
                        node=name,
                        image=BUSYBOX_IMAGE,
                        by_scheduler=not self.args.node_name,
                    )
                    started = time.monotonic()
                    batch = asyncio.run(self.create(namespace, [body]))
                    result.singles += batch.latencies("running")
                    sleep_watching(max(0.0, self.args.gap - (time.monotonic() - started)), proc)
                self.delete(proc, namespace)  # the bursts start from an empty node (maxPods 110)
            for count in (self.args.pods, self.args.more):
                if count <= 0:
                    continue
                bodies = [
                    pod_api.sleep_pod(
                        f"p-{i:03d}",
                        namespace=namespace,
                        node=name,
                        image=BUSYBOX_IMAGE,
                        by_scheduler=not self.args.node_name,
                    )
                    for i in range(created, created + count)
                ]
                result.bursts.append(self.burst(proc, ctd, namespace, bodies))
                created += count
                if self.args.idle_minutes > 0:
                    sleep_watching(self.args.settle, proc)
                    result.windows.append(self.idle(proc, ctd, pods=created, port=node.port))
            result.hwm_kib = m.sample(proc.pid, now=time.time()).hwm_kib
            result.deleted_s = self.delete(proc, namespace)
        return result

    def burst(self, proc: Proc, ctd: Containerd, namespace: str, bodies: list[dict]) -> Burst:
        load = wait_quiet(proc, max_load=self.args.max_load, max_wait=self.args.max_wait)
        say(f"{proc.name}: creating {len(bodies)} pods at once (load {load:.2f})")
        before = (cpu_s(proc.pid), cpu_s(ctd.pid))
        batch = asyncio.run(self.create(namespace, bodies))
        after = (cpu_s(proc.pid), cpu_s(ctd.pid))
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited; last log lines:\n{proc.tail()}")
        running = batch.all_running_s
        if running is None:
            say(f"{proc.name}: only {len(batch.latencies())}/{len(bodies)} Running in time")
        else:
            say(f"{proc.name}: all Running after {running:.2f}s")
        return Burst(
            batch=batch,
            count=len(bodies),
            cpu_s=after[0] - before[0],
            runtime_cpu_s=after[1] - before[1],
            load1=load,
        )

    async def create(self, namespace: str, bodies: list[dict]) -> pod_api.Batch:
        admin = self.plane.pki.admin
        async with pod_api.Api.open(
            server=self.plane.server, ca=self.plane.ca_path, cert=admin.cert, key=admin.key
        ) as api:
            return await api.burst(namespace, bodies, within=self.args.timeout)

    def cri_operations(self, proc: Proc, port: int) -> tuple[float, dict[str, float] | None]:
        """(now, the component's CRI calls so far by operation; None if /metrics failed)."""
        admin = self.plane.pki.admin
        try:
            return time.monotonic(), cri_calls.scrape(port, cert=admin.cert, key=admin.key)
        except OSError as error:
            say(f"{proc.name}: /metrics on port {port}: {error}")
            return time.monotonic(), None

    @staticmethod
    def runtime_operations(ctd: Containerd) -> tuple[float, dict[str, float], dict[str, float]]:
        """(now, containerd's CRI calls so far by method, seconds spent on them); empty when
        its metrics could not be read."""
        try:
            assert ctd.metrics_address is not None
            return time.monotonic(), *cri_calls.runtime_scrape(ctd.metrics_address)
        except OSError as error:
            say(f"containerd: /v1/metrics at {ctd.metrics_address}: {error}")
            return time.monotonic(), {}, {}

    def idle(self, proc: Proc, ctd: Containerd, *, pods: int, port: int) -> Window:
        say(f"{proc.name}: idle with {pods} pods for {self.args.idle_minutes:g} min")
        samples: list[m.Sample] = []
        calls_before = self.cri_operations(proc, port)
        served_before = self.runtime_operations(ctd)
        runtime = [cpu_s(ctd.pid)]
        end = time.monotonic() + self.args.idle_minutes * 60
        while True:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited; last log lines:\n{proc.tail()}")
            samples.append(m.sample(proc.pid, now=time.time()))
            if time.monotonic() >= end:
                break
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        runtime.append(cpu_s(ctd.pid))
        calls_after = self.cri_operations(proc, port)
        served_after = self.runtime_operations(ctd)
        loads = [s.load1 for s in samples]
        (started, before), (ended, after) = calls_before, calls_after
        rates = None
        if before is not None and after is not None:
            rates = cri_calls.per_minute(before, after, ended - started)
        served_calls = served_ms = None
        if served_before[1] and served_after[1]:
            window = served_after[0] - served_before[0]
            served_calls = cri_calls.per_minute(served_before[1], served_after[1], window)
            seconds = cri_calls.per_minute(served_before[2], served_after[2], window)
            served_ms = {method: s * 1000 for method, s in seconds.items()}
        return Window(
            pods=pods,
            seconds=samples[-1].at - samples[0].at,
            rss_max_kib=max(s.rss_kib for s in samples),
            rss_final_kib=samples[-1].rss_kib,
            cpu_s=(samples[-1].cpu_ticks - samples[0].cpu_ticks) / m.CLOCK_TICKS,
            runtime_cpu_s=runtime[1] - runtime[0],
            load_mean=sum(loads) / len(loads),
            load_max=max(loads),
            cri_per_min=rates,
            runtime_calls_per_min=served_calls,
            runtime_ms_per_min=served_ms,
        )

    def delete(self, proc: Proc, namespace: str) -> float | None:
        """Delete every pod through the API; seconds until the component removed them all."""
        say(f"{proc.name}: deleting the pods")
        started = time.monotonic()
        self.plane.kubectl("delete", "pods", "--all", "-n", namespace, "--wait=false")

        def gone() -> bool:
            listed = self.plane.kubectl("get", "pods", "-n", namespace, "-o", "name")
            return not listed.stdout.strip()

        try:
            wait_for(gone, what="the pods deleted", timeout=DELETE_TIMEOUT, watch=[proc])
        except StartupError as error:  # reported; the cleanup removes them by force
            say(f"{proc.name}: {error}")
            return None
        return time.monotonic() - started

    @staticmethod
    def restore_host(host: HostState, notes: list[str]) -> None:
        notes += [f"changed on the host (restored): {c}" for c in host.changes()]
        host.restore()

    def exists(self, *args: str) -> bool:
        return self.plane.kubectl("get", *args, check=False).returncode == 0

    def forget(self, *, name: str, namespace: str) -> None:
        kubectl = self.plane.kubectl
        kubectl("delete", "namespace", namespace, "--ignore-not-found", "--wait=false", check=False)
        kubectl("delete", "lease", name, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        kubectl("delete", "node", name, "--ignore-not-found", check=False)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add = parser.add_argument
    add("--singles", type=int, default=20, help="quiet node: pods created one at a time first")
    add("--gap", type=float, default=5.0, help="seconds between the single pods' creates")
    add("--pods", type=int, default=30, help="pods in the first burst")
    add("--more", type=int, default=70, help="pods in the second burst (on top of the first)")
    add("--idle-minutes", type=float, default=2.0, help="idle window after each burst; 0: none")
    add("--settle", type=float, default=30.0, help="seconds between a burst and its idle window")
    add("--timeout", type=float, default=300.0, help="seconds a burst may take to be Running")
    add("--max-load", type=float, default=1.0, help="wait for this 1-min load before a burst")
    add("--max-wait", type=float, default=180.0, help="... but at most this many seconds")
    add("--max-pods", type=int, default=0, help="both components' maxPods (default 110)")
    add("--node-name", action="store_true", help="bind pods with nodeName, not the scheduler")
    add("--verbosity", type=int, default=0, help="nodeagent's --v (for its timing logs)")
    add("--only", choices=COMPONENTS, action="append", help="repeatable")
    add("--markdown", action="store_true", help="print the table as markdown")
    add("--keep-logs", type=Path, help="copy every component's log here")
    add("--json", type=Path, help="write every pod's times (seconds since the epoch) here")
    return parser.parse_args(argv)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def control_plane(bins: Binaries, *, log_dir: Path) -> Iterator[ControlPlane]:
    root = new_run_dir()
    try:
        plane = start_control_plane(binaries=bins, root=root, log_dir=log_dir)
        try:
            yield plane
        finally:
            plane.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


@dataclass
class Session:
    plane: ControlPlane
    kubelet: Path
    work: Path
    log_dir: Path


class KubeletMissing(Exception):
    pass


@contextlib.contextmanager
def session(components: list[str], *, prefix: str, keep_logs: Path | None) -> Iterator[Session]:
    """What the node benches share: the harness control plane, behind the unreachable routes
    (`netsafety`), in a work dir of its own (short: containerd's socket is in it); on exit
    everything is stopped and removed, the logs copied to ``keep_logs`` first. Raises
    KubeletMissing when a kubelet run is asked for and the kubelet is not built."""
    bins = binaries()
    kubelet = bins.path("kubelet")
    if "kubelet" in components and not kubelet.exists():
        raise KubeletMissing(
            f"no {kubelet}: run `PYTHONPATH=tests .venv/bin/python -m harness build --peers`"
        )
    work = Path(tempfile.mkdtemp(prefix=prefix))
    log_dir = work / "logs"
    try:
        with contextlib.ExitStack() as stack:
            stack.enter_context(netsafety.unreachable_routes())
            say("starting the control plane")
            plane = stack.enter_context(control_plane(bins, log_dir=log_dir))
            yield Session(plane=plane, kubelet=kubelet, work=work, log_dir=log_dir)
    finally:
        if keep_logs:
            shutil.copytree(log_dir, keep_logs, dirs_exist_ok=True)
        unmount_and_remove(work)


def script(main: Callable[[list[str]], int]) -> NoReturn:
    """Run a bench's ``main`` as a script: SIGTERM and Ctrl-C end it through its cleanups."""
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        say("interrupted; everything started was stopped and removed")
        sys.exit(130)
    except KubeletMissing as e:
        say(str(e))
        sys.exit(2)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    components = args.only or list(COMPONENTS)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results: dict[str, Result] = {}
    with session(components, prefix="na-pods-", keep_logs=args.keep_logs) as run:
        bench = PodBench(
            plane=run.plane, kubelet=run.kubelet, work=run.work, log_dir=run.log_dir, args=args
        )
        for component in components:
            results[component] = bench.run(component)
            say(f"{component}: done")
    print(pod_report.report(results, args=args, kubelet=run.kubelet, started=started))
    if args.json:
        pods = {c: [b.batch.wall_clock() for b in r.bursts] for c, r in results.items()}
        args.json.write_text(json.dumps(pods, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    script(main)

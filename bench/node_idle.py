"""Idle node benchmark: nodeagent, then the reference kubelet, on one control plane and containerd.

    PYTHONPATH=tests .venv/bin/python bench/node_idle.py [--minutes 5] [--warmup 60]
        [--only nodeagent|kubelet] [--markdown] [--keep-logs DIR]

Starts a private control plane (whose apiserver writes an audit log of every request made by a
node, see `node_measure.AUDIT_POLICY`) and a private containerd with a CNI config (no pods run, so
no bridge is ever created). Then, one at a time: starts the component as a new node with a node
client certificate, waits until its Lease has been renewed, lets it settle for ``--warmup``
seconds, samples its /proc every second over ``--minutes``, stops it and removes its Node, Lease
and everything it left on the host. Prints the figures side by side (``--markdown``: as the
section `docs/benchmarks.md` holds). Ctrl-C or SIGTERM at any point still cleans up.

Needs the reference kubelet: ``PYTHONPATH=tests .venv/bin/python -m harness build --peers``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import node_components as comp
import node_measure as m
from harness import cni
from harness.build import Binaries, binaries
from harness.containerd import (
    Containerd,
    ContainerdConfig,
    start_containerd,
    unmount_and_remove,
)
from harness.controlplane import ControlPlane, new_run_dir, start_control_plane
from harness.hoststate import HostState
from harness.processes import Proc, start, wait_for
from harness.versions import load_versions

COMPONENTS = ("nodeagent", "kubelet")
BENCH_SUBNET = "10.244.250.0/24"  # far from the test workers' 10.244.<n>.0/24
BENCH_BRIDGE = "na-bench0"
RENEWING_TIMEOUT = 180.0
AUDIT_FLUSH_S = 2.0


def say(message: str) -> None:
    print(f">>> {message}", file=sys.stderr, flush=True)


@contextlib.contextmanager
def audited_control_plane(bins: Binaries, *, root: Path, log_dir: Path) -> Iterator[ControlPlane]:
    """A control plane whose apiserver logs node requests to ``log_dir/audit.log``."""
    policy = root / "audit-policy.yaml"
    policy.write_text(m.AUDIT_POLICY)
    log_dir.mkdir(parents=True, exist_ok=True)
    flags = m.audit_flags(policy, log_dir / "audit.log")
    plane = start_control_plane(
        binaries=bins, root=root, log_dir=log_dir, apiserver_extra_args=flags
    )
    try:
        yield plane
    finally:
        plane.stop()


@contextlib.contextmanager
def bench_containerd(base: Path, *, log_dir: Path) -> Iterator[Containerd]:
    net = cni.CniNetwork(
        conf_dir=base / "net.d", ipam_dir=base / "ipam", subnet=BENCH_SUBNET, bridge=BENCH_BRIDGE
    )
    ip_forward_before = cni.read_ip_forward()
    cni.write_conflist(net)
    try:
        ctd = start_containerd(
            ContainerdConfig(
                base_dir=base / "c", cni_conf_dir=net.conf_dir, log_path=log_dir / "containerd.log"
            )
        )
        try:
            yield ctd
        finally:
            ctd.stop()
    finally:
        cni.remove_network(net, ip_forward_before=ip_forward_before)


def sleep_watching(seconds: float, proc: Proc) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.name} exited; last log lines:\n{proc.tail()}")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def ready_condition(plane: ControlPlane, node: str) -> str:
    done = plane.kubectl(
        "get", "node", node, "-o",
        'jsonpath={.status.conditions[?(@.type=="Ready")].status} '
        '{.status.conditions[?(@.type=="Ready")].reason}',
        check=False,
    )  # fmt: skip
    return done.stdout.strip() or done.stderr.strip()


class Bench:
    def __init__(
        self, *, plane: ControlPlane, ctd: Containerd, kubelet: Path, work: Path, log_dir: Path
    ) -> None:
        self.plane, self.ctd, self.kubelet, self.work, self.log_dir = (
            plane, ctd, kubelet, work, log_dir
        )  # fmt: skip
        self.audit_log = log_dir / "audit.log"
        self.notes: dict[str, list[str]] = {}

    def argv(self, component: str, *, name: str, kubeconfig: Path, root: Path) -> list[str]:
        if component == "nodeagent":
            config = comp.nodeagent_config(root=root, versions=load_versions())
            return comp.nodeagent_argv(
                name=name,
                kubeconfig=kubeconfig,
                root=root,
                endpoint=self.ctd.endpoint,
                config=comp.write_config(root.parent / "nodeagent-config.yaml", config),
            )
        config = comp.kubelet_config(
            root=root, endpoint=self.ctd.endpoint, ca=self.plane.ca_path, versions=load_versions()
        )
        path = comp.write_config(root.parent / "kubelet-config.yaml", config)
        return comp.kubelet_argv(
            self.kubelet, name=name, kubeconfig=kubeconfig, root=root, config=path
        )

    def renewals(self, name: str) -> list[float]:
        events = m.by_user(m.read_events(self.audit_log), f"system:node:{name}")
        return m.lease_renewals(events, name)

    def run(self, component: str, *, minutes: float, warmup: float) -> m.Figures:
        name = f"bench-{component}-{secrets.token_hex(2)}"
        base = self.work / component
        root = base / "root"
        root.mkdir(parents=True)
        host = HostState.snapshot()
        argv = self.argv(
            component, name=name, kubeconfig=self.plane.node_kubeconfig(name), root=root
        )
        say(f"{component}: starting as node {name}")
        proc = start(name=component, argv=argv, log=self.log_dir / f"{component}.log")
        try:
            started = time.monotonic()
            wait_for(
                lambda: len(self.renewals(name)) >= 2,
                what=f"{component}'s Lease to be renewed",
                timeout=RENEWING_TIMEOUT,
                watch=[proc],
            )
            say(f"{component}: Lease renewing after {time.monotonic() - started:.1f}s; "
                f"warming up {warmup:g}s, then measuring {minutes:g} min")  # fmt: skip
            sleep_watching(warmup, proc)
            figures = self.measure(proc, name=name, minutes=minutes)
            ready = ready_condition(self.plane, name)
        finally:
            proc.stop(timeout=15)
            changed = host.changes()
            host.restore()
            unmount_and_remove(base)
            for kind, ns in (("lease", ["-n", "kube-node-lease"]), ("node", [])):
                self.plane.kubectl("delete", kind, name, "--ignore-not-found", *ns, check=False)
        self.notes[component] = [f"node {name}: Ready={ready}"]
        if component == "nodeagent":
            self.notes[component].append(nodeagent_identity(self.log_dir / "nodeagent.log"))
        self.notes[component] += [f"changed on the host (restored): {c}" for c in changed]
        return figures

    def measure(self, proc: Proc, *, name: str, minutes: float) -> m.Figures:
        samples: list[m.Sample] = []
        runtime = [m.sample(self.ctd.pid, now=time.time()).cpu_ticks]
        end = time.monotonic() + minutes * 60
        while True:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited; last log lines:\n{proc.tail()}")
            samples.append(m.sample(proc.pid, now=time.time()))
            if time.monotonic() >= end:
                break
            time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        runtime.append(m.sample(self.ctd.pid, now=time.time()).cpu_ticks)
        time.sleep(AUDIT_FLUSH_S)
        events = m.by_user(m.read_events(self.audit_log), f"system:node:{name}")
        return m.figures(
            samples=samples,
            runtime_cpu_ticks=(runtime[0], runtime[1]),
            renewals=m.lease_renewals(events, name),
            requests=m.requests_in(events, samples[0].at, samples[-1].at),
        )


def nodeagent_identity(log: Path) -> str:
    """Which nodeagent ran: the repository's HEAD and the managers its log says it started."""
    repo = Path(__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    ).stdout.strip()  # fmt: skip
    started = [line for line in log.read_text().splitlines() if "Starting nodeagent" in line]
    managers = started[-1].rpartition("managers=")[2] if started else "?"
    return (
        f"source: {repo} at HEAD {head or '?'} (plus any uncommitted changes); managers={managers}"
    )


def machine() -> dict[str, str]:
    meminfo = Path("/proc/meminfo").read_text().split("\n")[0].split()
    return {
        "cpus (nproc)": str(os.cpu_count()),
        "memory": f"{int(meminfo[1]) / 1024 / 1024:.1f} GiB",
        "kernel": platform.release(),
        "os": f"Debian {Path('/etc/debian_version').read_text().strip()}",
        "python": platform.python_version(),
    }


def versions_line(kubelet: Path) -> str:
    done = subprocess.run([str(kubelet), "--version"], capture_output=True, text=True, check=False)
    return f"kubelet: {done.stdout.strip()}; containerd: {containerd_version()}"


def containerd_version() -> str:
    done = subprocess.run(
        [shutil.which("containerd") or "containerd", "--version"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return str(done.stdout).strip()


def report(results: dict[str, m.Figures], bench: Bench, *, markdown: bool, started: str) -> str:
    lines = [m.table(results, markdown=markdown), ""]
    lines += ["Requests in the window, by verb and resource:", m.request_breakdown(results), ""]
    for component, notes in bench.notes.items():
        lines += [f"{component}: {n}" for n in notes]
    lines += ["", f"started {started}; {versions_line(bench.kubelet)}"]
    lines += [", ".join(f"{k}: {v}" for k, v in machine().items())]
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="idle window per component")
    parser.add_argument("--warmup", type=float, default=60.0, help="seconds before the window")
    parser.add_argument("--only", choices=COMPONENTS, action="append", help="repeatable")
    parser.add_argument("--markdown", action="store_true", help="print the table as markdown")
    parser.add_argument("--keep-logs", type=Path, help="copy every component's log here")
    return parser.parse_args(argv)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_exit)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with it ignored
    bins = binaries()
    kubelet = bins.path("kubelet")
    components = args.only or list(COMPONENTS)
    if "kubelet" in components and not kubelet.exists():
        say(f"no {kubelet}: run `PYTHONPATH=tests .venv/bin/python -m harness build --peers`")
        return 2
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    work = Path(tempfile.mkdtemp(prefix="na-bench-"))  # short: containerd's socket is in it
    log_dir = work / "logs"
    cp_root = new_run_dir()
    results: dict[str, m.Figures] = {}
    try:
        with contextlib.ExitStack() as stack:
            say("starting the control plane (with an audit log) and containerd")
            plane = stack.enter_context(audited_control_plane(bins, root=cp_root, log_dir=log_dir))
            ctd = stack.enter_context(bench_containerd(work / "rt", log_dir=log_dir))
            bench = Bench(plane=plane, ctd=ctd, kubelet=kubelet, work=work, log_dir=log_dir)
            for component in components:
                results[component] = bench.run(component, minutes=args.minutes, warmup=args.warmup)
                say(f"{component}: done")
            print(report(results, bench, markdown=args.markdown, started=started))
    finally:
        if args.keep_logs:
            shutil.copytree(log_dir, args.keep_logs, dirs_exist_ok=True)
        shutil.rmtree(cp_root, ignore_errors=True)
        unmount_and_remove(work)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        say("interrupted; everything started was stopped and removed")
        sys.exit(130)

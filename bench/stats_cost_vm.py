"""Stats collection cost with 110 pods: nodeagent vs the reference kubelet, in the VM (issue 14).

    PYTHONPATH=tests .venv/bin/python bench/stats_cost_vm.py [--window 120] [--settle 60]
        [--pods 110] [--memory-mb 6144] [--only nodeagent|kubelet] [--markdown] [--out FILE]

Run it under the VM tier's lock (``flock /tmp/nodeagent-vm.lock ...``) after ``make packages``.
The CI host is cgroup v1, so the comparison runs in the VM tier's Debian 12 guest (cgroup v2,
systemd, containerd 1.6, 2 vCPUs under TCG): the guest boots with ``--memory-mb`` (110 pods'
shims need more than the tier's 2 GiB), its containerd gets the locally built busybox and pause
images, and the guest's node joins a control plane started on the host (``harness.vm.pods``).

Then, for nodeagent (the ``.deb`` under test, its packaged config with the service proxy off and
the cluster CA as ``clientCAFile``) and then the reference kubelet (the harness-built v1.36.3
binary copied into the guest and run as the transient unit ``kubelet-bench.service``, configured
like nodeagent: the same cgroup driver, ``maxPods`` 110, eviction and image GC defaults, x509 +
webhook authentication and webhook authorization, the same shutdown grace periods, housekeeping
at cAdvisor's default 10 s) as the node in turn:

1. ``idle``: Ready with no pods; settle, then measure over ``--window`` seconds;
2. ``pods``: ``--pods`` BestEffort pods (pause + busybox ``sleep``) all Running; settle, measure;
3. ``pods+summary``: the same, while ``/stats/summary`` is read every 10 s (as metrics-server
   does) with a client certificate.

Each measurement runs inside the guest (``stats_cost_guest.py``): the unit cgroup's
``cpu.stat`` ``usage_usec`` at both ends of the window, the main PID's RSS every 5 s, and for
nodeagent the per-pass figures of its ``nodeagent_stats_housekeeping_*`` metrics. The pods are
deleted and the agent stopped before the next one starts. Prints a table (``--markdown``: the
rows ``docs/benchmarks.md`` holds) and writes every raw figure as JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from harness.build import ensure_built
from harness.controlplane import ControlPlane, new_run_dir, start_control_plane
from harness.versions import cache_dir, load_versions
from harness.vm import Machine, deb_depends, ensure_image, recipe_for, tier
from harness.vm.guest import GUEST_DIR
from harness.vm.pods import NODE, join_node, node_ready, pod_manifest
from harness.vm.rootfs import GUEST_IP

REPO = Path(__file__).resolve().parents[1]
COMPONENTS = ("nodeagent", "kubelet")
PHASES = ("idle", "pods", "pods+summary")
BENCH_DIR = f"{GUEST_DIR}/stats-bench"
GUEST_SCRIPT = f"{BENCH_DIR}/stats_cost_guest.py"
CA = f"{BENCH_DIR}/ca.crt"
READER_CERT, READER_KEY = f"{BENCH_DIR}/reader.crt", f"{BENCH_DIR}/reader.key"
NODEAGENT_CONFIG = f"{BENCH_DIR}/nodeagent.yaml"
KUBELET_BIN = "/usr/local/bin/kubelet"
KUBELET_CONFIG = f"{BENCH_DIR}/kubelet.yaml"
KUBELET_ROOT = "/var/lib/kubelet"
UNITS = {"nodeagent": "nodeagent.service", "kubelet": "kubelet-bench.service"}
LABEL = "stats-cost-bench"
SUMMARY_EVERY = 10.0
PYSPY = f"{BENCH_DIR}/py-spy"
PROFILE = f"{BENCH_DIR}/profile.txt"
PROFILE_UNIT = "stats-bench-py-spy.service"
PUT_CHUNK = 16 << 20


def say(message: str) -> None:
    stamp = datetime.datetime.now(datetime.UTC).strftime("%H:%M:%S")
    print(f">>> {stamp} {message}", file=sys.stderr, flush=True)


# --- configuration: what each agent runs with --------------------------------------------------


def shutdown_grace() -> list[dict[str, int]]:
    """The packaged nodeagent config's shutdown groups, given to the kubelet too."""
    sample = yaml.safe_load((REPO / "nodeagent" / "config" / "sample.yaml").read_text())
    return list(sample["kubelet"]["shutdownGracePeriodByPodPriority"])


def nodeagent_config() -> dict[str, Any]:
    """The packaged config, with the service proxy off (the kubelet runs without kube-proxy) and
    the cluster CA for x509 client authentication (the summary reader's certificate)."""
    config: dict[str, Any] = yaml.safe_load((REPO / "nodeagent/config/sample.yaml").read_text())
    kubelet = config.setdefault("kubelet", {})
    kubelet["authentication"] = {"x509": {"clientCAFile": CA}}
    kubelet["resolvConf"] = ""  # the guest has no DNS; pods use dnsPolicy Default
    config["proxy"] = {"enabled": False}
    return config


def kubelet_config(driver: str) -> dict[str, Any]:
    """The kubelet's KubeletConfiguration, as close to ``nodeagent_config`` as the fields go;
    everything else (maxPods 110, evictionHard, image GC, cAdvisor's 10 s housekeeping) is the
    kubelet's default, which nodeagent shares."""
    v = load_versions()
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": "unix:///run/containerd/containerd.sock",
        "cgroupDriver": driver,
        "failSwapOn": False,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": CA},
        },
        "authorization": {"mode": "Webhook"},
        "clusterDomain": v.cluster_domain,
        "resolvConf": "",
        "shutdownGracePeriodByPodPriority": [
            {
                "priority": g["priority"],
                "shutdownGracePeriodSeconds": g["shutdownGracePeriodSeconds"],
            }
            for g in shutdown_grace()
        ],
    }


# --- the guest ----------------------------------------------------------------------------------


def put_large(vm: Machine, path: str, data: bytes, mode: int) -> None:
    """Copy a large file (the kubelet: 60 MB) in chunks, then join them in the guest."""
    parts = []
    for i in range(0, len(data), PUT_CHUNK):
        part = f"{path}.part{i // PUT_CHUNK:03d}"
        vm.put(part, data[i : i + PUT_CHUNK], timeout=300)
        parts.append(part)
    vm.check(f"cat {' '.join(parts)} > {path}.new && chmod {mode:o} {path}.new && "
             f"mv {path}.new {path} && rm -f {' '.join(parts)}")  # fmt: skip


def cgroup_driver(vm: Machine) -> str:
    """The driver nodeagent learned from containerd (which pod hierarchy it made)."""
    return "systemd" if vm.run("test -d /sys/fs/cgroup/kubepods.slice").rc == 0 else "cgroupfs"


def measure(vm: Machine, component: str, seconds: float, *, summary: bool) -> dict[str, Any]:
    argv = [
        "python3", GUEST_SCRIPT, "--unit", UNITS[component], "--seconds", str(seconds),
        "--cert", READER_CERT, "--key", READER_KEY,
    ]  # fmt: skip
    if summary:
        argv += ["--summary-every", str(SUMMARY_EVERY)]
    done = vm.run(argv, timeout=seconds + 180)
    if done.rc != 0 or not done.stdout.strip():
        raise RuntimeError(f"measuring {component} failed (rc {done.rc}): {done.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def pod_counts(plane: ControlPlane) -> dict[str, int]:
    pods = plane.get_json("pods", "-n", "default", "-l", f"app={LABEL}")["items"]
    counts: dict[str, int] = {}
    for pod in pods:
        phase = pod.get("status", {}).get("phase", "?")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def run_pods(plane: ControlPlane, count: int, *, timeout: float) -> float:
    """Create ``count`` pods at once; wait until all are Running; return the seconds it took."""
    items = []
    for i in range(count):
        pod = pod_manifest(f"stats-{i:03d}", command=["sleep", "86400"], grace=2,
                           spec={"dnsPolicy": "Default"})  # fmt: skip
        pod["metadata"]["labels"] = {"app": LABEL}
        items.append(pod)
    started = time.monotonic()
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": items}))  # fmt: skip
    last = ""
    while True:
        counts = pod_counts(plane)
        if counts.get("Running", 0) == count:
            return time.monotonic() - started
        if (line := json.dumps(counts, sort_keys=True)) != last:
            say(f"pods: {line}")
            last = line
        if counts.get("Failed") or time.monotonic() - started > timeout:
            raise RuntimeError(f"not all {count} pods Running after "
                               f"{time.monotonic() - started:.0f}s: {counts}")  # fmt: skip
        time.sleep(5)


def delete_pods(vm: Machine, plane: ControlPlane, *, timeout: float = 300) -> float | None:
    """Delete the pods; wait until they and their cgroups are gone. On a timeout (seen once with
    nodeagent under TCG: every pod still Terminating 6 min after its Killing Event) the pods are
    force-deleted from the API and None returned: the next agent kills what is left as pods no
    API object owns, and the run goes on."""
    started = time.monotonic()
    plane.kubectl("delete", "pods", "-n", "default", "-l", f"app={LABEL}", "--wait=false")
    while (
        pod_counts(plane)
        or vm.run(
            "find /sys/fs/cgroup/kubepods* -mindepth 1 -maxdepth 3 -type d "
            "\\( -name 'pod*' -o -name '*-pod*' \\) | grep -q ."
        ).rc
        == 0
    ):
        if time.monotonic() - started > timeout:
            say(f"pods or their cgroups still there after {timeout:.0f}s: {pod_counts(plane)}")
            plane.kubectl("delete", "pods", "-n", "default", "-l", f"app={LABEL}",
                          "--grace-period=0", "--force", "--wait=false")  # fmt: skip
            return None
        time.sleep(5)
    return time.monotonic() - started


def wait_ready(plane: ControlPlane, vm: Machine, unit: str, timeout: float = 300) -> float:
    started = time.monotonic()
    while not node_ready(plane, NODE):
        if time.monotonic() - started > timeout:
            journal = vm.run(f"journalctl -u {unit} --no-pager -n 40").stdout
            raise RuntimeError(
                f"node {NODE} not Ready with {unit} after {timeout:.0f}s:\n{journal}"
            )
        time.sleep(2)
    return time.monotonic() - started


def sleep_checking(vm: Machine, unit: str, seconds: float) -> None:
    time.sleep(seconds)
    if vm.run(f"systemctl is-active --quiet {unit}").rc != 0:
        journal = vm.run(f"journalctl -u {unit} --no-pager -n 40").stdout
        raise RuntimeError(f"{unit} is not active:\n{journal}")


# --- the run -------------------------------------------------------------------------------------


@contextlib.contextmanager
def control_plane(work: Path) -> Iterator[ControlPlane]:
    root = new_run_dir()
    plane = start_control_plane(
        binaries=ensure_built(peers=True, quiet=True), root=root, log_dir=work / "control-plane"
    )
    try:
        yield plane
    finally:
        plane.stop()


def prepare_guest(vm: Machine, plane: ControlPlane) -> None:
    vm.put(GUEST_SCRIPT, (REPO / "bench" / "stats_cost_guest.py").read_bytes())
    vm.put(CA, plane.ca_path.read_bytes())
    vm.put(READER_CERT, plane.pki.admin.cert.read_bytes())
    vm.put(READER_KEY, plane.pki.admin.key.read_bytes(), mode=0o600)
    vm.put(NODEAGENT_CONFIG, yaml.safe_dump(nodeagent_config()).encode())


def phases(
    vm: Machine, plane: ControlPlane, component: str, args: argparse.Namespace, out: dict[str, Any]
) -> None:
    unit = UNITS[component]
    record = out.setdefault(component, {})

    def save() -> None:
        if args.out:
            Path(args.out).write_text(json.dumps(out, indent=1) + "\n")

    sleep_checking(vm, unit, args.settle)
    say(f"{component}: measuring idle ({args.window:.0f}s)")
    record["idle"] = measure(vm, component, args.window, summary=False)
    save()
    say(f"{component}: creating {args.pods} pods")
    record["startup_seconds"] = run_pods(plane, args.pods, timeout=args.pod_timeout)
    say(f"{component}: {args.pods} pods Running after {record['startup_seconds']:.0f}s; settling")
    sleep_checking(vm, unit, args.settle)
    say(f"{component}: measuring with {args.pods} pods ({args.window:.0f}s)")
    record["pods"] = measure(vm, component, args.window, summary=False)
    save()
    say(f"{component}: measuring with {args.pods} pods and /stats/summary every 10s")
    record["pods+summary"] = measure(vm, component, args.window, summary=True)
    save()
    if component == "nodeagent" and args.profile:
        say(f"nodeagent: py-spy for {args.profile:.0f}s, /stats/summary every 10s")
        record["profiled"] = profile(vm, args.profile, Path(args.profile_out))
        save()
    say(f"{component}: deleting the pods")
    record["delete_seconds"] = delete_pods(vm, plane)
    if record["delete_seconds"] is None:
        record["delete_journal"] = vm.run(f"journalctl -u {unit} --no-pager -n 200").stdout
    save()


def profile(vm: Machine, seconds: float, save_to: Path) -> dict[str, Any]:
    """py-spy (copied from the dev venv: a static binary) samples the agent while the summary
    reader runs; the raw stacks go to ``save_to`` and the hottest frames are printed."""
    pyspy = Path(sys.executable).with_name("py-spy")
    if not pyspy.exists():
        raise SystemExit(f"{pyspy} missing: pip install -r requirements/dev.txt")
    put_large(vm, PYSPY, pyspy.read_bytes(), 0o755)
    pid = vm.check("systemctl show -p MainPID --value nodeagent").strip()
    vm.check(["systemd-run", f"--unit={PROFILE_UNIT}", "--property=Restart=no", PYSPY, "record",
              "-p", pid, "-d", str(int(seconds)), "-r", "50", "-f", "raw", "--nolineno",
              "-o", PROFILE])  # fmt: skip
    measured = measure(vm, "nodeagent", seconds, summary=True)
    deadline = time.monotonic() + 120
    while vm.run(f"systemctl is-active --quiet {PROFILE_UNIT}").rc == 0:
        if time.monotonic() > deadline:
            raise RuntimeError("py-spy did not finish")
        time.sleep(2)
    save_to.write_bytes(vm.get(PROFILE))
    say(f"py-spy raw stacks in {save_to}\n{hot_frames(save_to.read_text())}")
    return measured


def hot_frames(raw: str, top: int = 25) -> str:
    """The frames holding the most samples, inclusive and self, from py-spy's raw output."""
    inclusive: dict[str, int] = {}
    own: dict[str, int] = {}
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        for frame in set(frames):
            inclusive[frame] = inclusive.get(frame, 0) + n
        own[frames[-1]] = own.get(frames[-1], 0) + n
    lines = [f"{total} samples"]
    for title, table in (("inclusive", inclusive), ("self", own)):
        lines.append(f"-- {title}")
        for frame, n in sorted(table.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"{n / max(total, 1) * 100:6.1f}%  {frame}")
    return "\n".join(lines)


def start_kubelet(vm: Machine, plane: ControlPlane, driver: str) -> None:
    binary = ensure_built(peers=True, quiet=True).path("kubelet")
    say(f"copying the kubelet ({binary.stat().st_size >> 20} MiB) into the guest")
    put_large(vm, KUBELET_BIN, binary.read_bytes(), 0o755)
    vm.put(KUBELET_CONFIG, yaml.safe_dump(kubelet_config(driver)).encode())
    vm.check(
        ["systemd-run", f"--unit={UNITS['kubelet']}", "--property=Restart=no", KUBELET_BIN,
         f"--config={KUBELET_CONFIG}", "--kubeconfig=/etc/nodeagent/kubeconfig",
         f"--hostname-override={NODE}", f"--node-ip={GUEST_IP}", f"--root-dir={KUBELET_ROOT}",
         f"--cert-dir={KUBELET_ROOT}/pki"],
    )  # fmt: skip


def run(args: argparse.Namespace, work: Path, out: dict[str, Any]) -> None:
    deb = Path(os.environ["NODEAGENT_DEB"]) if "NODEAGENT_DEB" in os.environ else None
    deb = deb or tier.newest_deb(REPO / "dist")
    if deb is None:
        raise SystemExit("no dist/nodeagent_*_amd64.deb: run `make packages` first")
    image = ensure_image(recipe_for(deb_depends(deb)), cache=cache_dir(), progress=say)
    out |= {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "host": f"{platform.node()} ({os.cpu_count()} cores, {platform.release()})",
        "deb": deb.name,
        "guest": f"{args.memory_mb} MiB, 2 vCPUs (TCG)",
        "window_s": args.window,
        "settle_s": args.settle,
        "pods": args.pods,
    }
    with (
        control_plane(work) as plane,
        Machine(image=image, run_dir=work / "vm", memory_mb=args.memory_mb) as vm,
    ):
        say(f"guest booted in {vm.wait_for_boot():.0f}s; control plane at {plane.server}")
        vm.check(f"mkdir -p {BENCH_DIR}")
        prepare_guest(vm, plane)
        join_node(vm, deb, plane, "--config", NODEAGENT_CONFIG, ready_timeout=300)
        out["kernel"] = vm.check("uname -r").strip()
        out["containerd"] = vm.check("containerd --version").strip()
        driver = cgroup_driver(vm)
        out["cgroup_driver"] = driver
        say(f"nodeagent is node {NODE} (cgroup driver {driver})")
        if args.only in (None, "nodeagent"):
            phases(vm, plane, "nodeagent", args, out)
        vm.check("systemctl stop nodeagent")
        plane.kubectl("delete", "node", NODE, "--wait=true")
        if args.only in (None, "kubelet"):
            start_kubelet(vm, plane, driver)
            out.setdefault("kubelet", {})["ready_seconds"] = wait_ready(plane, vm, UNITS["kubelet"])
            say(f"the kubelet is node {NODE}")
            phases(vm, plane, "kubelet", args, out)
            vm.check(f"systemctl stop {UNITS['kubelet']}")


# --- the report ----------------------------------------------------------------------------------


def row(component: str, phase: str, m: dict[str, Any]) -> dict[str, str]:
    cpu_s = m["cpu_usec"] / 1e6
    per_pass_ms = cpu_s / m["seconds"] * SUMMARY_EVERY * 1000
    rss = m["rss_kib"]
    hk = m.get("housekeeping") or {}
    passes = hk.get("duration_seconds_count", 0)
    reads = m.get("summary_seconds") or []
    return {
        "node": component,
        "phase": phase,
        "cpu s / window": f"{cpu_s:.2f} / {m['seconds']:.0f}",
        "cpu ms per 10 s": f"{per_pass_ms:.0f}",
        "% of a core": f"{cpu_s / m['seconds'] * 100:.2f}",
        "RSS MiB (mean / max)": f"{statistics.mean(rss) / 1024:.1f} / {max(rss) / 1024:.1f}",
        "sampler pass cpu / wall ms": (
            f"{hk['cpu_seconds_total'] / passes * 1000:.0f} / "
            f"{hk['duration_seconds_sum'] / passes * 1000:.0f} ({passes:.0f} passes)"
            if passes
            else "-"
        ),
        "summary read p50 s (KiB)": (
            f"{statistics.median(reads):.2f} ({m['summary_bytes'] >> 10})" if reads else "-"
        ),
    }


def report(out: dict[str, Any], markdown: bool) -> str:
    rows = [row(c, p, out[c][p]) for c in COMPONENTS for p in PHASES if p in out.get(c, {})]
    if not rows:
        return "(nothing measured)"
    keys = list(rows[0])
    lines = [
        f"# {out['date']}  {out['host']}  guest: {out['guest']}, kernel {out.get('kernel')}, "
        f"{out.get('containerd')}, cgroup driver {out.get('cgroup_driver')}",
        f"# {out['pods']} pods, window {out['window_s']:.0f}s after {out['settle_s']:.0f}s "
        f"settling; {out['deb']}",
    ]
    for c in COMPONENTS:
        if "startup_seconds" in out.get(c, {}):
            lines.append(f"# {c}: {out['pods']} pods Running in {out[c]['startup_seconds']:.0f}s")
    if markdown:
        lines.append("| " + " | ".join(keys) + " |")
        lines.append("|" + "---|" * len(keys))
        lines += ["| " + " | ".join(r[k] for k in keys) + " |" for r in rows]
    else:
        widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
        lines.append("  ".join(k.ljust(widths[k]) for k in keys))
        lines += ["  ".join(r[k].ljust(widths[k]) for k in keys) for r in rows]
    lines += derived(out)
    return "\n".join(lines)


def derived(out: dict[str, Any]) -> list[str]:
    """What the pods add over idle, and what one /stats/summary read adds, per node."""

    def ms_per_10s(m: dict[str, Any]) -> float:
        return float(m["cpu_usec"]) / 1000 / m["seconds"] * SUMMARY_EVERY

    lines = []
    for c in COMPONENTS:
        got = out.get(c, {})
        parts = []
        if "idle" in got and "pods" in got:
            extra = ms_per_10s(got["pods"]) - ms_per_10s(got["idle"])
            parts.append(f"{out['pods']} pods add {extra:.0f} ms CPU per 10 s")
        if "pods" in got and "pods+summary" in got and got["pods+summary"]["summary_reads"]:
            m = got["pods+summary"]
            extra_s = float(m["cpu_usec"]) / 1e6 - ms_per_10s(got["pods"]) / 1000 * (
                m["seconds"] / SUMMARY_EVERY
            )
            parts.append(
                f"one /stats/summary read adds {extra_s / m['summary_reads'] * 1000:.0f} ms"
            )
        if parts:
            lines.append(f"# {c}: " + "; ".join(parts))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--window", type=float, default=120.0, help="seconds per measurement")
    parser.add_argument("--settle", type=float, default=60.0, help="seconds before measuring")
    parser.add_argument("--pods", type=int, default=110)
    parser.add_argument("--pod-timeout", type=float, default=1200.0)
    parser.add_argument("--memory-mb", type=int, default=6144, help="guest memory")
    parser.add_argument("--only", choices=COMPONENTS)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument(
        "--profile", type=float, default=0.0, help="after measuring, py-spy nodeagent this long"
    )
    parser.add_argument("--profile-out", default="stats-cost-vm-profile.txt")
    parser.add_argument("--out", help="write the raw figures (JSON) here as they come")
    parser.add_argument("--report", help="only print the table of an earlier --out file")
    args = parser.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text()), args.markdown))
        return 0
    out: dict[str, Any] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="stats-cost-vm-") as tmp:
            run(args, Path(tmp), out)
    finally:
        if "date" in out:
            print(report(out, args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Stats collection cost with 110 pods: nodeagent vs the reference kubelet, in the VM.

    PYTHONPATH=tests .venv/bin/python bench/stats_cost_vm.py [--window 120] [--settle 60]
        [--pods 110] [--memory-mb 6144] [--only nodeagent|kubelet] [--skip-summary]
        [--delete-timeout 600] [--markdown] [--out FILE]

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

What the JSON keeps besides the figures, so that a run that goes wrong can be explained after
the guest is gone: the status (phase, reason, message, container states) of any pod that ended
Failed or was not Running in time, with the agent's journal (the kubelet's too); the host's and
the guest's load per window; and for the deletion a time series every 10 s (API pods, those
reported stopped, pod cgroups left, cgroups still holding a process) with the agent's and
containerd's journals since the delete.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


def bench_pods(plane: ControlPlane) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = plane.get_json("pods", "-n", "default", "-l", f"app={LABEL}")[
        "items"
    ]
    return items


def pod_counts(plane: ControlPlane) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in bench_pods(plane):
        phase = pod.get("status", {}).get("phase", "?")
        counts[phase] = counts.get(phase, 0) + 1
    return counts


def warning_events(plane: ControlPlane) -> dict[str, int]:
    """The pods' Warning Events so far, counted by reason and message (pod names and UIDs
    left out, so that one cause is one line): why a container had to be created again."""
    counts: dict[str, int] = {}
    for event in plane.get_json("events", "-n", "default")["items"]:
        if event.get("type") != "Warning":
            continue
        message = re.sub(r"stats-\d+|[0-9a-f]{8}-[0-9a-f-]{27}|[0-9a-f]{64}", "*",
                         event.get("message", ""))  # fmt: skip
        key = f"{event.get('reason')}: {message[:300]}"
        counts[key] = counts.get(key, 0) + int(event.get("count") or 1)
    return counts


def pod_detail(pod: dict[str, Any]) -> dict[str, Any]:
    """What the API says of a pod that is not simply Running: its phase, reason and message,
    and each container's state and last state (a Failed pod's cause)."""
    status = pod.get("status", {})
    return {
        "name": pod["metadata"]["name"],
        "phase": status.get("phase"),
        "reason": status.get("reason"),
        "message": status.get("message"),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message")}
            for c in status.get("conditions", [])
            if c.get("status") != "True"
        ],
        "containers": [
            {k: c.get(k) for k in ("name", "ready", "restartCount", "state", "lastState")}
            for c in status.get("containerStatuses", [])
        ],
    }


class PodsNotRunning(RuntimeError):
    def __init__(self, message: str, pods: list[dict[str, Any]]) -> None:
        super().__init__(message)
        self.pods = pods


def run_pods(plane: ControlPlane, count: int, *, timeout: float, record: dict[str, Any]) -> float:
    """Create ``count`` pods at once; wait until all are Running (or each Running or Failed:
    the Failed ones' status goes to ``record["failed_pods"]`` and the run goes on with the
    rest); return the seconds it took. ``restartPolicy: Always``, as a node's long-running
    pods: a container that fails to start under TCG (a runtime call past its deadline) is
    restarted, not left Failed; the restarts are counted in ``record["restarts"]``."""
    items = []
    for i in range(count):
        pod = pod_manifest(f"stats-{i:03d}", command=["sleep", "86400"], grace=2,
                           restart_policy="Always", spec={"dnsPolicy": "Default"})  # fmt: skip
        pod["metadata"]["labels"] = {"app": LABEL}
        items.append(pod)
    started = time.monotonic()
    plane.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                        "items": items}))  # fmt: skip
    last = ""
    while True:
        pods = bench_pods(plane)
        counts: dict[str, int] = {}
        for pod in pods:
            phase = pod.get("status", {}).get("phase", "?")
            counts[phase] = counts.get(phase, 0) + 1
        elapsed = time.monotonic() - started
        settled = counts.get("Running", 0) + counts.get("Failed", 0)
        if settled == count and len(pods) == count:
            record["restarts"] = sum(
                c.get("restartCount", 0)
                for pod in pods
                for c in pod.get("status", {}).get("containerStatuses", [])
            )
            record["startup_warnings"] = warning_events(plane)
            failed = [pod_detail(p) for p in pods if p.get("status", {}).get("phase") == "Failed"]
            if failed:
                record["failed_pods"] = failed
                say(f"pods: {counts}; Failed: {json.dumps(failed)[:2000]}")
            return elapsed
        if (line := json.dumps(counts, sort_keys=True)) != last:
            say(f"pods: {line} after {elapsed:.0f}s")
            last = line
        if elapsed > timeout:
            stuck = [pod_detail(p) for p in pods if p.get("status", {}).get("phase") != "Running"]
            raise PodsNotRunning(f"not all {count} pods Running after {elapsed:.0f}s: {counts}",
                                 stuck)  # fmt: skip
        time.sleep(5)


GUEST_PODS_LEFT = r"""
import glob, os
pods = procs = 0
for root in glob.glob("/sys/fs/cgroup/kubepods*"):
    for d, subdirs, files in os.walk(root):
        name = os.path.basename(d)
        if name.startswith("pod") or "-pod" in name:
            pods += 1
        if not subdirs and "cgroup.procs" in files:
            with open(os.path.join(d, "cgroup.procs")) as f:
                procs += bool(f.read().strip())
print(pods, procs)
"""


def delete_sample(vm: Machine, plane: ControlPlane, started: float) -> dict[str, Any]:
    """One point of the deletion's time series: the API's pods (all, and those whose
    containers are no longer ready: the agent reported them stopped) and, in the guest, the
    pod cgroups left and the leaf cgroups that still hold a process."""
    pods = bench_pods(plane)
    stopped = sum(
        1
        for p in pods
        if not any(c.get("ready") for c in p.get("status", {}).get("containerStatuses", []))
    )
    left = vm.run(["python3", "-c", GUEST_PODS_LEFT], timeout=60).stdout.split()
    return {
        "t": round(time.monotonic() - started, 1),
        "api_pods": len(pods),
        "api_not_ready": stopped,
        "pod_cgroups": int(left[0]) if left else None,
        "cgroups_with_procs": int(left[1]) if len(left) > 1 else None,
    }


def journal(vm: Machine, unit: str, *, since: str | None = None, lines: int = 400) -> str:
    argv = ["journalctl", "-u", unit, "--no-pager", "-o", "short-precise", "-n", str(lines)]
    if since is not None:
        argv += ["--since", since]
    return str(vm.run(argv, timeout=120).stdout)


def delete_pods(
    vm: Machine, plane: ControlPlane, unit: str, record: dict[str, Any], *, timeout: float
) -> None:
    """Delete the pods; wait until they and their cgroups are gone, sampling every 10 s
    (``record["delete_series"]``: API pods, those reported stopped, pod cgroups, cgroups with a
    process). The agent's and containerd's journals since the delete are kept
    (``delete_journal``, ``delete_containerd``). On a timeout (seen once with nodeagent under
    TCG: every pod still ``1/1 Terminating`` 6 min after its Killing Event) the pods are
    force-deleted from the API and ``delete_seconds`` is None: the next agent kills what is
    left as pods no API object owns, and the run goes on."""
    since = "@" + vm.check("date +%s").strip()
    started = time.monotonic()
    plane.kubectl("delete", "pods", "-n", "default", "-l", f"app={LABEL}", "--wait=false")
    series: list[dict[str, Any]] = record.setdefault("delete_series", [])
    record["delete_seconds"] = None
    while True:
        point = delete_sample(vm, plane, started)
        series.append(point)
        say(f"deleting: {point}")
        if point["api_pods"] == 0 and point["pod_cgroups"] == 0:
            record["delete_seconds"] = time.monotonic() - started
            break
        if time.monotonic() - started > timeout:
            say(f"pods or their cgroups still there after {timeout:.0f}s: {point}")
            plane.kubectl("delete", "pods", "-n", "default", "-l", f"app={LABEL}",
                          "--grace-period=0", "--force", "--wait=false")  # fmt: skip
            break
        time.sleep(10)
    record["delete_journal"] = journal(vm, unit, since=since, lines=3000)
    record["delete_containerd"] = journal(vm, "containerd", since=since, lines=6000)


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

    try:
        measured(vm, plane, component, args, record=record, save=save)
    except Exception as e:
        # what the guest knew when it failed: the agent's journal (the kubelet's too), the
        # pods that were not Running with their reasons, the disk and memory left
        record["error"] = str(e)
        if isinstance(e, PodsNotRunning):
            record["not_running"] = e.pods
        try:
            record["journal"] = journal(vm, unit, lines=3000)
            record["guest_df_free"] = vm.run("df -h / /var/lib; free -m").stdout
        except Exception as guest:  # the guest itself may be what failed
            record["journal"] = f"(not read: {guest})"
        save()
        raise
    if record.get("failed_pods"):
        record["journal"] = journal(vm, unit, lines=3000)
    save()


def measured(
    vm: Machine,
    plane: ControlPlane,
    component: str,
    args: argparse.Namespace,
    *,
    record: dict[str, Any],
    save: Callable[[], None],
) -> None:
    unit = UNITS[component]

    def window(phase: str, *, summary: bool) -> None:
        load = os.getloadavg()[0]
        record[phase] = measure(vm, component, args.window, summary=summary)
        record[phase]["host_load1"] = [round(load, 2), round(os.getloadavg()[0], 2)]
        save()

    sleep_checking(vm, unit, args.settle)
    say(f"{component}: measuring idle ({args.window:.0f}s)")
    window("idle", summary=False)
    say(f"{component}: creating {args.pods} pods")
    record["startup_seconds"] = run_pods(plane, args.pods, timeout=args.pod_timeout,
                                         record=record)  # fmt: skip
    save()
    say(f"{component}: {args.pods} pods settled after {record['startup_seconds']:.0f}s; settling")
    sleep_checking(vm, unit, args.settle)
    say(f"{component}: measuring with {args.pods} pods ({args.window:.0f}s)")
    window("pods", summary=False)
    if not args.skip_summary:
        say(f"{component}: measuring with {args.pods} pods and /stats/summary every 10s")
        window("pods+summary", summary=True)
    if component == "nodeagent" and args.profile:
        say(f"nodeagent: py-spy for {args.profile:.0f}s, /stats/summary every 10s")
        record["profiled"] = profile(vm, args.profile, Path(args.profile_out))
        save()
    say(f"{component}: deleting the pods")
    delete_pods(vm, plane, unit, record, timeout=args.delete_timeout)
    say(f"{component}: pods gone after {record['delete_seconds']}s")


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
        got = out.get(c, {})
        if "startup_seconds" in got:
            failed = len(got.get("failed_pods", []))
            lines.append(
                f"# {c}: {out['pods'] - failed} pods Running"
                + (f" ({failed} Failed)" if failed else "")
                + f" in {got['startup_seconds']:.0f}s, {got.get('restarts', 0)} restarts; "
                + (
                    f"deleted in {got['delete_seconds']:.0f}s"
                    if got.get("delete_seconds") is not None
                    else "deletion not finished"
                    if "delete_series" in got
                    else "not deleted"
                )
            )
        if got.get("error"):
            lines.append(f"# {c}: FAILED: {got['error'][:300]}")
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
    parser.add_argument(
        "--delete-timeout", type=float, default=600.0, help="then the pods are force-deleted"
    )
    parser.add_argument(
        "--skip-summary", action="store_true", help="no pods+summary window (a shorter run)"
    )
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

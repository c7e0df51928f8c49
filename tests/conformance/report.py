"""Turn the suite's JUnit report into results and the two-column table of docs/conformance.md.

    results = parse_junit(Path("junit.xml"))          # one Result per spec
    save_run(Path("docs/conformance/nodeagent.json"), run)   # compact, committed
    text = render(nodeagent=run_a, kubelet=run_b)       # markdown

A spec's group is its SIG label and the first Describe text (the Title-Case words after the
label, up to the first lower-case word or bracket tag), e.g. ``[sig-node] Pods`` or
``[sig-network] Networking Granular Checks: Pods``. A failure's "why" is the first meaningful
line of its failure message; `explain` maps it (and the spec name) to the missing capability and
the issue it belongs to.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

PEERS = ("nodeagent", "kubelet")
SUITE_NODES = (
    "[SynchronizedBeforeSuite]",
    "[SynchronizedAfterSuite]",
    "[BeforeSuite]",
    "[AfterSuite]",
    "[ReportBeforeSuite]",
    "[ReportAfterSuite]",
    "[DeferCleanup (Suite)]",
)
WHY_MAX = 150


@dataclass(frozen=True, slots=True)
class Result:
    name: str  # the spec's full text, without ginkgo's "[It] " prefix
    status: str  # passed | failed | skipped
    why: str = ""  # failed or skipped: one line
    seconds: float = 0.0

    @property
    def group(self) -> str:
        return group_of(self.name)


@dataclass(frozen=True, slots=True)
class Run:
    """One `make conformance` run: which node, when, where, and each spec's result."""

    peer: str
    started: str
    machine: str
    commit: str
    seconds: float
    procs: int
    results: tuple[Result, ...] = field(default_factory=tuple)
    note: str = ""
    nodes: int = 1


def column(peer: str, nodes: int) -> str:
    """The name of a run's saved results: ``nodeagent``, ``kubelet-3nodes``, ..."""
    return peer if nodes <= 1 else f"{peer}-{nodes}nodes"


def group_of(name: str) -> str:
    match = re.match(r"(\[sig-[\w-]+\])\s+(.*)", name)
    if not match:
        return "(no SIG label)"
    words = []
    for word in match.group(2).split():
        if word.startswith("[") or (not word[:1].isupper() and not word[:1].isdigit()):
            break
        words.append(word)
        if len(words) == 4:
            break
    return f"{match.group(1)} {' '.join(words)}".rstrip()


def one_line(message: str) -> str:
    """The first line of a failure message that says something, shortened."""
    for raw in message.splitlines():
        line = " ".join(raw.split())
        if not line or line in {"[FAILED]", "failed", "[TIMEDOUT]"} or line.startswith("In ["):
            continue
        line = re.sub(r"^\[(FAILED|TIMEDOUT|PANICKED)\]\s*", "", line)
        return line if len(line) <= WHY_MAX else line[: WHY_MAX - 1] + "…"
    return "(no message)"


NOT_RUN = "not run: the run's time limit (ginkgo --timeout) came first"


def parse_junit(path: Path, *, selected: set[str] | None = None) -> list[Result]:
    """Every selected spec of a ginkgo JUnit report (suite set-up nodes left out). Ginkgo marks
    both the specs its focus left out and the ones an interrupted run never started as plain
    "skipped"; `selected` (the names a dry run selects) tells the second kind apart."""
    root = ET.parse(path).getroot()
    results = []
    for case in root.iter("testcase"):
        name = case.get("name", "")
        suite_node = name.startswith(SUITE_NODES)
        if suite_node and case.find("failure") is None and case.find("error") is None:
            continue  # suite set-up that worked; one that failed is every spec's cause
        name = re.sub(r"^\[It\]\s+", "", name)
        status = case.get("status", "")
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        why = ""
        if failure is not None or error is not None or status in {"failed", "timedout", "panicked"}:
            node = failure if failure is not None else error
            text = "" if node is None else (node.get("message") or node.text or "")
            status, why = "failed", one_line(text)
        elif skipped is not None or status in {"skipped", "pending"}:
            message = skipped.get("message", "") if skipped is not None else ""
            if message.strip() in {"skipped", "pending", ""}:
                if selected is None or name not in selected:
                    continue  # not selected (focus/skip); a spec skipped at run time says why
                message = NOT_RUN
            status, why = "skipped", one_line(message)
        else:
            status = "passed"
        results.append(
            Result(name=name, status=status, why=why, seconds=float(case.get("time", 0)))
        )
    return results


def save_run(path: Path, run: Run) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(asdict(run), indent=1, sort_keys=True) + "\n")


def load_run(path: Path) -> Run | None:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    data["results"] = tuple(Result(**r) for r in data["results"])
    return Run(**data)


# Why a spec fails on nodeagent: (pattern on "<name> <why>", capability, issue). First match wins.
# The third field is the issue that tracks the missing capability; a capability that exists
# (hosts file, ephemeral containers, probes, ...) has no entry: its failure is "not yet
# classified".
EXPLANATIONS: tuple[tuple[str, str, str], ...] = (
    (r"Interrupted by|suite timeout|\binterrupted\b", "not finished: the run's time limit", "-"),
    (
        r"Sample API Server|sample-apiserver",
        "image not available here: the sample-apiserver and etcd images the spec deploys",
        "16",
    ),
    (
        r"ImageVolume",
        "this host's containerd 1.6 (Debian 12) does not implement CRI Mount.image (containerd"
        ' 2.1 does): it refuses the container, "failed to mkdir """',
        "28",
    ),
    (
        r"expected client IP to be preserved",
        "harness (flannel VXLAN): a node's own traffic to its NodePort is masqueraded, as"
        " kube-proxy masquerades it, to the address of the route to the endpoint's node,"
        " flannel.1's, not the node IP the spec expects (a host-gw CNI would give the node IP)",
        "26",
    ),
    (
        r"ErrImagePull|ImagePullBackOff|image not available|alpine-nnp",
        "image not available here",
        "16",
    ),
    (
        r"data-1=value-1",
        "harness: Debian's busybox 1.35 `sh` drops env names that are not identifiers (data-1)",
        "16",
    ),
    (
        r"is not a shared mount",
        "the node's root dir is not a shared mount (the kubelet makes it rshared at start), so "
        "a CSI plugin's Bidirectional hostPath mounts of it are refused",
        "27",
    ),
    (
        r'volume source "(persistentVolumeClaim|csi|ephemeral)" is not supported|'
        r"not found in the list of registered CSI drivers|driver name \S+ not found",
        "persistent volumes and CSI on the node",
        "27",
    ),
    (
        r"can't open '/rootfs/proc/1/ns/mnt': Permission denied|"
        r"(\[Driver: local\]|PersistentVolumes-local ).* command terminated with exit code 1$|"
        r"error checking directory \S+ on node \S+: command terminated with exit code 1",
        "this host: PID 1's mount namespace cannot be entered, not even by root on the host (the "
        "e2e hostexec pods' nsenter into it fails)",
        "-",
    ),
    (r"stat /bin/bash", "harness: the agnhost image had no /bin/bash (added after this run)", "16"),
    (r"RTNETLINK answers: Operation not supported", "this host's kernel (no dummy driver)", "-"),
    (
        r"\[sig-network\] DNS",
        "harness: the images' `dig` is a stand-in over busybox nslookup (no +search, +tcp, "
        "CNAME/SRV answers as BIND's dig prints them)",
        "16",
    ),
    (r"SysctlForbidden|not launch unsafe", "admission of unsafe sysctls (SysctlForbidden)", "16"),
    (
        r"service\.kubernetes\.io/headless",
        "service proxy: EndpointSlices labelled service.kubernetes.io/headless are not ignored",
        "16",
    ),
    (r"evicted pods|ephemeral.storage", "eviction for local ephemeral storage limits", "14"),
    (
        r"override timeoutGracePeriodSeconds when StartupProbe",
        "a sidecar's startup-probe kill used the pod's grace period (fixed after this run)",
        "16",
    ),
    (r"evict", "eviction", "14"),
    (r"cgroup v2|\bPSI\b|pressure|swap|QoS|OOM", "resources on cgroup v2", "14"),
    (r"logs?\b|exec|Exec|attach|port-?forward|10250", "the kubelet API on :10250", "12"),
)


def explain(result: Result) -> tuple[str, str]:
    """(capability, issue) for a failure; ('not yet classified', '?') if nothing matches."""
    text = f"{result.name} {result.why}"
    for pattern, capability, issue in EXPLANATIONS:
        if re.search(pattern, text):
            return capability, issue
    return "not yet classified", "?"


def _counts(results: Iterable[Result]) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for r in results:
        counts[r.status] = counts.get(r.status, 0) + 1
    return counts


def _cell(counts: dict[str, int] | None) -> str:
    if counts is None:
        return "-"
    return f"{counts['passed']} / {counts['failed']} / {counts['skipped']}"


def _run_line(run: Run | None, peer: str, nodes: int = 1, make_args: str = "") -> str:
    if run is None:
        command = "make conformance" + (f" NODES={nodes}" if nodes > 1 else "")
        command += (" PEER=kubelet" if peer == "kubelet" else "") + make_args
        return f"- **{peer}**: no run recorded yet (`{command}`)"
    c = _counts(run.results)
    not_run = sum(1 for r in run.results if r.why == NOT_RUN)
    minutes = run.seconds / 60
    line = (
        f"- **{peer}**: {run.started}, commit `{run.commit}`, {run.machine}; "
        f"{len(run.results)} specs, {c['passed']} passed, {c['failed']} failed, "
        f"{c['skipped']} skipped (of which {not_run} not run: time limit) in {minutes:.0f} min "
        f"with {run.procs} ginkgo processes"
    )
    return line + (f" ({run.note})" if run.note else "")


def render(
    *,
    nodeagent: Run | None,
    kubelet: Run | None,
    selection: str = "",
    nodes: int = 1,
    title: str = "",
    make_args: str = "",
) -> str:
    runs = {"nodeagent": nodeagent, "kubelet": kubelet}
    by_peer = {
        peer: ({r.name: r for r in run.results} if run else {}) for peer, run in runs.items()
    }
    names = sorted(set(by_peer["nodeagent"]) | set(by_peer["kubelet"]))
    generated = not title
    if not title:
        against = "the reference kubelet" + (f", on {nodes} nodes" if nodes > 1 else "")
        title = f"# Conformance: the Kubernetes e2e specs against nodeagent and {against}"
    out = [title, ""]
    if generated:
        out += ["Generated by `make conformance` (tests/conformance/); do not edit by hand.", ""]
    if selection:
        out += [selection, ""]
    out += [
        _run_line(nodeagent, "nodeagent", nodes, make_args),
        _run_line(kubelet, "kubelet", nodes, make_args),
        "",
    ]

    gap = [
        n
        for n in names
        if by_peer["kubelet"].get(n, Result(n, "")).status == "passed"
        and by_peer["nodeagent"].get(n, Result(n, "")).status == "failed"
    ]
    out += [f"## Pass with the kubelet, fail with nodeagent ({len(gap)})", ""]
    if gap:
        out += ["| spec | why it fails on nodeagent | capability | issue |", "|---|---|---|---|"]
        for n in gap:
            r = by_peer["nodeagent"][n]
            capability, issue = explain(r)
            out.append(f"| {_md(n)} | {_md(r.why)} | {capability} | {issue} |")
    else:
        out.append("None" + ("" if kubelet and nodeagent else " (needs both runs)") + ".")
    out.append("")

    out += ["## Per spec group", ""]
    out += ["Cells are passed / failed / skipped.", ""]
    out += ["| group | selected | nodeagent | kubelet |", "|---|---:|---|---|"]
    groups: dict[str, list[str]] = {}
    for n in names:
        groups.setdefault(group_of(n), []).append(n)
    for group, members in sorted(groups.items()):
        cells = []
        for peer in PEERS:
            rows = [by_peer[peer][n] for n in members if n in by_peer[peer]]
            cells.append(_cell(_counts(rows) if runs[peer] else None))
        out.append(f"| {_md(group)} | {len(members)} | {cells[0]} | {cells[1]} |")
    out.append("")

    for peer in PEERS:
        failed = [
            by_peer[peer][n]
            for n in names
            if by_peer[peer].get(n, Result(n, "")).status == "failed"
        ]
        out += [f"## Failures with {peer} ({len(failed)})", ""]
        if not failed:
            out += ["None." if runs[peer] else "No run recorded.", ""]
            continue
        for group in sorted({r.group for r in failed}):
            out += [f"### {group}", ""]
            for r in (f for f in failed if f.group == group):
                tail = ""
                if peer == "nodeagent":
                    capability, issue = explain(r)
                    tail = f" — {capability} (issue {issue})"
                    other = by_peer["kubelet"].get(r.name)
                    if other is not None and other.status == "failed":
                        tail += "; fails with the kubelet too (this harness or host)"
                out.append(f"- {_md(r.name)}: {_md(r.why)}{tail}")
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


HOW = """\
How: `make conformance` (nodeagent, `make up`'s node) and `make conformance PEER=kubelet` (the
reference kubelet and kube-proxy in nftables mode, built by `make peers`, as the same node on the
same control plane and containerd), e2e.test, ginkgo and agnhost built from the Go module proxy at
KUBERNETES_VERSION (tests/conformance/suite.py). The selection: the `[NodeConformance]` specs and
the `[sig-network]` Services / Networking / DNS specs that are neither `[Serial]`, `[Disruptive]`,
`[Slow]`, `[Flaky]` nor `[Feature:…]`; a spec the suite skips at run time (e.g. "Requires at
least 2 nodes") is counted as skipped.

Images (tests/conformance/images.py, pushed to `make up`'s registry, named through
`KUBE_TEST_REPO_LIST`): agnhost is the module's agnhost binary on the static busybox, with `nc`
built here (tests/conformance/nc) and `curl`, `dig`, `getent`, `wget` as shell stand-ins over
busybox wget/nslookup (`dig +tcp` goes over UDP; `wget -T` becomes `timeout`: the static busybox
1.35 crashes on -T), and Debian's dynamic busybox as its `/bin/sh` (the static one is a
"standalone shell" that runs its own `nc` and `wget` applets before `PATH`);
nginx is busybox `httpd` on :80 under nginx's name; kitten/nautilus are agnhost with their html
files; glibc-dns-testing is busybox with the `dig` and `getent` stand-ins; nonroot is busybox
with USER 1234; pause is the harness's. Any other image fails its pull (ErrImagePull: "image not
available here")."""


STORAGE_TITLE = "# Storage: the `[sig-storage]` specs of the CSI hostpath and in-tree drivers"
STORAGE_HOW = """\
How: `make conformance SELECTION=storage [PEER=kubelet]` (`make conformance` runs it after the
node selection). The selection (tests/conformance/storage.py): the `[sig-storage]` specs of
`[Driver: csi-hostpath]` (the suite deploys the driver itself, per test, in the test's
namespace, with paths under the node's root dir given as `--kubelet-root-dir`) and of the
in-tree `local`, `hostPath` and `hostPathSymlink` drivers and `PersistentVolumes-local`,
neither `[Serial]`, `[Disruptive]`, `[Slow]`, `[Flaky]` nor `[Feature:…]` but
`[Feature:VolumeAttributesClass]`. Most storage-suite patterns a driver does not support are
skipped by the suite at run time and counted as skipped.

The driver's images are made here (harness/csi_hostpath.py) and pushed under the names the
suite's manifest gives (`sig-storage/<name>:<tag>`): external-provisioner, -attacher, -resizer
and -snapshotter built from their modules at the pins of tests/harness/versions.env (so
`csi-provisioner:v6.1.1` is v6.4.0, `csi-attacher:v4.11.0` is v4.13.0, `csi-resizer:v2.1.0` is
v2.2.0); `hostpathplugin`, `csi-node-driver-registrar` and `livenessprobe` are the harness's
stand-in (tests/harness/csi-hostpath/: the modules are not served here); its block volumes
are sparse files on loop devices, so the csi-hostpath `(block volmode)` patterns run too.

On this machine most of the failures are the same for both peers and are not the node's: the
suite's hostexec pods set up local volumes and look at the node's mounts with `nsenter
--mount=/rootfs/proc/1/ns/mnt`, and PID 1 here (the sandbox's `process_api`) cannot be entered,
not even by root on the host (`nsenter: cannot open /proc/1/ns/mnt: Permission denied`). A node
in a PID namespace of its own, as kind's nodes are, would let those specs run; not built yet."""


MULTI_NODES = 3
HOW_MULTI = """\
How: `make conformance NODES=3` and `make conformance NODES=3 PEER=kubelet` build a 3-node cluster
of the run's own (tests/conformance/multinode.py: the multi-node tests' cluster, nodes in network,
mount and UTS namespaces, flannel VXLAN between them, each node's podCIDR routed from the control
plane's host as a control plane in the pod network, CoreDNS), with nodeagent on every node, or the
reference kubelet and kube-proxy (nftables mode) in every node's namespaces instead. The
selection: the whole `[Conformance]` set plus the node and network specs above, none
`[Serial]`, `[Disruptive]` or `[Flaky]` (`[Slow]` and `[Feature:…]` only when `[Conformance]`).
Images as above."""


def main(argv: Sequence[str]) -> int:
    """``python -m conformance.report <docs dir>``: re-render conformance.md from the saved runs."""
    docs = Path(argv[0] if argv else "docs")
    runs = {peer: load_run(docs / "conformance" / f"{peer}.json") for peer in PEERS}
    text = render(nodeagent=runs["nodeagent"], kubelet=runs["kubelet"], selection=HOW)
    multi = {
        peer: load_run(docs / "conformance" / f"{column(peer, MULTI_NODES)}.json") for peer in PEERS
    }
    section = render(
        nodeagent=multi["nodeagent"],
        kubelet=multi["kubelet"],
        selection=HOW_MULTI,
        nodes=MULTI_NODES,
    )
    # one level down, under a heading of its own
    demoted = "\n".join(
        "#" + line if line.startswith("#") else line for line in section.splitlines()
    )
    text += "\n" + demoted + "\n"
    storage = {peer: load_run(docs / "conformance" / f"{peer}-storage.json") for peer in PEERS}
    text += "\n" + render(
        nodeagent=storage["nodeagent"],
        kubelet=storage["kubelet"],
        selection=STORAGE_HOW,
        title=STORAGE_TITLE,
        make_args=" SELECTION=storage",
    )
    (docs / "conformance.md").write_text(text)
    return 0

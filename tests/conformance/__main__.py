"""``make conformance [PEER=kubelet] [SELECTION=node|storage]``: the Kubernetes e2e node and
network specs, then the storage specs (`conformance.storage`), against this machine's ``make up``
cluster, with nodeagent or the reference kubelet + kube-proxy as the node.

    PYTHONPATH=tests .venv/bin/python -m conformance build
    PYTHONPATH=tests .venv/bin/python -m conformance run [--peer kubelet] [--procs 8] [--ci]
                                                         [--selection node|storage|all]
                                                         [--nodes N]
                                                         [--focus REGEX] [--no-docs]
    PYTHONPATH=tests .venv/bin/python -m conformance report      # re-render docs/conformance.md

``run`` builds the suite (`conformance.suite`, cached), brings the cluster up if needed
(`harness.up`), makes the e2e images and pushes them to the cluster's registry
(`conformance.images`), points the suite at them with ``KUBE_TEST_REPO_LIST``, runs ginkgo in
parallel, keeps the suite's JUnit report in ``<cache>/conformance/<peer>/junit_01.xml`` (a full
run) or in ``<cache>/conformance/<peer>-<focus|ci>/<UTC time>/`` (a focused or CI run: each has
its own, none touches the full run's; the storage selection's directories are named
``<peer>-storage``), saves a compact copy of the results as ``docs/conformance/<peer>.json``
(``<peer>-storage.json``) and re-renders ``docs/conformance.md`` from both peers' saved
runs (`conformance.report`). ``--ci`` runs only the specs listed in
``tests/conformance/ci-specs.txt`` (the ones that pass with nodeagent today) and touches no docs;
nor does ``--focus``. ``--nodes N`` (N > 1) runs the node selection on a cluster of N nodes of
the run's own (`conformance.multinode`), saved as ``<peer>-<N>nodes``; the storage selection
runs on ``make up``'s node only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from harness import csi_hostpath
from harness import up as harness_up
from harness.controlplane import ControlPlane, attach
from harness.versions import cache_dir, load_versions

from conformance import images, report, storage, suite

REPO = Path(__file__).resolve().parents[2]
CI_SPECS = Path(__file__).with_name("ci-specs.txt")
# The selection, the specs that judge a node: node conformance, and the network Services /
# Networking / DNS specs; nothing serial, disruptive, slow, flaky or behind a feature.
FOCUS = r"\[NodeConformance\]|\[sig-network\] (Services|Networking|DNS) "
SKIP = r"\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]|\[Feature:[^\]]*\]"
# On several nodes (NODES=3): the whole [Conformance] set (what a cluster must pass to be
# certified, [Slow] ones included) plus the node and network specs above; nothing serial,
# disruptive or flaky. Ginkgo's label filter keeps [Slow] and [Feature:...] specs out unless
# they are [Conformance] (RE2 has no look-ahead to say so in --skip).
MULTI_FOCUS = r"\[Conformance\]|" + FOCUS
MULTI_SKIP = r"\[Serial\]|\[Disruptive\]|\[Flaky\]"
MULTI_LABELS = "Conformance || (!Slow && !/Feature:.*/)"
# Most of a spec's time is waiting (pods starting, a service answering, the 2-5 min timeouts of
# the failing specs), not CPU: 12 processes keep the 2 cores busy without starving the node
# (containerd, runc and the node agent share them); the first run used 10. Each process
# is an idle e2e.test (~100 MB) most of the time.
DEFAULT_PROCS = 12
SUITE_TIMEOUT = "100m"


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def machine() -> str:
    mem_kib = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kib = int(line.split()[1])
    load = Path("/proc/loadavg").read_text().split()[0]
    return (
        f"{platform.node()}, {os.cpu_count()} cores, {mem_kib // 1024 // 1024} GiB, "
        f"kernel {platform.release()}, load {load} at start"
    )


def commit() -> str:
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "nodeagent"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return head + ("-dirty" if dirty else "")


def listed_specs(path: Path = CI_SPECS) -> list[str]:
    """The spec names of a ci-specs.txt (one full text a line; # comments); none if absent."""
    if not path.is_file():
        return []
    return [
        line.strip()
        for line in path.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]


def ci_focus(path: Path = CI_SPECS) -> str:
    """A focus regexp matching exactly the specs listed in `path` (one full text a line).
    Ginkgo matches it against the suite's description, a space and the spec's text
    ("Kubernetes e2e suite [sig-node] ..."): a name is anchored at the end and after a space,
    not at the start (a ``^`` there matched nothing, and the CI subset ran 0 specs)."""
    names = listed_specs(path)
    if not names:
        raise SystemExit(f"{path} lists no specs")
    return r"(?:^|\s)(?:" + "|".join(re.escape(n) for n in names) + ")$"


def write_ci_list(
    budget_seconds: float, procs: int, path: Path = CI_SPECS, docs: Path = REPO / "docs"
) -> int:
    """Write the CI subset: the specs already listed (the subset grows, never shrinks: a spec
    added from a focused run stays), then those that passed in nodeagent's saved run (and with
    the kubelet, when that run exists), fastest first, while their summed time / procs fits the
    budget."""
    runs = {p: report.load_run(docs / "conformance" / f"{p}.json") for p in report.PEERS}
    nodeagent = runs["nodeagent"]
    if nodeagent is None:
        raise SystemExit("no saved nodeagent run: `make conformance` first")
    kubelet_passed = (
        {r.name for r in runs["kubelet"].results if r.status == "passed"}
        if runs["kubelet"]
        else None
    )
    passed = sorted(
        (r for r in nodeagent.results if r.status == "passed"),
        key=lambda r: (r.seconds, r.name),
    )
    chosen = listed_specs(path)
    seconds = {r.name: r.seconds for r in nodeagent.results}
    total = sum(seconds.get(name, 0.0) for name in chosen)
    for r in passed:
        if r.name in chosen or (kubelet_passed is not None and r.name not in kubelet_passed):
            continue
        if (total + r.seconds) / procs > budget_seconds:
            break
        chosen.append(r.name)
        total += r.seconds
    header = [
        "# The CI subset (`make conformance-ci`): specs that passed with nodeagent (and with",
        "# the kubelet) in the saved runs of docs/conformance/ or in a focused run, fastest",
        f"# first, ~{budget_seconds / 60:.0f} min of spec time at {procs} processes; it grows,",
        "# never shrinks (ci-list keeps every listed spec).",
        "# Regenerate: python -m conformance ci-list. One full spec text a line.",
    ]
    path.write_text("\n".join([*header, *sorted(set(chosen))]) + "\n")
    say(f"{len(chosen)} specs in {path} ({total / 60:.1f} min of spec time)")
    return 0


KEEP_NARROW_RUNS = 20


def run_dir(root: Path, peer: str, kind: str, now: datetime.datetime) -> Path:
    """A new, empty directory for one run's JUnit report, ginkgo log and (kubelet) node state.

    A full run (``kind`` "full") owns ``<root>/<peer>``, emptied first: the docs are made from
    it. A focused or CI run gets ``<root>/<peer>-<kind>/<UTC time>`` of its own, so that two of
    them, or one after a full run, do not overwrite each other's reports; the oldest are pruned
    beyond the last KEEP_NARROW_RUNS."""
    if kind == "full":
        work = root / peer
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        return work
    parent = root / f"{peer}-{kind}"
    parent.mkdir(parents=True, exist_ok=True)
    stamp = now.strftime("%Y%m%dT%H%M%SZ")
    for n in range(1000):
        work = parent / (stamp if n == 0 else f"{stamp}-{n}")
        try:
            work.mkdir()
        except FileExistsError:
            continue
        break
    else:
        raise SystemExit(f"no free run directory under {parent}")
    older = sorted(d for d in parent.iterdir() if d.is_dir() and d != work)
    for old in older[: max(0, len(older) - (KEEP_NARROW_RUNS - 1))]:
        shutil.rmtree(old, ignore_errors=True)
    return work


def suite_timeout(value: str, now: datetime.datetime) -> str:
    """ginkgo's --timeout: as given ("90m"), or "until-HH:MM" (UTC): the minutes left until then
    less 3 for the report (at least 5)."""
    if not value.startswith("until-"):
        return value
    hour, minute = (int(x) for x in value.removeprefix("until-").split(":"))
    end = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    return f"{max(5, int((end - now).total_seconds() // 60) - 3)}m"


def dry_run(
    e2e_test: Path,
    *,
    focus: str,
    work: Path,
    env: dict[str, str],
    skip: str = SKIP,
    labels: str = "",
) -> set[str]:
    """The names of the specs the selection picks (a ginkgo dry run: nothing runs)."""
    argv = [
        str(e2e_test),
        "--ginkgo.dry-run",
        f"--ginkgo.focus={focus}",
        f"--ginkgo.skip={skip}",
        *([f"--ginkgo.label-filter={labels}"] if labels else []),
        "--provider=skeleton",
        f"--report-dir={work}",
    ]
    subprocess.run(argv, env=env, capture_output=True, check=False, cwd=work.parent)
    return {r.name for r in report.parse_junit(work / "junit_01.xml") if r.status == "passed"}


SELECTIONS = ("node", "storage")


def saved_run_path(docs: Path, column: str, selection: str) -> Path:
    """Where a full run of `selection` is saved (the node selection keeps its old name)."""
    suffix = "" if selection == "node" else f"-{selection}"
    return docs / "conformance" / f"{column}{suffix}.json"


@contextlib.contextmanager
def _cluster(args: argparse.Namespace, work: Path) -> Iterator[tuple[ControlPlane, str]]:
    """(control plane, registry host) of the run's cluster, with the run's peer as its nodes:
    `make up`'s single node, or a multi-node cluster of the run's own."""
    if args.nodes > 1:
        from conformance.multinode import run_cluster

        with run_cluster(nodes=args.nodes, peer=args.peer, work=work) as c:
            yield c.plane, c.registry_host
        return
    if harness_up.up() != 0:
        raise SystemExit("`make up` failed")
    directory = harness_up.state_dir()
    state = harness_up.read_state(directory)
    if not state or "registry" not in (state.get("runtime") or {}):
        raise SystemExit("the cluster from `make up` has no registry/runtime: cannot run the suite")
    plane = attach(state["control_plane"])
    node: AbstractContextManager[object] = nullcontext()
    if args.peer == "kubelet":
        from conformance.peer import kubelet_node

        node = kubelet_node(plane, state, directory=directory, work=work)
    try:
        with node:
            yield plane, state["runtime"]["registry"]
    finally:
        if args.peer == "kubelet":
            harness_up.write_state(directory, state)


def run(args: argparse.Namespace) -> int:
    selections = SELECTIONS if args.selection == "all" else (args.selection,)
    if (args.ci or args.nodes > 1) and selections != ("node",):
        # the CI subset is the node selection's; the storage selection runs on make up's node
        selections = ("node",)
    worst = 0
    for selection in selections:
        worst = max(worst, run_selection(args, selection))
    return worst


def selection_args(
    args: argparse.Namespace,
    selection: str,
    *,
    built: suite.Suite,
    module: Path,
    registry_host: str,
    work: Path,
    env: dict[str, str],
) -> tuple[str, str, str, list[str]]:
    """The focus, skip, label filter and extra e2e.test flags of a selection; the storage
    selection also pushes the CSI hostpath driver's images under the suite's names."""
    if selection != "storage":
        multi = args.nodes > 1
        focus = ci_focus() if args.ci else (args.focus or (MULTI_FOCUS if multi else FOCUS))
        skip, labels = (MULTI_SKIP, MULTI_LABELS) if multi else (SKIP, "")
        return focus, skip, labels, []
    focus = args.focus or storage.FOCUS
    names = storage.selected_names(
        built.e2e_test, focus=focus, skip=storage.BASE_SKIP, work=work / "pre-dry-run", env=env
    )
    pushed = storage.push_images(registry_host, module, work / "csi-images")
    say(f"{len(pushed)} CSI hostpath images pushed under the suite's names")
    from conformance.peer import KUBELET_ROOT

    if args.peer == "kubelet":
        root = KUBELET_ROOT
    else:
        state: dict[str, Any] = harness_up.read_state(harness_up.state_dir()) or {}
        root = csi_hostpath.node_root_dir(Path(state["node"]["config"]))
    return focus, storage.skip_for(names), "", [f"--kubelet-root-dir={root}"]


def run_selection(args: argparse.Namespace, selection: str) -> int:
    started_wall = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    at_commit = commit()  # the code the node runs: taken before the run, not after
    load_at_start = machine()
    built = suite.ensure_suite()
    module = suite.module_source(load_versions())
    column = report.column(args.peer, args.nodes)
    kind = "ci" if args.ci else "focus" if args.focus else "full"
    run_name = column if selection == "node" else f"{column}-{selection}"
    work = run_dir(cache_dir() / "conformance", run_name, kind, datetime.datetime.now(datetime.UTC))
    say(f"this run's reports ({selection} selection): {work}")
    with _cluster(args, work) as (plane, registry_host):
        pushed = images.push_all(registry_host, agnhost=built.agnhost, nc=built.nc, module=module)
        say(f"{len(pushed)} e2e images pushed to {registry_host}")
        repo_list = work / "repo-list.yaml"
        repo_list.write_text(images.repo_list(registry_host))
        env = dict(
            os.environ, KUBE_TEST_REPO_LIST=str(repo_list), KUBECONFIG=str(plane.admin_kubeconfig)
        )
        focus, skip, labels, extra = selection_args(
            args, selection, built=built, module=module, registry_host=registry_host,
            work=work, env=env,
        )  # fmt: skip
        argv = [
            str(built.ginkgo),
            f"--procs={args.procs}",
            f"--timeout={suite_timeout(args.timeout, datetime.datetime.now(datetime.UTC))}",
            "--no-color",
            "--silence-skips",
            f"--output-dir={work}",
            f"--focus={focus}",
            f"--skip={skip}",
            *([f"--label-filter={labels}"] if labels else []),
            str(built.e2e_test),
            "--",
            f"--kubeconfig={plane.admin_kubeconfig}",
            "--provider=skeleton",
            "--disable-log-dump",
            "--dump-logs-on-failure=false",
            f"--e2e-output-dir={work}",
            f"--report-dir={work}",  # junit_01.xml: the suite's own, compact JUnit
            "--minStartupPods=0",
            *extra,
        ]
        say(
            f"running the e2e suite ({selection}) with {args.peer} on {args.nodes} node(s)"
            f" ({args.procs} processes); log {work}/ginkgo.log"
        )
        started = time.monotonic()
        with (work / "ginkgo.log").open("w") as log:
            done = subprocess.run(argv, env=env, stdout=log, stderr=subprocess.STDOUT, check=False)
        seconds = time.monotonic() - started
    junit = work / "junit_01.xml"
    selected = dry_run(
        built.e2e_test, focus=focus, work=work / "dry-run", env=env, skip=skip, labels=labels
    )
    if not junit.is_file():
        print("\n".join((work / "ginkgo.log").read_text().splitlines()[-40:]))
        raise SystemExit(f"ginkgo exited {done.returncode} without a JUnit report")
    results = report.parse_junit(junit, selected=selected)
    counts = {s: sum(1 for r in results if r.status == s) for s in ("passed", "failed", "skipped")}
    say(
        f"{len(results)} specs in {seconds / 60:.1f} min: {counts['passed']} passed, "
        f"{counts['failed']} failed, {counts['skipped']} skipped (JUnit {junit})"
    )
    if args.ci:
        return 0 if counts["failed"] == 0 and results else 1
    if args.focus or args.no_docs:
        return 0
    record = report.Run(
        peer=args.peer,
        started=started_wall,
        machine=load_at_start,
        commit=at_commit,
        seconds=round(seconds),
        procs=args.procs,
        results=tuple(results),
        note=args.note,
        nodes=args.nodes,
    )
    docs = REPO / "docs"
    report.save_run(saved_run_path(docs, column, selection), record)
    report.main([str(docs)])
    say(f"wrote {docs / 'conformance.md'}")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build e2e.test, ginkgo and agnhost (cached)")
    sub.add_parser("report", help="re-render docs/conformance.md from the saved runs")
    ci = sub.add_parser("ci-list", help="write ci-specs.txt from the saved runs")
    ci.add_argument("--budget-minutes", type=float, default=6.0)
    ci.add_argument("--procs", type=int, default=DEFAULT_PROCS)
    r = sub.add_parser("run", help="run the suite against make up's cluster")
    r.add_argument("--peer", choices=report.PEERS, default="nodeagent")
    r.add_argument(
        "--procs", type=int, default=int(os.environ.get("CONFORMANCE_PROCS", DEFAULT_PROCS))
    )
    r.add_argument("--focus", default="", help="a narrower ginkgo focus (docs are not written)")
    r.add_argument("--ci", action="store_true", help="only the specs of ci-specs.txt")
    r.add_argument(
        "--selection",
        choices=(*SELECTIONS, "all"),
        default="all",
        help="node: [NodeConformance] and sig-network; storage: the CSI hostpath and in-tree "
        "local/hostPath drivers' [sig-storage] specs; all: both, one after the other",
    )
    r.add_argument("--no-docs", action="store_true")
    r.add_argument("--timeout", default=SUITE_TIMEOUT, help="ginkgo --timeout for the run")
    r.add_argument("--note", default="", help="a note for the report (e.g. 'machine shared')")
    r.add_argument(
        "--nodes", type=int, default=1, help="N > 1: a cluster of N nodes of the run's own"
    )
    args = parser.parse_args(argv)
    if args.command == "build":
        suite.ensure_suite()
        return 0
    if args.command == "report":
        return report.main([str(REPO / "docs")])
    if args.command == "ci-list":
        return write_ci_list(args.budget_minutes * 60, args.procs)
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

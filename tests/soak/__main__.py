"""`python -m soak run|plan|report` (`make soak`): see the package docstring."""

from __future__ import annotations

import argparse
import random
import re
import shutil
import signal
import sys
import time
from pathlib import Path

from soak.plan import FAULT_KINDS, rounds

DEFAULT_OUT = Path.home() / ".cache" / "nodeagent" / "soak"
ROOT_SIZE = "1g"  # each node's root dir: a tmpfs of its own, to fill to its eviction threshold


def seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([smh]?)", text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"DURATION {text!r}: want 90s, 10m or 1h")
    return float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="soak")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="a soak on a multi-node cluster of its own")
    run.add_argument("--duration", type=seconds, default=seconds("60m"))
    run.add_argument("--nodes", type=int, default=3)
    run.add_argument("--seed", type=int, default=None)
    run.add_argument("--peer", choices=("nodeagent", "kubelet"), default="nodeagent")
    run.add_argument("--faults", default=",".join(FAULT_KINDS))
    run.add_argument("--out", type=Path, default=None)
    plan = sub.add_parser("plan", help="print the rounds a seed gives, without a cluster")
    plan.add_argument("--seed", type=int, required=True)
    plan.add_argument("--nodes", type=int, default=3)
    plan.add_argument("--rounds", type=int, default=10)
    plan.add_argument("--faults", default=",".join(FAULT_KINDS))
    report = sub.add_parser("report", help="render soak.json runs into docs/")
    report.add_argument("runs", type=Path, nargs="+")
    report.add_argument("--docs", type=Path, default=Path("docs"))
    args = parser.parse_args(argv)

    if args.command == "plan":
        kinds = tuple(args.faults.split(","))
        names = [f"node-{i}" for i in range(1, args.nodes + 1)]
        for _, rnd in zip(range(args.rounds), rounds(args.seed, names, kinds=kinds), strict=False):
            print("\n".join(rnd.lines()))
        return 0
    if args.command == "report":
        from soak import report as rep

        print(rep.render(args.runs, args.docs))
        return 0
    return _run(args)


def _raise_exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # so the cluster is torn down on SIGTERM too


def keep_node_logs(source: Path, target: Path) -> None:
    """Copy the nodes' logs (each agent's or kubelet's and kube-proxy's, each containerd's)
    out of the cluster's directory, which its teardown removes: a run's faults are read in
    them afterwards. The agents still run (the cluster stops them after), so a log may lack
    its last lines."""
    try:
        shutil.copytree(source, target, dirs_exist_ok=True)
    except OSError as e:
        print(f">>> the nodes' logs were not kept: {e}", flush=True)


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _raise_exit)
    from harness.testcluster import multinode_cluster

    from soak.peers import peer
    from soak.run import Soak

    kinds = tuple(args.faults.split(","))
    unknown = set(kinds) - set(FAULT_KINDS)
    if unknown:
        print(f"--faults: unknown {sorted(unknown)}; known: {', '.join(FAULT_KINDS)}")
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    out = args.out or DEFAULT_OUT / f"{args.peer}-{time.strftime('%Y%m%dT%H%M%S')}-{seed}"
    out.mkdir(parents=True, exist_ok=True)
    print(f">>> soak seed {seed} (replay: make soak SEED={seed} ...); output in {out}", flush=True)
    with multinode_cluster(count=args.nodes, log_dir=out / "logs", root_size=ROOT_SIZE) as cluster:
        try:
            with peer(args.peer, cluster, out / "peer") as node_peer:
                soak = Soak(
                    cluster=cluster,
                    peer=node_peer,
                    seed=seed,
                    duration=args.duration,
                    out=out,
                    kinds=kinds,
                    say=lambda m: print(m, flush=True),
                )
                soak.run()
        finally:
            keep_node_logs(cluster.log_dir, out / "logs" / "nodes")
    for v in sorted(soak.violations):
        print(f"VIOLATION {v.line()}")
    print(f">>> soak seed {seed}: {len(soak.violations)} violations ({out}/soak.json)")
    return 1 if soak.violations else 0


if __name__ == "__main__":
    sys.exit(main())

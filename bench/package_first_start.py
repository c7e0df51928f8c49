"""The packaged agent's start, with bytecode compiled at install and with none: time to READY.

``.venv/bin/python bench/package_first_start.py [dist/nodeagent_*.deb] [--runs 5]`` (root):
installs the .deb with ``dpkg --root`` into a throwaway root, then, in a private mount
namespace where that root's /opt is /opt/nodeagent's home, starts ``nodeagent run`` in
standalone mode (no kubeconfig, no runtime, proxy off) until it sends ``READY=1`` over
``NOTIFY_SOCKET``, in three ways, interleaved:

- compiled at install: ``python -m compileall`` as postinst runs it (its time is printed), then
  the first start;
- no bytecode: the first start, which compiles and writes ``__pycache__`` itself (files no
  package owns), and the start after it;
- never written (``PYTHONDONTWRITEBYTECODE=1``): every start compiles.

Prints wall and CPU seconds (the agent's utime + stime at READY: far less disturbed by other
load than wall time) per run and their medians. Results: docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = """\
apiVersion: nodeagent.io/v1alpha1
kind: NodeAgentConfiguration
node:
  kubeconfig: {work}/absent
  rootDir: {work}/state
kubelet:
  failSwapOn: false
  failCgroupV1: false
  containerRuntimeEndpoint: unix://{work}/no-runtime.sock
proxy:
  enabled: false
"""
VENV = "/opt/nodeagent"


def time_to_ready(config: Path, *, write_bytecode: bool) -> tuple[float, float]:
    """(wall, cpu) seconds from exec of ``nodeagent run`` to READY=1; then it is stopped."""
    with tempfile.TemporaryDirectory() as d:
        path = f"{d}/notify"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(120)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        env["NOTIFY_SOCKET"] = path
        if not write_bytecode:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        started = time.monotonic()
        argv = [f"{VENV}/bin/nodeagent", "run", "--config", str(config)]
        agent = subprocess.Popen(
            argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            while "READY=1" not in sock.recv(4096).decode().split("\n"):
                pass
            wall = time.monotonic() - started
            fields = Path(f"/proc/{agent.pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        finally:
            agent.terminate()
            agent.wait(30)
            sock.close()
    return wall, cpu


def clean_bytecode() -> None:
    for cache in Path(VENV).rglob("__pycache__"):
        shutil.rmtree(cache, ignore_errors=True)


def measure(config: Path, runs: int) -> dict[str, list[tuple[float, float]]]:
    results: dict[str, list[tuple[float, float]]] = {}
    for _ in range(runs):
        clean_bytecode()
        started = time.monotonic()
        subprocess.run([f"{VENV}/bin/python", "-m", "compileall", "-q", "-j0", f"{VENV}/lib"],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        results.setdefault("compileall at install", []).append((time.monotonic() - started, 0))
        results.setdefault("compiled at install: first start", []).append(
            time_to_ready(config, write_bytecode=True)
        )
        clean_bytecode()
        results.setdefault("no bytecode: first start", []).append(
            time_to_ready(config, write_bytecode=True)
        )
        results.setdefault("no bytecode: second start", []).append(
            time_to_ready(config, write_bytecode=True)
        )
        clean_bytecode()
        results.setdefault("never written: every start", []).append(
            time_to_ready(config, write_bytecode=False)
        )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("deb", nargs="?", type=Path)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--inside", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:  # in the private mount namespace, /opt already bound
        results = measure(args.inside / "config.yaml", args.runs)
        for what, runs in results.items():
            walls = ", ".join(f"{w:.2f}" for w, _ in runs)
            cpus = ", ".join(f"{c:.2f}" for _, c in runs)
            print(f"{what}: wall {walls} (median {statistics.median(w for w, _ in runs):.2f}) s")
            if any(c for _, c in runs):
                print(f"{' ' * len(what)}  cpu  {cpus} (median "
                      f"{statistics.median(c for _, c in runs):.2f}) s")  # fmt: skip
        return 0
    deb = args.deb or max((REPO / "dist").glob("nodeagent_*_amd64.deb"), key=os.path.getmtime)
    work = Path(tempfile.mkdtemp(prefix="nodeagent-first-start-"))
    try:
        root = work / "root"
        for sub in ("info", "updates", "triggers"):
            (root / "var/lib/dpkg" / sub).mkdir(parents=True)
        (root / "var/lib/dpkg/status").touch()
        subprocess.run(
            ["dpkg", f"--root={root}", "--log=/dev/null", "--force-depends",
             "--force-script-chrootless", "-i", str(deb)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )  # fmt: skip
        (work / "config.yaml").write_text(CONFIG.format(work=work))
        print(f"{deb.name}, {args.runs} runs, load average {os.getloadavg()[0]:.1f} at start")
        inner = f'mount --bind "{root}/opt" /opt && exec "$@"'
        return subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", inner, "sh",
             sys.executable, __file__, "--runs", str(args.runs), "--inside", str(work)],
            check=False,
        ).returncode  # fmt: skip
    finally:
        shutil.rmtree(work)


if __name__ == "__main__":
    sys.exit(main())

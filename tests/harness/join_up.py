"""Nodes that join `make up`'s cluster as kubeadm nodes do: `nodeagent join`, then the agent.

- :func:`print_join_command`: what `kubeadm token create --print-join-command` prints, for the
  running `make up` cluster (a new 24 h token each time); `make join-command` prints it.
- :func:`approve_serving_csr`: what an operator does for a node that joined: approve its
  kubelet-serving CSR (the cluster's kubelet configuration asks for `serverTLSBootstrap`, and
  nothing approves those by default); the node's API answers only once it is issued.
- :func:`join_and_start`: one more node: `nodeagent join --no-start` with its own config
  (discovery, the pin, the bootstrap kubeconfig and flags written by the agent's own code),
  then `nodeagent run --config <config> <the flags join wrote>` started, which does TLS
  bootstrap. ``wrap`` prefixes both commands (``ip netns exec <node>``) for a node in a network
  namespace of its own. No credential is copied: the node has only the join command's token
  and CA hash.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from harness import bootstrap, processes
from harness.controlplane import ControlPlane

from nodeagent.join.files import FLAGS_FILE, read_flags_env

JOIN_TIMEOUT = 120.0
DEFAULT_ROOT = "/var/lib/nodeagent"
SERVING_SIGNER = "kubernetes.io/kubelet-serving"


class JoinFailed(RuntimeError):
    """`nodeagent join` refused or failed; the message holds its output."""


def print_join_command(plane: ControlPlane) -> None:
    """As `kubeadm token create --print-join-command` (after making sure the cluster has
    cluster-info and kubeadm's RBAC: a cluster started by an older harness has neither)."""
    plane.apply(bootstrap.tls_bootstrap_rbac())
    plane.publish_cluster_info()
    plane.publish_kubelet_config()
    print(">>> to add a node, run on it (a new 24 h token each time: `make join-command`):")
    print(f"    {plane.join_command()}", flush=True)
    print(
        ">>> then approve its serving certificate (serverTLSBootstrap: the node's API answers "
        "logs/exec once it is issued): kubectl get csr; kubectl certificate approve <name>",
        flush=True,
    )


def approve_serving_csr(
    plane: ControlPlane,
    node: str,
    *,
    timeout: float = 120.0,
    waiting: Callable[[], bool] = lambda: True,
) -> str | None:
    """Approve ``node``'s pending kubelet-serving CSR once it is there, as an operator does with
    `kubectl certificate approve`; the controller-manager then signs it. Returns the CSR's name,
    or None when none came within ``timeout`` or ``waiting()`` turned false (the agent stopped,
    or it has a serving pair already: a node that kept its pair asks for nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        for item in json.loads(plane.kubectl("get", "csr", "-o", "json").stdout)["items"]:
            spec, status = item.get("spec", {}), item.get("status", {})
            if spec.get("signerName") != SERVING_SIGNER:
                continue
            if spec.get("username") != f"system:node:{node}":
                continue
            if not status.get("conditions"):
                name = str(item["metadata"]["name"])
                plane.kubectl("certificate", "approve", name)
                return name
        if not waiting() or time.monotonic() > deadline:
            return None
        time.sleep(1)


def join_and_start(
    join_command: str,
    *,
    config: Path,
    node_name: str,
    log: Path,
    node_ip: str | None = None,
    wrap: Sequence[str] = (),
    detached: bool = False,
) -> tuple[processes.Proc, str]:
    """Join with ``join_command`` (a printed `nodeagent join ...` line) and start the agent;
    returns the agent's process and what `nodeagent join` printed."""
    words = join_command.split()
    if words[:2] != ["nodeagent", "join"]:
        raise ValueError(f"not a nodeagent join command: {join_command!r}")
    agent = [sys.executable, "-m", "nodeagent"]
    argv = [*wrap, *agent, "join", *words[2:], "--config", str(config), "--node-name", node_name]
    if node_ip:
        argv += ["--node-ip", node_ip]
    done = subprocess.run(
        [*argv, "--no-start"], capture_output=True, text=True, timeout=JOIN_TIMEOUT, check=False
    )
    if done.returncode != 0:
        raise JoinFailed(f"nodeagent join for {node_name} failed:\n{done.stdout}{done.stderr}")
    flags = join_flags(config)
    proc = processes.start(
        name=f"nodeagent-{node_name}",
        argv=[*wrap, *agent, "run", "--config", str(config), *flags],
        log=log,
        detached=detached,
    )
    return proc, done.stdout


def join_flags(config: Path) -> tuple[str, ...]:
    """The agent flags join wrote into ``<rootDir>/join-flags.env`` for this config (what
    nodeagent.service passes as ``$NODEAGENT_JOIN_ARGS``); a restart of the agent uses them."""
    root = (yaml.safe_load(config.read_text()).get("node") or {}).get("rootDir") or DEFAULT_ROOT
    return read_flags_env(Path(root) / FLAGS_FILE)

"""The node half of `make up`: nodeagent itself, registered with the node's client certificate.

nodeagent runs detached from the project's venv with a config written under ``<up dir>/node/``
(root dir, kubeconfig, the `up` containerd's endpoint, the cluster DNS) and its log in
``<up dir>/logs/nodeagent.log``. ``ensure`` waits until the Node object exists, so `up` never
reports a node that is not there; ``stop`` sends SIGTERM (the agent stops in order).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml
from harness import join_up, processes
from harness.controlplane import ControlPlane
from harness.versions import load_versions

REGISTER_TIMEOUT = 60.0
PACKAGE = Path(__file__).resolve().parents[2] / "nodeagent"
PROXY_TABLE = "nodeagent"  # nodeagent.proxy.settings.TABLE
SERVICE_DEVICE = "na-svc0"


def route_services_locally(service_cidr: str) -> None:
    """Let this host's own connections reach ClusterIPs. netsafety's `unreachable <service
    CIDR>` route refuses them at connect(), before the proxy's nat-output DNAT could run (a
    real node's default route covers the range instead). Two half-range routes via a local
    device win over it: the DNAT then reroutes to the pod, and a packet no rule DNATs ends on
    that device, which drops it, so nothing leaves the machine. (The device is one end of a
    veth pair whose peer stays down: this kernel has no `dummy` driver.)"""
    net = ipaddress.ip_network(service_cidr)
    subprocess.run(["ip", "link", "del", SERVICE_DEVICE], capture_output=True, check=False)
    _ip("link", "add", SERVICE_DEVICE, "type", "veth", "peer", "name", f"{SERVICE_DEVICE}p")
    _ip("link", "set", SERVICE_DEVICE, "up")
    for half in net.subnets(prefixlen_diff=1):
        _ip("route", "replace", str(half), "dev", SERVICE_DEVICE)


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], capture_output=True, check=True)


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def node_name() -> str:
    """The kubelet's default: the host name, lower-cased."""
    return socket.gethostname().split(".")[0].lower()


def _config(
    directory: Path, *, kubeconfig: Path, runtime_endpoint: str | None, client_ca: Path
) -> Path:
    versions = load_versions()
    kubelet: dict[str, Any] = {
        "clusterDNS": [versions.cluster_dns_ip],
        "clusterDomain": versions.cluster_domain,
        # This machine may be a cgroup v1 host without systemd as PID 1 (see the CRI issue).
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        # The kubelet API as kubeadm sets it up: client certificates from the cluster CA
        # (the apiserver's), bearer tokens through TokenReview, SubjectAccessReview, and a
        # serving certificate from the cluster's kubelet-serving signer (approved below).
        "authentication": {
            "x509": {"clientCAFile": str(client_ca)},
            "webhook": {"enabled": True},
            "anonymous": {"enabled": False},
        },
        "authorization": {"mode": "Webhook"},
        "serverTLSBootstrap": True,
    }
    if runtime_endpoint:
        kubelet["containerRuntimeEndpoint"] = runtime_endpoint
    config = {
        "apiVersion": "nodeagent.io/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "node": {"kubeconfig": str(kubeconfig), "rootDir": str(directory / "root")},
        "kubelet": kubelet,
        # The node's service proxy programs this host's `ip nodeagent` table (`make down`
        # deletes it): ClusterIPs and NodePorts work from the host and from the pods.
        "proxy": {"clusterCIDR": versions.cluster_cidr, "serviceCIDR": versions.service_cidr},
    }
    path = directory / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _alive(record: dict[str, Any] | None) -> bool:
    if not record:
        return False
    return processes.is_running(record["pid"], binary=record["argv0"])


def code_stamp(package: Path = PACKAGE) -> str:
    """What identifies the agent's code: every module's path, size and mtime. A node started
    from other code is restarted by the next `make up` (and so by `make conformance`, whose
    record names the tree's commit)."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(package)} {info.st_size} {info.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


def ensure(
    record: dict[str, Any] | None,
    *,
    plane: ControlPlane,
    directory: Path,
    runtime_endpoint: str | None,
) -> dict[str, Any]:
    stamp = code_stamp()
    if record and _alive(record):
        if record.get("code") == stamp:
            say(f"nodeagent already running as node {record['name']} (pid {record['pid']})")
            return record
        say(f"nodeagent (pid {record['pid']}) runs other code than this tree's: restarting it")
    stop(record)
    name = node_name()
    node_dir = directory / "node"
    node_dir.mkdir(parents=True, exist_ok=True)
    config = _config(
        node_dir,
        kubeconfig=plane.node_kubeconfig(name),
        runtime_endpoint=runtime_endpoint,
        client_ca=plane.ca_path,
    )
    route_services_locally(load_versions().service_cidr)
    argv = [sys.executable, "-m", "nodeagent", "run", "--config", str(config)]
    proc = processes.start(
        name="nodeagent", argv=argv, log=directory / "logs" / "nodeagent.log", detached=True
    )
    record = {
        "name": name,
        "pid": proc.pid,
        "argv0": argv[0],
        "config": str(config),
        "code": stamp,
    }
    say(f"nodeagent started as node {name} (pid {proc.pid}, log {proc.log})")
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while True:
        got = plane.kubectl("get", "node", name, "-o", "json", check=False)
        if got.returncode == 0:
            break
        if not proc.alive() or time.monotonic() > deadline:
            stop(record)
            raise RuntimeError(f"nodeagent did not register node {name}:\n{proc.tail()}")
        time.sleep(0.5)
    ready = {c["type"]: c for c in json.loads(got.stdout)["status"].get("conditions", [])}.get(
        "Ready", {}
    )
    say(
        f"node {name} registered; Ready={ready.get('status', 'Unknown')}"
        + (f" ({ready.get('message')})" if ready.get("status") != "True" else "")
    )
    approve_serving_csr(plane, name, proc, issued=node_dir / "root" / "pki" / SERVING_PAIR)
    return record


SERVING_PAIR = "kubelet-server-current.pem"


def approve_serving_csr(
    plane: ControlPlane, name: str, proc: processes.Proc, *, issued: Path
) -> None:
    """Approve the node's kubelet-serving CSR (no controller approves those) once it is
    there; the controller-manager then signs it and the node starts serving HTTPS. A node
    that kept its issued pair from an earlier run asks for nothing."""
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while not issued.exists():
        listing = json.loads(plane.kubectl("get", "csr", "-o", "json").stdout)
        for item in listing.get("items", []):
            spec, status = item.get("spec", {}), item.get("status", {})
            if (
                spec.get("signerName") == "kubernetes.io/kubelet-serving"
                and spec.get("username") == f"system:node:{name}"
                and not status.get("conditions")
            ):
                csr = item["metadata"]["name"]
                plane.kubectl("certificate", "approve", csr)
                say(f"approved the node's serving certificate request {csr}")
                return
            if (
                spec.get("signerName") == "kubernetes.io/kubelet-serving"
                and spec.get("username") == f"system:node:{name}"
                and status.get("certificate")
            ):
                return  # an earlier run's, still in use
        if not proc.alive() or time.monotonic() > deadline:
            say(f"no serving certificate request from node {name}: kubectl logs/exec will fail")
            return
        time.sleep(0.5)


def stop(record: dict[str, Any] | None) -> None:
    """Stop the agent, then remove its service rules: stopping leaves them in the kernel on
    purpose (a restart must not open a window without them); `down` means gone."""
    if record:
        processes.stop_pid(record["pid"], binary=record["argv0"], timeout=10.0)
        subprocess.run(["ip", "link", "del", SERVICE_DEVICE], capture_output=True, check=False)
        for family in ("ip", "ip6"):
            subprocess.run(
                ["nft", "delete", "table", family, PROXY_TABLE], capture_output=True, check=False
            )


# --- the other nodes of a multi-node cluster ----------------------------------------------------


def node_config(
    *,
    directory: Path,
    runtime_endpoint: str,
    cgroup_root: str,
    client_ca: Path,
) -> Path:
    """The config of a node of a multi-node cluster (`harness.multinode`) before it joins: its
    root dir, runtime and cgroup root, its static pod directory (``<directory>/manifests``, as
    a kubeadm node's /etc/kubernetes/manifests; empty unless a test writes a manifest there)
    and where TLS bootstrap will put its kubeconfig. The
    node's name and IP are not in it: `nodeagent join --node-name/--node-ip` writes them into
    the flags file (`join_flags`), as a kubeadm node's flags go to kubeadm-flags.env."""
    path = _config(
        directory,
        kubeconfig=directory / "root" / "kubeconfig",
        runtime_endpoint=runtime_endpoint,
        client_ca=client_ca,
    )
    config = yaml.safe_load(path.read_text())
    config["kubelet"]["cgroupRoot"] = cgroup_root
    manifests = directory / "manifests"
    manifests.mkdir(exist_ok=True)
    config["kubelet"]["staticPodPath"] = str(manifests)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def agent_argv(config: Path, *, enter: list[str]) -> list[str]:
    """The joined agent's command line: its config and the flags `nodeagent join` wrote (what
    nodeagent.service runs, `$NODEAGENT_JOIN_ARGS` from the flags file)."""
    return [
        *enter,
        sys.executable,
        "-m",
        "nodeagent",
        "run",
        "--config",
        str(config),
        *join_up.join_flags(config),
    ]


def join_node(
    plane: ControlPlane,
    *,
    join_command: str,
    name: str,
    node_ip: str,
    enter: list[str],
    directory: Path,
    runtime_endpoint: str,
    cgroup_root: str,
    log: Path,
    detached: bool,
) -> processes.Proc:
    """Join node `name` to `plane`'s cluster with `join_command` (the printed `nodeagent join`
    line: a bootstrap token and the CA's hash, nothing else) run inside the node (`enter`),
    start its agent there and wait until its Node exists, then approve its serving certificate
    (no controller approves kubelet-serving CSRs; kubeadm leaves that to the operator too).

    `nodeagent join` verifies cluster-info, writes the bootstrap kubeconfig and the flags file;
    the agent does TLS bootstrap (its client CSR is auto-approved by the controller-manager).
    Its output goes to `<log dir>/join-<name>.log`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    config = node_config(
        directory=directory,
        runtime_endpoint=runtime_endpoint,
        cgroup_root=cgroup_root,
        client_ca=plane.ca_path,
    )
    join_log = log.with_name(f"join-{name}.log")
    try:
        proc, joined = join_up.join_and_start(
            join_command,
            config=config,
            node_name=name,
            node_ip=node_ip,
            log=log,
            wrap=enter,
            detached=detached,
        )
    except join_up.JoinFailed as e:
        join_log.write_text(f"{e}\n")
        raise
    join_log.write_text(joined)
    deadline = time.monotonic() + REGISTER_TIMEOUT
    while plane.kubectl("get", "node", name, check=False).returncode != 0:
        if not proc.alive() or time.monotonic() > deadline:
            processes.stop_pid(proc.pid, binary=None, popen=proc.popen)
            raise RuntimeError(f"nodeagent did not register node {name}:\n{proc.tail()}")
        time.sleep(0.5)
    approve_serving_csr(plane, name, proc, issued=directory / "root" / "pki" / SERVING_PAIR)
    return proc

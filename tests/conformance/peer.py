"""The node of a conformance run: nodeagent (``make up``'s) or the reference kubelet + kube-proxy.

For ``PEER=kubelet`` the run stops ``make up``'s nodeagent (its service rules go with it), removes
the pods' sandboxes it left in containerd, and starts the harness-built kubelet and kube-proxy
(``make peers``) as the same node name, on the same control plane and containerd, configured as
``make up`` configures nodeagent: the node client certificate, cgroupfs on this cgroup v1 host,
no swap check, the cluster DNS, x509 + webhook authentication and webhook authorization on
:10250 with a serving certificate from the kubelet-serving signer (approved here), and
kube-proxy in nftables mode. Eviction and image GC thresholds are lowered (this shared disk is
fuller than the kubelet's defaults allow; nodeagent does not evict). When the run ends, both are
stopped, what the kubelet changed on the host is put back, and nodeagent starts again.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from harness import node_up, processes
from harness.build import ensure_built
from harness.containerd import unmount_and_remove
from harness.controlplane import ControlPlane
from harness.hoststate import HostState
from harness.versions import load_versions

READY_TIMEOUT = 120.0
# The kubelet's --root-dir: short, as /var/lib/kubelet is. Plugin registration sockets live in
# <root>/plugins_registry/<driver>-reg.sock, and a unix socket path has at most 107 bytes: under
# the run's report directory (~/.cache/nodeagent/conformance/kubelet-storage/kubelet-root) the
# e2e suite's per-test driver names overflowed it, and the kubelet's dial failed with EINVAL.
KUBELET_ROOT = Path("/var/lib/nodeagent-conformance-kubelet")


def say(message: str) -> None:
    print(f">>> {message}", flush=True)


def kubelet_config(*, endpoint: str, ca: Path, root: Path) -> dict[str, Any]:
    v = load_versions()
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "containerRuntimeEndpoint": endpoint,
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "failSwapOn": False,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca)},
        },
        "authorization": {"mode": "Webhook"},
        "serverTLSBootstrap": True,
        "clusterDomain": v.cluster_domain,
        "clusterDNS": [v.cluster_dns_ip],
        "resolvConf": "/etc/resolv.conf",
        "oomScoreAdj": 0,  # no CAP_SYS_RESOURCE here: it could not lower its own score
        "podLogsDir": str(root / "pod-logs"),
        "volumePluginDir": str(root / "volume-plugins"),
        "evictionHard": {
            "memory.available": "1Mi",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
    }


def kube_proxy_config(*, kubeconfig: Path, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "nftables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": node,
        "clusterCIDR": load_versions().cluster_cidr,
        "detectLocalMode": "ClusterCIDR",
        "nodePortAddresses": ["primary"],
        "oomScoreAdj": 0,
        "conntrack": {"maxPerCore": 0, "min": 0},
    }


def remove_sandboxes(containerd_socket: Path) -> int:
    """Stop and remove every pod sandbox the previous node left over CRI (a node does not clean
    up when it stops, by design: a restart must find its pods). Returns how many."""
    import grpc

    from cri_protos.runtime.v1 import api_pb2, api_pb2_grpc

    with grpc.insecure_channel(f"unix://{containerd_socket}") as channel:
        # the generated grpc stub module has no annotations (committed output of grpcio-tools)
        stub = api_pb2_grpc.RuntimeServiceStub(channel)  # type: ignore[no-untyped-call]  # generated stubs are untyped
        listed = stub.ListPodSandbox(api_pb2.ListPodSandboxRequest(), timeout=60)
        for sandbox in listed.items:
            stub.StopPodSandbox(
                api_pb2.StopPodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=120
            )
            stub.RemovePodSandbox(
                api_pb2.RemovePodSandboxRequest(pod_sandbox_id=sandbox.id), timeout=120
            )
    return len(listed.items)


@contextlib.contextmanager
def kubelet_node(
    plane: ControlPlane, state: dict[str, Any], *, directory: Path, work: Path
) -> Iterator[str]:
    """Swap `make up`'s nodeagent for the reference kubelet + kube-proxy while the block runs."""
    bins = ensure_built(peers=True, quiet=True)
    runtime = state["runtime"]
    socket = Path(runtime["containerd_dir"]) / "c.sock"
    name = state["node"]["name"]
    node_up.stop(state["node"])
    remove_sandboxes(socket)
    before = HostState.snapshot()
    root = KUBELET_ROOT
    unmount_and_remove(root)  # a run that was killed may have left it
    root.mkdir(parents=True, exist_ok=True)
    node_up.route_services_locally(load_versions().service_cidr)
    kubeconfig = plane.node_kubeconfig(name)
    kcfg = work / "kubelet.yaml"
    kcfg.write_text(
        yaml.safe_dump(kubelet_config(endpoint=f"unix://{socket}", ca=plane.ca_path, root=root))
    )
    pcfg = work / "kube-proxy.yaml"
    pcfg.write_text(yaml.safe_dump(kube_proxy_config(kubeconfig=kubeconfig, node=name)))
    logs = directory / "logs"
    started: list[processes.Proc] = []
    try:
        kubelet = processes.start(
            name="kubelet",
            argv=[
                str(bins.path("kubelet")),
                f"--config={kcfg}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={name}",
                f"--root-dir={root}",
                f"--cert-dir={root / 'pki'}",
            ],
            log=logs / "conformance-kubelet.log",
        )
        started.append(kubelet)
        proxy = processes.start(
            name="kube-proxy",
            argv=[str(bins.path("kube-proxy")), f"--config={pcfg}"],
            log=logs / "conformance-kube-proxy.log",
        )
        started.append(proxy)
        say(
            f"reference kubelet (pid {kubelet.pid}) and kube-proxy (pid {proxy.pid})"
            f" are node {name}"
        )
        approve_serving_csr(
            plane, name, kubelet, issued=root / "pki" / "kubelet-server-current.pem"
        )
        wait_ready(plane, name, kubelet)
        yield name
    finally:
        for proc in reversed(started):
            proc.stop(timeout=15)
        remove_sandboxes(socket)
        with contextlib.suppress(subprocess.CalledProcessError):
            subprocess.run(["umount", "-l", str(root)], capture_output=True, check=False)
        with contextlib.suppress(RuntimeError):
            unmount_and_remove(root)  # (never through a mount: it refuses while one is left)
        before.restore()
        say("reference kubelet and kube-proxy stopped; starting nodeagent again")
        endpoint = f"unix://{socket}"
        state["node"] = node_up.ensure(
            None, plane=plane, directory=directory, runtime_endpoint=endpoint
        )


def approve_serving_csr(
    plane: ControlPlane, name: str, proc: processes.Proc, *, issued: Path
) -> None:
    """Approve the kubelet's pending kubelet-serving CSRs until its serving pair is issued
    (nodeagent's earlier, issued CSR for the same node is not the kubelet's)."""
    deadline = time.monotonic() + READY_TIMEOUT
    while not issued.exists():
        for item in json.loads(plane.kubectl("get", "csr", "-o", "json").stdout).get("items", []):
            spec, status = item.get("spec", {}), item.get("status", {})
            if (
                spec.get("signerName") == "kubernetes.io/kubelet-serving"
                and spec.get("username") == f"system:node:{name}"
                and not status.get("conditions")
            ):
                plane.kubectl("certificate", "approve", item["metadata"]["name"])
                say(
                    f"approved the kubelet's serving certificate request {item['metadata']['name']}"
                )
        if not proc.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the kubelet's serving certificate was not issued:\n{proc.tail()}")
        time.sleep(1)


def wait_ready(plane: ControlPlane, name: str, proc: processes.Proc) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        got = plane.kubectl("get", "node", name, "-o", "json", check=False)
        if got.returncode == 0:
            conditions = json.loads(got.stdout)["status"].get("conditions", [])
            if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                say(f"node {name} Ready with the reference kubelet")
                return
        if not proc.alive():
            raise RuntimeError(f"the kubelet exited:\n{proc.tail()}")
        time.sleep(1)
    raise RuntimeError(f"node {name} not Ready with the kubelet after {READY_TIMEOUT:.0f}s")

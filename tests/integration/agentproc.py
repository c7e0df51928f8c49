"""`nodeagent run` as a real process on the real control plane, for integration tests.

``agent_node(control_plane, tmp_path, endpoint)`` gives an :class:`AgentNode`: a random node
name with a client-certificate kubeconfig, a config file (no proxy, the given CRI endpoint, a
private cgroup root ``/na-it-<hex>``, pod logs and root dir under ``tmp_path``) and a per-test
namespace. ``start()`` runs ``python -m nodeagent run --config ...`` (every run appends to one
log file), ``kill()`` SIGKILLs it, ``stop()`` SIGTERMs it (then SIGKILL). At the end the pods
are deleted while an agent still runs (so it removes them from the runtime), then the agent
stops; whatever is left is removed through CRI, with the namespace, the Node, its Lease, the
``/var/log/containers`` links of the namespace and the cgroup tree.

``private_containerd(tmp_path, images)`` is a containerd of the test's own (function scope,
bridge ``na-cnirs`` on ``RESTART_SUBNET``), for a test that must stop and start its runtime
without disturbing the session's shared one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from harness import cni, netns, netsafety, processes
from harness.containerd import Containerd, ContainerdConfig, start_containerd, stop_containerd
from harness.controlplane import ControlPlane
from harness.controlplane_args import free_port
from harness.images import BUSYBOX_IMAGE, BuiltImage
from podnode import remove_cgroup_tree, until

from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import CONTAINER_NAME, POD_NAME, POD_NAMESPACE, POD_UID

CONTAINER_LOGS = Path("/var/log/containers")  # where the agent links container logs
RESTART_SUBNET = "10.244.249.0/24"  # the xdist workers use 10.244.<n>.0/24 from 0; bench .250/.251
RESTART_BRIDGE = "na-cnirs"
STOP_TIMEOUT = 20.0


@dataclass
class AgentNode:
    name: str
    namespace: str
    config: Path
    log: Path
    endpoint: str
    cgroup_root: str  # top-level cgroup name, without the leading slash
    netns: str | None = None  # run inside this network namespace (its proxy programs that one)
    procs: list[processes.Proc] = field(default_factory=list)

    @property
    def proc(self) -> processes.Proc | None:
        return self.procs[-1] if self.procs else None

    def start(self) -> processes.Proc:
        """Start ``nodeagent run`` (from the main thread: it dies with the test run)."""
        argv: tuple[str, ...] = (
            sys.executable,
            "-m",
            "nodeagent",
            "run",
            "--config",
            str(self.config),
        )
        if self.netns is not None:  # nsenter, not `ip netns exec`: that remounts /sys (cgroups)
            argv = ("nsenter", f"--net=/run/netns/{self.netns}", *argv)
        proc = processes.start(name="nodeagent", argv=argv, log=self.log)
        self.procs.append(proc)
        return proc

    def alive(self) -> bool:
        return self.proc is not None and self.proc.alive()

    def kill(self) -> None:
        """SIGKILL the running agent and reap it: no shutdown code runs."""
        proc = self.proc
        assert proc is not None and proc.popen is not None
        os.kill(proc.pid, signal.SIGKILL)
        proc.popen.wait(timeout=STOP_TIMEOUT)

    def stop(self) -> int | None:
        """SIGTERM (then SIGKILL) the running agent; its exit code, None if none ran."""
        proc = self.proc
        if proc is None or proc.popen is None:
            return None
        proc.stop(timeout=STOP_TIMEOUT)
        return proc.popen.returncode

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, chars: int = 4000) -> str:
        return self.log_text()[-chars:]


def agent_config(
    *,
    name: str,
    kubeconfig: Path,
    endpoint: str,
    cgroup_root: str,
    tmp_path: Path,
    root_dir: Path | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "nodeagent.io/v1alpha1",
        "kind": "NodeAgentConfiguration",
        "node": {
            "kubeconfig": str(kubeconfig),
            "hostnameOverride": name,
            "rootDir": str(root_dir or tmp_path / "root"),
        },
        "kubelet": {
            "containerRuntimeEndpoint": endpoint,
            # The kubelet API on free ports: a `make up` node (or a second agent) may hold
            # 10250/10248, and an agent that cannot listen exits as the kubelet does.
            "port": free_port(),
            "healthzPort": free_port(),
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": f"/{cgroup_root}",
            "podLogsDir": str(tmp_path / "pods"),
            "resolvConf": "",
            "failCgroupV1": False,
            "failSwapOn": False,
        },
        "proxy": {"enabled": False},  # the host's root netns is not this test's
    }


@contextlib.asynccontextmanager
async def agent_process(config: Path, log: Path) -> AsyncIterator[asyncio.subprocess.Process]:
    """``nodeagent run --config <config>`` with its output in ``log``; SIGTERM at the end
    (SIGKILL after 20 s)."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "nodeagent", "run", "--config", str(config),
            stdout=out, stderr=asyncio.subprocess.STDOUT, stdin=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), 20)
            except TimeoutError:
                proc.kill()
                await proc.wait()


# --- the API side ----------------------------------------------------------------------------


def configure_kubelet(node: AgentNode, control_plane: ControlPlane, **fields: Any) -> None:
    """Set ``kubelet:`` fields in the node's config, with its API secured as ``make up`` does
    (client certificates of the cluster CA, webhook authn/authz), so ``kubectl logs`` works."""
    settings = yaml.safe_load(node.config.read_text())
    settings["kubelet"].update(
        {
            "authentication": {
                "x509": {"clientCAFile": str(control_plane.ca_path)},
                "webhook": {"enabled": True},
                "anonymous": {"enabled": False},
            },
            "authorization": {"mode": "Webhook"},
            **fields,
        }
    )
    node.config.write_text(yaml.safe_dump(settings))


def api_get(control_plane: ControlPlane, path: str) -> Any:
    """GET ``path`` as admin; None when it does not exist. (Fast: no kubectl process.)"""
    code, body = control_plane.api_request("GET", path)
    if code == 404:
        return None
    assert code == 200, (code, body)
    return body


def ready_condition(control_plane: ControlPlane, node: str) -> dict[str, Any]:
    obj = api_get(control_plane, f"/api/v1/nodes/{node}") or {}
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def pods_in(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    listing = api_get(control_plane, f"/api/v1/namespaces/{namespace}/pods") or {}
    items: list[dict[str, Any]] = listing.get("items", [])
    return items


def phases(pods: list[dict[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: (p.get("status") or {}).get("phase", "") for p in pods}


def sleeper_pod(name: str, namespace: str, node: str) -> dict[str, Any]:
    """A busybox pod bound to ``node`` (as the scheduler binds it) that sleeps."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "sleeper"}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sleep", "3600"],
                }
            ],
        },
    }


def create_pods(control_plane: ControlPlane, node: AgentNode, names: list[str]) -> None:
    """All at once: one ``kubectl create`` of a List."""
    items = [sleeper_pod(n, node.namespace, node.name) for n in names]
    body = {"apiVersion": "v1", "kind": "List", "items": items}
    control_plane.kubectl("create", "-f", "-", input=json.dumps(body))


async def wait_ready(
    control_plane: ControlPlane, node: AgentNode, *, status: str, within: float
) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        assert node.alive(), f"the agent exited:\n{node.log_tail()}"
        ready = ready_condition(control_plane, node.name)
        return ready if ready.get("status") == status else None

    result: dict[str, Any] = await until(
        f"node {node.name} Ready={status}",
        check,
        within=within,
        every=0.5,
        explain=lambda: (ready_condition(control_plane, node.name), node.log_tail()),
    )
    return result


# --- a pod seen from the API and from inside its container --------------------------------------


def create_objects(
    control_plane: ControlPlane, namespace: str, *objects: tuple[str, dict[str, Any]]
) -> None:
    """POST each (plural, body) to ``namespace`` as admin; each must be created."""
    for plural, body in objects:
        code, answer = control_plane.api_request(
            "POST", f"/api/v1/namespaces/{namespace}/{plural}", body=body
        )
        assert code == 201, (plural, code, answer)


def pod_path(node: AgentNode, name: str) -> str:
    return f"/api/v1/namespaces/{node.namespace}/pods/{name}"


async def running(control_plane: ControlPlane, node: AgentNode, name: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        assert node.alive(), f"the agent exited:\n{node.log_tail()}"
        pod = api_get(control_plane, pod_path(node, name)) or {}
        status = pod.get("status") or {}
        states = [c.get("state") or {} for c in status.get("containerStatuses") or []]
        ok = status.get("phase") == "Running" and states and all("running" in s for s in states)
        return pod if ok else None

    def explain() -> Any:
        events = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/events") or {}
        return (
            (api_get(control_plane, pod_path(node, name)) or {}).get("status"),
            [(e["reason"], e["message"]) for e in events.get("items", [])],
            node.log_tail(2000),
        )

    pod: dict[str, Any] = await until(f"pod {name} running", check, within=90, explain=explain)
    return pod


async def container_id(endpoint: str, node: AgentNode, pod: str) -> str:
    view = await runtime_view(endpoint, node.namespace)
    [found] = [
        c.id
        for c in view.containers
        if c.labels.get(POD_NAME) == pod and c.labels.get(CONTAINER_NAME) == "app"
    ]
    return found


async def run_in(endpoint: str, container: str, script: str) -> tuple[int, str, str]:
    """``sh -c script`` inside the container: (exit code, stdout, stderr)."""
    async with CriClient.open(endpoint) as client:
        done = await client.exec_sync(container, ["sh", "-c", script], 20)
    return done.exit_code, done.stdout.decode(), done.stderr.decode()


# --- the runtime side -------------------------------------------------------------------------


@dataclass(frozen=True)
class RuntimeView:
    """What the runtime has for one namespace."""

    sandboxes: list[cri.PodSandbox]
    containers: list[cri.Container]


async def runtime_view(endpoint: str, namespace: str) -> RuntimeView:
    async with CriClient.open(endpoint) as client:
        sandboxes = await client.list_pod_sandbox(
            cri.PodSandboxFilter(label_selector={POD_NAMESPACE: namespace})
        )
        containers = await client.list_containers(
            cri.ContainerFilter(label_selector={POD_NAMESPACE: namespace})
        )
    return RuntimeView(sandboxes=sandboxes, containers=containers)


async def ever_started(endpoint: str, containers: list[cri.Container]) -> dict[str, list[str]]:
    """Per pod uid, the containers that ever ran a process (``startedAt`` set); one that
    failed to start (StartError) or was never started has none."""
    started: dict[str, list[str]] = {}
    async with CriClient.open(endpoint) as client:
        for c in containers:
            status = (await client.container_status(c.id)).status
            if status.started_at:
                started.setdefault(c.labels.get(POD_UID, ""), []).append(c.id)
    return started


async def remove_from_runtime(endpoint: str, namespace: str) -> None:
    """Stop and remove every sandbox (and so its containers) of ``namespace``."""
    view = await runtime_view(endpoint, namespace)
    async with CriClient.open(endpoint) as client:
        for sandbox in view.sandboxes:
            with contextlib.suppress(Exception):
                await client.stop_pod_sandbox(sandbox.id)
                await client.remove_pod_sandbox(sandbox.id)


def remove_log_links(namespace: str) -> None:
    for link in CONTAINER_LOGS.glob(f"*_{namespace}_*.log"):
        link.unlink(missing_ok=True)


# --- the node's lifetime ---------------------------------------------------------------------


@contextlib.asynccontextmanager
async def agent_node(
    control_plane: ControlPlane,
    tmp_path: Path,
    endpoint: str,
    *,
    with_proxy: bool = False,
    host_proxy: bool = False,
    root_dir: Path | None = None,
) -> AsyncIterator[AgentNode]:
    """``with_proxy``: every manager on, as ``make up`` runs it, the agent in a network
    namespace of the test's own (``node.netns``, node IP ``netns.NODE_IP``, the apiserver
    forwarded to its 127.0.0.1) so its proxy programs that namespace's ``ip nodeagent``.

    ``host_proxy``: every manager on in the root network namespace, exactly as ``make up``
    runs it: the proxy programs the host's ``ip nodeagent``, which the pods on the host's CNI
    bridge go through (to reach ClusterIPs from inside containers). The caller owns that
    table: no other agent may hold it, and the caller removes it afterwards."""
    suffix = secrets.token_hex(3)
    name = namespace = f"na-proc-{suffix}"
    cgroup_root = f"na-it-{suffix}"
    config = tmp_path / "config.yaml"
    kubeconfig = control_plane.node_kubeconfig(name)
    settings = agent_config(
        name=name,
        kubeconfig=kubeconfig,
        endpoint=endpoint,
        cgroup_root=cgroup_root,
        tmp_path=tmp_path,
        root_dir=root_dir,
    )
    async with contextlib.AsyncExitStack() as stack:
        ns = None
        if with_proxy:
            ns = stack.enter_context(_netns(suffix))
            forwarder = await netns.Forwarder(
                ns.name, control_plane.ports.apiserver, host=control_plane.address
            ).start()
            stack.push_async_callback(forwarder.stop)
            settings["proxy"] = {"enabled": True}
            settings["node"]["nodeIP"] = netns.NODE_IP
            settings["node"]["kubeconfig"] = str(_inside(kubeconfig, tmp_path))
        elif host_proxy:
            settings["proxy"] = {"enabled": True}
        config.write_text(yaml.safe_dump(settings))
        node = AgentNode(
            name=name,
            namespace=namespace,
            config=config,
            log=tmp_path / "nodeagent.log",
            endpoint=endpoint,
            cgroup_root=cgroup_root,
            netns=ns.name if ns is not None else None,
        )
        control_plane.kubectl("create", "namespace", namespace)
        try:
            yield node
        finally:
            await _tear_down(control_plane, node)


@contextlib.contextmanager
def _netns(tag: str) -> Iterator[netns.Netns]:
    ns = netns.Netns(tag).create()
    try:
        yield ns
    finally:
        ns.delete()  # its nft tables go with it


def _inside(kubeconfig: Path, tmp_path: Path) -> Path:
    """The same kubeconfig with the server as the namespace sees it (the forwarder)."""
    data = yaml.safe_load(kubeconfig.read_text())
    for cluster in data["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{netns.API_PORT}"
    path = tmp_path / "node-in-netns.kubeconfig"
    path.write_text(yaml.safe_dump(data))
    return path


async def _tear_down(control_plane: ControlPlane, node: AgentNode) -> None:
    kubectl = control_plane.kubectl
    ns = node.namespace
    try:
        if node.alive():  # let the agent kill and remove its pods, as it would in a cluster
            kubectl("delete", "pods", "--all", "-n", ns, "--wait=false", check=False)
            with contextlib.suppress(AssertionError):
                await until(
                    "the pods gone", lambda: not pods_in(control_plane, ns), within=30, every=0.5
                )
        node.stop()
    finally:
        with contextlib.suppress(Exception):
            await remove_from_runtime(node.endpoint, ns)
        kubectl("delete", "pods", "--all", "-n", ns, "--force", "--grace-period=0", check=False)
        kubectl("delete", "namespace", ns, "--wait=false", check=False)
        kubectl("delete", "node", node.name, "--ignore-not-found", check=False)
        kubectl("delete", "lease", node.name, "-n", "kube-node-lease", "--ignore-not-found",
                check=False)  # fmt: skip
        remove_log_links(ns)
        assert remove_cgroup_tree(node.cgroup_root) == []


@dataclass
class PrivateContainerd:
    """A containerd of the test's own that the test may stop and start again."""

    config: ContainerdConfig
    current: Containerd

    @property
    def endpoint(self) -> str:
        return self.current.endpoint

    def stop(self) -> None:
        """SIGTERM containerd and wait for it to exit; the shims (and containers) stay."""
        popen = self.current.proc.popen if self.current.proc else None
        assert popen is not None
        popen.send_signal(signal.SIGTERM)
        popen.wait(timeout=STOP_TIMEOUT)

    def start(self) -> None:
        """Start it again on the same config, root, state and socket."""
        self.current = start_containerd(self.config)


@contextlib.contextmanager
def private_containerd(
    images: Mapping[str, BuiltImage], *, log_path: Path
) -> Iterator[PrivateContainerd]:
    """Started, with the images imported and its own CNI bridge; removed at the end with its
    network (whether running or stopped then)."""
    base = Path(tempfile.mkdtemp(prefix="na-ctd-"))  # short: the socket path must fit
    net = cni.CniNetwork(
        conf_dir=base / "net.d",
        ipam_dir=base / "ipam",
        subnet=RESTART_SUBNET,
        bridge=RESTART_BRIDGE,
    )
    config = ContainerdConfig(base_dir=base / "c", cni_conf_dir=net.conf_dir, log_path=log_path)
    ip_forward_before = cni.read_ip_forward()
    try:
        with netsafety.unreachable_routes((netsafety.POD_CIDR, netsafety.SERVICE_CIDR)):
            cni.check_subnet_free(net)
            cni.write_conflist(net)
            runtime = PrivateContainerd(config=config, current=start_containerd(config))
            try:
                for image in images.values():
                    runtime.current.import_image(image.tarball)
                yield runtime
            finally:
                stop_containerd(config.base_dir, proc=runtime.current.proc)
                cni.remove_network(net, ip_forward_before=ip_forward_before)
    finally:
        shutil.rmtree(base, ignore_errors=True)

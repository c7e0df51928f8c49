"""A real Kubernetes control plane on this machine: etcd, apiserver, controller-manager, scheduler.

Everything listens on 127.0.0.1 except kube-apiserver, which listens on and advertises
`API_ADDRESS` so that pods reach it through the `kubernetes` Service (see `controlplane_args`).

`start_control_plane` generates a PKI, starts each component on free ports with its data under
one directory and its log in `log_dir`, waits until the cluster is usable (``/readyz``, the
controller-manager and scheduler healthy and leading, the ``default`` service account present)
and returns a `ControlPlane` handle. `ControlPlane.stop` ends every process (SIGTERM, then SIGKILL)
and removes the data directory. The argv builders are pure functions.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import bootstrap, kubeconfig
from harness.build import Binaries
from harness.controlplane_args import (
    API_ADDRESS,
    LOCALHOST,
    Layout,
    Network,
    Ports,
    apiserver_argv,
    controller_manager_argv,
    ensure_api_address,
    etcd_argv,
    first_service_ip,
    scheduler_argv,
)
from harness.pki import CertPair, Pki, create_pki, load_pki, tls_client_context
from harness.processes import Proc, StartupError, is_running, start, stop_pid, wait_for
from harness.versions import load_versions

READY_TIMEOUT = 180.0


def http_ok(url: str, *, context: ssl.SSLContext | None = None, body: bytes = b"ok") -> bool:
    """True when GET `url` answers 200 with `body` (exactly, stripped) inside 5 seconds."""
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as response:
            return bool(response.status == 200 and response.read().strip() == body)
    except (OSError, urllib.error.URLError, ssl.SSLError):
        return False


@dataclass(kw_only=True)
class ControlPlane:
    """A running control plane. Started by `start_control_plane` or re-attached with `attach`."""

    binaries: Binaries
    layout: Layout
    ports: Ports
    network: Network
    pki: Pki
    address: str = API_ADDRESS  # where kube-apiserver listens, and what it advertises
    procs: list[Proc] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)  # seconds from start to each stage

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports.apiserver}"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.layout.admin_kubeconfig

    @property
    def ca_path(self) -> Path:
        return self.pki.ca.pair.cert

    @property
    def service_cidr(self) -> str:
        return self.network.service_cidr

    @property
    def cluster_cidr(self) -> str:
        return self.network.cluster_cidr

    @property
    def log_dir(self) -> Path:
        return self.layout.log_dir

    @property
    def kubectl_path(self) -> Path:
        return self.binaries.path("kubectl")

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig_path: Path | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (or with `kubeconfig_path`); raise with stderr when `check`."""
        config = kubeconfig_path or self.admin_kubeconfig
        done = subprocess.run(
            [str(self.kubectl_path), f"--kubeconfig={config}", *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed: {done.stderr.strip()}")
        return done

    def apply(self, obj: dict[str, Any]) -> None:
        self.kubectl("apply", "-f", "-", input=json.dumps(obj))

    def get_json(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", "-o", "json", *args).stdout)

    def api_request(
        self, method: str, path: str, *, client: CertPair | None = None, body: Any = None
    ) -> tuple[int, Any]:
        """One raw API call as `client` (default: admin); returns (HTTP status, decoded JSON).

        For what kubectl cannot express, e.g. a PATCH without kubectl's preceding GET.
        """
        context = tls_client_context(client or self.pki.admin, ca=self.ca_path)
        content_type = "application/merge-patch+json" if method == "PATCH" else "application/json"
        request = urllib.request.Request(
            f"{self.server}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": content_type, "Accept": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=context) as response:
                return response.status, json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read() or b"null")

    def readyz(self) -> bool:
        context = tls_client_context(self.pki.admin, ca=self.ca_path)
        return http_ok(f"{self.server}/readyz", context=context)

    def node_kubeconfig(self, name: str, *, validity: datetime.timedelta | None = None) -> Path:
        """A kubeconfig for node `name` with a fresh CN=system:node:<name> client cert."""
        pair = self.pki.node_client_cert(name, validity=validity)
        config = kubeconfig.render(
            server=self.server, ca=self.ca_path, user=f"system:node:{name}", client=pair
        )
        return kubeconfig.write(self.layout.kubeconfigs / "nodes" / f"{name}.conf", config)

    def bootstrap_token(self, *, ttl: datetime.timedelta = datetime.timedelta(hours=1)) -> str:
        """Create a bootstrap-token Secret; return ``<id>.<secret>``."""
        token = bootstrap.new_token(ttl=ttl, now=datetime.datetime.now(datetime.UTC))
        self.apply(bootstrap.token_secret(token))
        return token.token

    @property
    def endpoint(self) -> str:
        """``host:port`` of the apiserver, as a join command names it."""
        return f"{self.address}:{self.ports.apiserver}"

    def publish_cluster_info(self) -> None:
        """`kube-public/cluster-info` and its RBAC, as `kubeadm init` makes them (the
        controller-manager's bootstrap signer adds the tokens' JWS signatures)."""
        self.apply(bootstrap.cluster_info_rbac())
        self.apply(bootstrap.cluster_info(server=self.server, ca_pem=self.ca_path.read_bytes()))

    def publish_kubelet_config(self) -> None:
        """`kube-system/kubelet-config` and its RBAC, as `kubeadm init` makes them: the kubelet
        settings `nodeagent join` downloads with the bootstrap token."""
        self.apply(bootstrap.kubelet_config_rbac())
        dns = load_versions().cluster_dns_ip  # the kube-dns Service's address (harness.coredns)
        self.apply(
            bootstrap.kubelet_config(cluster_dns=dns, cluster_domain=self.network.cluster_domain)
        )

    def join_command(self, *, ttl: datetime.timedelta = datetime.timedelta(hours=24)) -> str:
        """A new bootstrap token and the `nodeagent join` line that uses it, as `kubeadm token
        create --print-join-command` prints (kubeadm's default TTL, 24 h)."""
        return bootstrap.join_command(
            endpoint=self.endpoint,
            token=self.bootstrap_token(ttl=ttl),
            ca_hash=bootstrap.ca_cert_hash(self.ca_path.read_bytes()),
        )

    def bootstrap_kubeconfig(self, token: str, *, name: str = "bootstrap") -> Path:
        config = kubeconfig.render(
            server=self.server, ca=self.ca_path, user="kubelet-bootstrap", token=token
        )
        return kubeconfig.write(self.layout.kubeconfigs / f"{name}.conf", config)

    def stop(self, *, remove: bool = True) -> None:
        """Stop every component, newest first; remove the data directory when `remove`."""
        for proc in reversed(self.procs):
            proc.stop()
        if remove:
            shutil.rmtree(self.layout.root, ignore_errors=True)

    def state(self) -> dict[str, Any]:
        """What `attach` needs to find this control plane again from another process."""
        return {
            "root": str(self.layout.root),
            "log_dir": str(self.layout.log_dir),
            "address": self.address,
            "ports": self.ports.__dict__,
            "network": self.network.__dict__,
            "kubernetes_dir": str(self.binaries.kubernetes_dir),
            "etcd_dir": str(self.binaries.etcd_dir),
            "procs": [{"name": p.name, "pid": p.pid, "argv": list(p.argv)} for p in self.procs],
        }


def attach(state: dict[str, Any]) -> ControlPlane:
    layout = Layout(root=Path(state["root"]), log_dir=Path(state["log_dir"]))
    procs = [
        Proc(
            name=p["name"],
            argv=tuple(p["argv"]),
            log=layout.log_dir / f"{p['name']}.log",
            pid=p["pid"],
        )
        for p in state["procs"]
    ]
    return ControlPlane(
        binaries=Binaries(
            kubernetes_dir=Path(state["kubernetes_dir"]), etcd_dir=Path(state["etcd_dir"])
        ),
        layout=layout,
        ports=Ports(**state["ports"]),
        address=state.get("address", LOCALHOST),  # a control plane started before the change
        network=Network(**state["network"]),
        pki=load_pki(directory=layout.pki),
        procs=procs,
    )


RUN_DIR_PREFIX = "nodeagent-cp-"
OWNER_FILE = "owner.pid"


def new_run_dir(parent: Path | None = None) -> Path:
    """A fresh data directory for one test control plane, stamped with the owning pid."""
    root = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX, dir=parent))
    (root / OWNER_FILE).write_text(f"{os.getpid()}\n")
    return root


def sweep_stale_run_dirs(parent: Path | None = None) -> list[Path]:
    """Remove run directories whose owner died without cleaning up (SIGKILLed test runs).

    Their processes are gone already (they die with their parent); only files remain.
    """
    removed = []
    for root in Path(parent or tempfile.gettempdir()).glob(f"{RUN_DIR_PREFIX}*"):
        try:
            owner = int((root / OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        if not is_running(owner):
            shutil.rmtree(root, ignore_errors=True)
            removed.append(root)
    return removed


def all_running(procs: Sequence[Proc]) -> bool:
    return bool(procs) and all(is_running(p.pid, binary=p.argv[0]) for p in procs)


def stop_recorded(state: dict[str, Any]) -> None:
    """Stop the processes recorded in a `ControlPlane.state()`, newest first."""
    for p in reversed(state.get("procs", [])):
        stop_pid(p["pid"], binary=p["argv"][0])


def _write_component_kubeconfigs(layout: Layout, pki: Pki, server: str) -> None:
    for name, user, pair in (
        ("admin.conf", "kubernetes-admin", pki.admin),
        ("controller-manager.conf", "system:kube-controller-manager", pki.controller_manager),
        ("scheduler.conf", "system:kube-scheduler", pki.scheduler),
    ):
        config = kubeconfig.render(server=server, ca=pki.ca.pair.cert, user=user, client=pair)
        kubeconfig.write(layout.kubeconfigs / name, config)


START_ATTEMPTS = 3
PORT_TAKEN = "address already in use"


def start_control_plane(
    *,
    binaries: Binaries,
    root: Path,
    log_dir: Path,
    network: Network | None = None,
    detached: bool = False,
    cert_validity: datetime.timedelta | None = None,
    timeout: float = READY_TIMEOUT,
    apiserver_extra_args: Sequence[str] = (),
) -> ControlPlane:
    """Start everything and wait until it is usable; on any failure, stop what was started.

    ``apiserver_extra_args`` are appended to kube-apiserver's flags (e.g. an audit policy for
    the benchmarks).

    Free ports are picked before the components bind them; when another process takes one in
    between, the whole start is retried on fresh ports.
    """
    started = time.monotonic()
    layout = Layout(root=root, log_dir=log_dir)
    net = network or Network.from_versions(load_versions())
    root.mkdir(parents=True, exist_ok=True)
    pki_args: dict[str, Any] = {"validity": cert_validity} if cert_validity else {}
    ensure_api_address()
    pki = create_pki(
        directory=layout.pki,
        service_ip=first_service_ip(net.service_cidr),
        extra_sans=(API_ADDRESS,),
        cluster_domain=net.cluster_domain,
        **pki_args,
    )
    for attempt in range(1, START_ATTEMPTS + 1):
        plane = ControlPlane(
            binaries=binaries, layout=layout, ports=Ports.pick(), network=net, pki=pki
        )
        try:
            _start_components(
                plane,
                detached=detached,
                timeout=timeout,
                started=started,
                apiserver_extra_args=apiserver_extra_args,
            )
        except StartupError as error:
            if attempt < START_ATTEMPTS and PORT_TAKEN in str(error):
                shutil.rmtree(layout.etcd_data, ignore_errors=True)
                continue
            if not detached:  # `up` keeps the files (and logs) for the next `up` to clean
                shutil.rmtree(root, ignore_errors=True)
            raise
        except BaseException:
            if not detached:
                shutil.rmtree(root, ignore_errors=True)
            raise
        return plane
    raise AssertionError("unreachable")


def _start_components(
    plane: ControlPlane,
    *,
    detached: bool,
    timeout: float,
    started: float,
    apiserver_extra_args: Sequence[str] = (),
) -> None:
    layout, ports, pki, net = plane.layout, plane.ports, plane.pki, plane.network
    binaries = plane.binaries
    _write_component_kubeconfigs(layout, pki, plane.server)

    def launch(name: str, argv: list[str]) -> Proc:
        log = layout.log_dir / f"{name}.log"
        proc = start(name=name, argv=argv, log=log, detached=detached)
        plane.procs.append(proc)
        return proc

    try:
        etcd = launch("etcd", etcd_argv(binaries.path("etcd"), layout=layout, ports=ports))
        wait_for(
            lambda: _etcd_healthy(ports.etcd_client),
            what="etcd /health",
            timeout=timeout,
            watch=[etcd],
        )
        apiserver = launch(
            "kube-apiserver",
            [
                *apiserver_argv(
                    binaries.path("kube-apiserver"),
                    layout=layout,
                    ports=ports,
                    pki=pki,
                    network=net,
                    advertise_address=plane.address,
                ),
                *apiserver_extra_args,
            ],
        )
        wait_for(plane.readyz, what="kube-apiserver /readyz", timeout=timeout, watch=[apiserver])
        plane.timings["readyz"] = time.monotonic() - started
        plane.apply(bootstrap.tls_bootstrap_rbac())
        wait_for(
            functools.partial(_exists, plane, "namespace", "kube-public"),
            what="the kube-public namespace",
            timeout=timeout,
            watch=[apiserver],
        )
        plane.publish_cluster_info()
        plane.publish_kubelet_config()
        launch(
            "kube-controller-manager",
            controller_manager_argv(
                binaries.path("kube-controller-manager"),
                layout=layout,
                ports=ports,
                pki=pki,
                network=net,
            ),
        )
        launch(
            "kube-scheduler",
            scheduler_argv(binaries.path("kube-scheduler"), layout=layout, ports=ports, pki=pki),
        )
        _wait_components(plane, timeout=timeout)
        plane.timings["ready"] = time.monotonic() - started
    except BaseException:
        plane.stop(remove=False)
        raise


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{LOCALHOST}:{port}/health", timeout=5) as response:
            return bool(json.loads(response.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def _component_healthy(port: int) -> bool:
    context = tls_client_context()  # self-signed serving cert made at startup
    return http_ok(f"https://{LOCALHOST}:{port}/healthz", context=context)


def _lease_held(plane: ControlPlane, name: str) -> bool:
    done = plane.kubectl(
        "-n",
        "kube-system",
        "get",
        "lease",
        name,
        "-o",
        "jsonpath={.spec.holderIdentity}",
        check=False,
    )
    return done.returncode == 0 and bool(done.stdout.strip())


def _exists(plane: ControlPlane, *args: str) -> bool:
    return plane.kubectl("get", *args, check=False).returncode == 0


def _wait_components(plane: ControlPlane, *, timeout: float) -> None:
    watch = plane.procs
    for port, name in (
        (plane.ports.controller_manager, "kube-controller-manager"),
        (plane.ports.scheduler, "kube-scheduler"),
    ):
        wait_for(
            functools.partial(_component_healthy, port),
            what=f"{name} /healthz",
            timeout=timeout,
            watch=watch,
        )
        wait_for(
            functools.partial(_lease_held, plane, name),
            what=f"{name} leader lease",
            timeout=timeout,
            watch=watch,
        )
    wait_for(
        functools.partial(_exists, plane, "-n", "default", "serviceaccount", "default"),
        what="the default ServiceAccount",
        timeout=timeout,
        watch=watch,
    )

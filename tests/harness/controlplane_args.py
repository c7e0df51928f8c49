"""Command lines and file layout of the control-plane components (pure functions).

Flags follow what kubeadm gives each component, adapted to one machine: everything binds to
127.0.0.1 on free ports except kube-apiserver, etcd speaks plain HTTP on loopback, and the
cluster signs node CSRs with its own CA.

kube-apiserver listens on, and advertises, `API_ADDRESS` (198.18.0.1, from the RFC 2544
benchmarking range, which nothing routes): an address of this machine that is not loopback, so
the default endpoint reconciler publishes it as the `kubernetes` Service's endpoint (Endpoints
may not hold loopback addresses) and pods reach the apiserver through the ClusterIP, as on a
kubeadm node. The address is a /32 on `lo` (`ensure_api_address`), not on a real interface, and
the apiserver binds that address only (not 0.0.0.0): the host's own clients and its pods (routed
here by the CNI bridge) reach it, nothing routes to it from outside. The /32 stays on `lo` once
added (several control planes share it: xdist workers, a `make up` cluster); removing it by
hand (`ip addr del 198.18.0.1/32 dev lo`) is harmless when no control plane runs.
"""

from __future__ import annotations

import ipaddress
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from harness.pki import Pki
from harness.versions import Versions

LOCALHOST = "127.0.0.1"
API_ADDRESS = "198.18.0.1"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        port: int = sock.getsockname()[1]
        return port


def first_service_ip(service_cidr: str) -> str:
    return str(next(ipaddress.ip_network(service_cidr).hosts()))


@dataclass(frozen=True, kw_only=True)
class Network:
    service_cidr: str
    cluster_cidr: str
    node_cidr_mask_size: int
    cluster_domain: str

    @classmethod
    def from_versions(cls, versions: Versions) -> Network:
        return cls(
            service_cidr=versions.service_cidr,
            cluster_cidr=versions.cluster_cidr,
            node_cidr_mask_size=versions.node_cidr_mask_size,
            cluster_domain=versions.cluster_domain,
        )


@dataclass(frozen=True, kw_only=True)
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int

    @classmethod
    def pick(cls) -> Ports:
        return cls(
            etcd_client=free_port(),
            etcd_peer=free_port(),
            apiserver=free_port(),
            controller_manager=free_port(),
            scheduler=free_port(),
        )


@dataclass(frozen=True, kw_only=True)
class Layout:
    """Where one control plane keeps its files."""

    root: Path
    log_dir: Path

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kubeconfigs(self) -> Path:
        return self.root / "kubeconfigs"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.kubeconfigs / "admin.conf"

    def component_dir(self, name: str) -> Path:
        return self.root / name


def etcd_argv(binary: Path, *, layout: Layout, ports: Ports) -> list[str]:
    client = f"http://{LOCALHOST}:{ports.etcd_client}"
    peer = f"http://{LOCALHOST}:{ports.etcd_peer}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={layout.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        "--unsafe-no-fsync",  # throwaway data on loopback; fsync only slows the tests
        "--log-level=warn",
    ]


def apiserver_argv(
    binary: Path,
    *,
    layout: Layout,
    ports: Ports,
    pki: Pki,
    network: Network,
    advertise_address: str = API_ADDRESS,
) -> list[str]:
    """The apiserver binds the address it advertises (see the module docstring)."""
    rh = "--requestheader"
    return [
        str(binary),
        f"--etcd-servers=http://{LOCALHOST}:{ports.etcd_client}",
        f"--bind-address={advertise_address}",
        f"--advertise-address={advertise_address}",
        f"--secure-port={ports.apiserver}",
        f"--cert-dir={layout.component_dir('kube-apiserver')}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.pair.cert}",
        f"--kubelet-client-certificate={pki.apiserver_kubelet_client.cert}",
        f"--kubelet-client-key={pki.apiserver_kubelet_client.key}",
        # As kubeadm: dial a node's IP (a node's Hostname address need not resolve).
        "--kubelet-preferred-address-types=InternalIP,ExternalIP,Hostname",
        f"--proxy-client-cert-file={pki.front_proxy_client.cert}",
        f"--proxy-client-key-file={pki.front_proxy_client.key}",
        f"{rh}-client-ca-file={pki.front_proxy_ca.pair.cert}",
        f"{rh}-allowed-names=front-proxy-client",
        f"{rh}-username-headers=X-Remote-User",
        f"{rh}-group-headers=X-Remote-Group",
        f"{rh}-extra-headers-prefix=X-Remote-Extra-",
        f"--service-account-issuer=https://kubernetes.default.svc.{network.cluster_domain}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={network.service_cidr}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        "--enable-bootstrap-token-auth=true",
        "--allow-privileged=true",
        "--profiling=false",
        # Aggregated APIs (metrics-server) are dialled at their endpoints: the apiserver's
        # host need not route Service ClusterIPs.
        "--enable-aggregator-routing=true",
        *endpoint_reconciler(advertise_address),
    ]


def endpoint_reconciler(advertise_address: str) -> list[str]:
    """Endpoints may not hold loopback addresses, so an apiserver advertising 127.0.0.1 cannot
    publish the `kubernetes` Service's endpoints; turn the reconciler off instead of letting it
    log a validation error every 10 seconds."""
    if ipaddress.ip_address(advertise_address).is_loopback:
        return ["--endpoint-reconciler-type=none"]
    return []


def ensure_api_address(address: str = API_ADDRESS) -> None:
    """Put `address`/32 on `lo` unless it is loopback already (idempotent; needs root)."""
    if ipaddress.ip_address(address).is_loopback:
        return
    done = subprocess.run(
        ["ip", "-4", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True, check=True
    )
    if f" {address}/" in done.stdout:
        return
    added = subprocess.run(
        ["ip", "addr", "add", f"{address}/32", "dev", "lo"],
        capture_output=True,
        text=True,
        check=False,
    )
    if added.returncode != 0 and "File exists" not in added.stderr:  # a racing harness
        raise RuntimeError(f"ip addr add {address}/32 dev lo: {added.stderr.strip()}")


def _component_common(
    binary: Path, *, kubeconfig_path: Path, port: int, cert_dir: Path, pki: Pki
) -> list[str]:
    return [
        str(binary),
        f"--kubeconfig={kubeconfig_path}",
        f"--authentication-kubeconfig={kubeconfig_path}",
        f"--authorization-kubeconfig={kubeconfig_path}",
        f"--client-ca-file={pki.ca.pair.cert}",
        f"--requestheader-client-ca-file={pki.front_proxy_ca.pair.cert}",
        f"--bind-address={LOCALHOST}",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
        "--leader-elect=true",
        "--profiling=false",
    ]


def controller_manager_argv(
    binary: Path, *, layout: Layout, ports: Ports, pki: Pki, network: Network
) -> list[str]:
    return [
        *_component_common(
            binary,
            kubeconfig_path=layout.kubeconfigs / "controller-manager.conf",
            port=ports.controller_manager,
            cert_dir=layout.component_dir("kube-controller-manager"),
            pki=pki,
        ),
        "--controllers=*,bootstrap-signer-controller,token-cleaner-controller",
        f"--cluster-signing-cert-file={pki.ca.pair.cert}",
        f"--cluster-signing-key-file={pki.ca.pair.key}",
        f"--root-ca-file={pki.ca.pair.cert}",
        f"--service-account-private-key-file={pki.service_account_key}",
        "--use-service-account-credentials=true",
        "--allocate-node-cidrs=true",
        f"--cluster-cidr={network.cluster_cidr}",
        f"--node-cidr-mask-size={network.node_cidr_mask_size}",
        f"--service-cluster-ip-range={network.service_cidr}",
        "--cluster-name=nodeagent-test",
    ]


def scheduler_argv(binary: Path, *, layout: Layout, ports: Ports, pki: Pki) -> list[str]:
    return _component_common(
        binary,
        kubeconfig_path=layout.kubeconfigs / "scheduler.conf",
        port=ports.scheduler,
        cert_dir=layout.component_dir("kube-scheduler"),
        pki=pki,
    )

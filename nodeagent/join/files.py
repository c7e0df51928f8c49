"""What ``nodeagent join`` leaves on the node once discovery has succeeded.

The files kubeadm's ``kubelet-start`` phase writes (``bootstrap-kubelet.conf``,
``kubeadm-flags.env``, and ``pki/ca.crt`` that its kubelet configuration names as the client CA):

- the **bootstrap kubeconfig** (0600) at ``node.bootstrapKubeconfig``, or beside
  ``node.kubeconfig`` as ``bootstrap-kubeconfig`` when the config leaves it empty: kubeadm's
  ``CreateWithToken`` shape (cluster ``kubernetes``, user ``tls-bootstrap-token-user``), the
  server from the verified ``cluster-info``, the verified CA inline, the token as the
  credential. The agent's credentials manager uses it for TLS bootstrap while
  ``node.kubeconfig`` does not exist;
- the **cluster CA** (0644) at ``<rootDir>/pki/ca.crt``, unless the configuration names its
  own ``kubelet.authentication.x509.clientCAFile``: the agent verifies the apiserver's client
  certificate with it when the apiserver comes for logs, exec or port-forward (without it those
  answer 401), as kubeadm's kubelet does with ``/etc/kubernetes/pki/ca.crt``;
- the **cluster's kubelet configuration** (0644) at ``<rootDir>/kubelet-config.yaml`` (or where
  ``node.clusterKubeletConfig`` says), when the cluster publishes ``kube-system/kubelet-config``
  as kubeadm does: a KubeletConfiguration the agent applies beneath the ``kubelet:`` section
  of its own file (:mod:`nodeagent.config.clusterkubelet`), as kubeadm's kubelet gets
  ``/var/lib/kubelet/config.yaml``; the operator's ``/etc/nodeagent/config.yaml`` is never
  written;
- the **flags file** ``<rootDir>/join-flags.env``: ``NODEAGENT_JOIN_ARGS="..."`` with
  ``--bootstrap-kubeconfig``, ``--client-ca-file`` when join wrote the CA,
  ``--cluster-kubelet-config`` when it wrote the cluster's kubelet configuration, and the operator's
  ``--node-name`` / ``--node-ip`` as the agent's flags. ``nodeagent.service`` reads it
  (``EnvironmentFile=``) and puts ``$NODEAGENT_JOIN_ARGS`` before the admin's
  ``$NODEAGENT_ARGS``, so a flag in ``/etc/default/nodeagent`` still wins.

The bootstrap kubeconfig is written first and the flags file last: a flags file never points at
a missing file.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import yaml

from nodeagent.atomicfile import write_atomic
from nodeagent.certificate.store import write_private
from nodeagent.config.clusterkubelet import FILE_NAME as KUBELET_CONFIG_FILE
from nodeagent.join.token import BootstrapToken, JoinError

FLAGS_FILE: Final = "join-flags.env"
FLAGS_VARIABLE: Final = "NODEAGENT_JOIN_ARGS"
BOOTSTRAP_FILE: Final = "bootstrap-kubeconfig"
CLIENT_CA_FILE: Final = "pki/ca.crt"  # under the root dir
CLUSTER_NAME: Final = "kubernetes"  # kubeadm's DefaultClusterName
BOOTSTRAP_USER: Final = "tls-bootstrap-token-user"  # kubeadm's discovery TokenUser
_SAFE: Final = re.compile(r"[^\s\"'\\$`]+")  # a systemd $VAR splits on whitespace, no quoting


@dataclass(frozen=True, kw_only=True)
class JoinPaths:
    kubeconfig: Path  # written by TLS bootstrap, never by join
    bootstrap_kubeconfig: Path
    flags_file: Path
    client_ca: Path | None = None  # None: the configuration names its own client CA
    kubelet_config: Path | None = None  # None: the cluster publishes no kubelet configuration

    def written(self) -> tuple[Path, ...]:
        ca = () if self.client_ca is None else (self.client_ca,)
        kubelet = () if self.kubelet_config is None else (self.kubelet_config,)
        return (self.bootstrap_kubeconfig, *ca, *kubelet, self.flags_file)


def paths_for(
    *,
    kubeconfig: str,
    bootstrap_kubeconfig: str,
    root_dir: str,
    client_ca_file: str = "",
    cluster_kubelet_config: str = "",
) -> JoinPaths:
    """Where join writes; ``kubelet_config`` is where the cluster's kubelet configuration goes
    if the cluster publishes one (the caller drops it when not)."""
    node_kubeconfig = Path(kubeconfig)
    boot = (
        Path(bootstrap_kubeconfig)
        if bootstrap_kubeconfig
        else node_kubeconfig.with_name(BOOTSTRAP_FILE)
    )
    return JoinPaths(
        kubeconfig=node_kubeconfig,
        bootstrap_kubeconfig=boot,
        flags_file=Path(root_dir) / FLAGS_FILE,
        client_ca=None if client_ca_file else Path(root_dir) / CLIENT_CA_FILE,
        kubelet_config=Path(cluster_kubelet_config or Path(root_dir) / KUBELET_CONFIG_FILE),
    )


def agent_flags(paths: JoinPaths, *, node_name: str | None, node_ip: str | None) -> tuple[str, ...]:
    """The ``nodeagent run`` flags the join decided, each one word (refused otherwise)."""
    flags = [f"--bootstrap-kubeconfig={paths.bootstrap_kubeconfig}"]
    if paths.client_ca is not None:
        flags.append(f"--client-ca-file={paths.client_ca}")
    if paths.kubelet_config is not None:
        flags.append(f"--cluster-kubelet-config={paths.kubelet_config}")
    if node_name:
        flags.append(f"--hostname-override={node_name}")
    if node_ip:
        flags.append(f"--node-ip={node_ip}")
    for flag in flags:
        if not _SAFE.fullmatch(flag):
            raise JoinError(
                f"{flag!r} cannot go into {FLAGS_VARIABLE}: systemd splits it on whitespace "
                "and does not unquote; choose a path or value without spaces or quotes"
            )
    return tuple(flags)


def render_bootstrap_kubeconfig(*, server: str, ca_pem: bytes, token: BootstrapToken) -> str:
    context = f"{BOOTSTRAP_USER}@{CLUSTER_NAME}"
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": CLUSTER_NAME,
                "cluster": {
                    "certificate-authority-data": base64.b64encode(ca_pem).decode("ascii"),
                    "server": server,
                },
            }
        ],
        "contexts": [
            {"name": context, "context": {"cluster": CLUSTER_NAME, "user": BOOTSTRAP_USER}}
        ],
        "current-context": context,
        "users": [{"name": BOOTSTRAP_USER, "user": {"token": token.value}}],
    }
    return yaml.safe_dump(doc, sort_keys=False)


def render_flags_env(flags: Sequence[str]) -> str:
    return (
        "# Written by `nodeagent join`; read by nodeagent.service (EnvironmentFile=).\n"
        "# Flags in NODEAGENT_ARGS (/etc/default/nodeagent) come after these and win.\n"
        f'{FLAGS_VARIABLE}="{" ".join(flags)}"\n'
    )


def write_join_files(
    paths: JoinPaths,
    *,
    server: str,
    ca_pem: bytes,
    token: BootstrapToken,
    flags: Sequence[str],
    kubelet_config: str | None = None,
) -> None:
    """Write every file; ``kubelet_config`` (the rendered cluster kubelet configuration) goes
    to ``paths.kubelet_config`` when both are given."""
    write_private(
        paths.bootstrap_kubeconfig,
        render_bootstrap_kubeconfig(server=server, ca_pem=ca_pem, token=token).encode(),
    )
    if paths.client_ca is not None:
        write_atomic(paths.client_ca, ca_pem, mode=0o644, dir_mode=0o700)
    if paths.kubelet_config is not None and kubelet_config is not None:
        write_atomic(paths.kubelet_config, kubelet_config.encode(), mode=0o644, dir_mode=0o700)
    write_atomic(paths.flags_file, render_flags_env(flags).encode(), mode=0o644, dir_mode=0o700)


def read_flags_env(path: Path) -> tuple[str, ...]:
    """The flags a flags file holds (for callers that start the agent without systemd)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip() == FLAGS_VARIABLE:
            return tuple(value.strip().strip('"').split())
    return ()

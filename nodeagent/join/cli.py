"""``nodeagent join <apiserver> --token <id.secret> --discovery-token-ca-cert-hash sha256:<hex>``.

The steps, in kubeadm's order, each one refusing with a message that names what is wrong:

1. check the input (token form, hash form, a hash or the explicit unsafe flag, the
   configuration file) and that this node has not joined already (``node.kubeconfig``);
2. discovery (:mod:`.discovery`): the cluster's server and CA, verified;
3. with the bootstrap token over the verified TLS: no Ready Node has this node's name; then
   the cluster's kubelet configuration, ``kube-system/kubelet-config`` (:mod:`.kubeletconfig`),
   checked against this node's configuration (a wrong one stops the join here);
4. write the bootstrap kubeconfig, the cluster CA, the cluster's kubelet configuration and the
   flags file (:mod:`.files`): the first write;
5. restart ``nodeagent.service`` under systemd and wait for TLS bootstrap (the agent's
   credentials manager, the CSR path of ``nodeagent run``), then remove the bootstrap
   kubeconfig as kubeadm does; without systemd, or with ``--no-start``, print the command
   that starts the agent with the joined settings.

Exit codes: 0 joined (or files written with ``--no-start``), 1 refused or failed, 2 bad usage.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any, Final, TextIO

from nodeagent import config, hostinfo
from nodeagent.apiserver import ApiError
from nodeagent.config import yamldoc
from nodeagent.config.clusterkubelet import ClusterKubelet, render
from nodeagent.config.problem import show
from nodeagent.config.units import Duration
from nodeagent.errors import ConfigError
from nodeagent.join import files, kubeletconfig, start
from nodeagent.join.discovery import DEFAULT_TIMEOUT
from nodeagent.join.token import BootstrapToken, JoinError, parse_pins, parse_token

DEFAULT_CONFIG: Final = "/etc/nodeagent/config.yaml"
EXIT_OK: Final = 0
EXIT_REFUSED: Final = 1
EXIT_USAGE: Final = 2
UNSAFE_FLAG: Final = "--discovery-token-unsafe-skip-ca-verification"

DESCRIPTION: Final = """\
Join this node to a cluster the way `kubeadm join` does with token discovery: fetch
kube-public/cluster-info from API_SERVER_ENDPOINT, trust it only if its JWS signature verifies
with the bootstrap token and the cluster CA's public key matches a
--discovery-token-ca-cert-hash, download the cluster's kubelet configuration
(kube-system/kubelet-config, as kubeadm does) into <rootDir>/kubelet-config.yaml, then write
the bootstrap kubeconfig and the agent's flags (<rootDir>/join-flags.env) and start TLS
bootstrap. Nothing is written when a check fails. The --config file is never written: its
kubelet: section and the agent's flags win over the cluster's kubelet configuration.
On the control plane, `kubeadm token create --print-join-command` (or `make up`, for the
local cluster) prints the command to run here."""


def register(sub: Any) -> None:
    parser = sub.add_parser(
        "join",
        help="join this node to a cluster with a bootstrap token (kubeadm's token discovery)",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "api_server_endpoint",
        metavar="API_SERVER_ENDPOINT",
        help="host:port of the API server to discover the cluster from (e.g. 10.0.0.1:6443)",
    )
    parser.add_argument(
        "--token", required=True, metavar="ID.SECRET",
        help="the bootstrap token, [a-z0-9]{6}.[a-z0-9]{16}: verifies cluster-info and "
        "authenticates TLS bootstrap",
    )  # fmt: skip
    parser.add_argument(
        "--discovery-token-ca-cert-hash", dest="ca_cert_hashes", action="append", default=[],
        metavar="sha256:HEX",
        help="the cluster CA's public-key pin (SHA-256 of its DER SubjectPublicKeyInfo); "
        "repeat it to accept any of several CAs",
    )  # fmt: skip
    parser.add_argument(
        UNSAFE_FLAG, dest="unsafe_skip_ca_verification", action="store_true",
        help="trust the CA that cluster-info names without a pin (the JWS is still checked)",
    )  # fmt: skip
    parser.add_argument(
        "--config", default=DEFAULT_CONFIG, metavar="PATH",
        help=f"the agent's NodeAgentConfiguration (default {DEFAULT_CONFIG}): where the "
        "kubeconfigs and the root dir are",
    )  # fmt: skip
    parser.add_argument(
        "--node-name", metavar="NAME",
        help="the Node's name (the agent's --hostname-override); default: the host name",
    )  # fmt: skip
    parser.add_argument(
        "--node-ip", metavar="IP[,IP]", help="the IP (or IPv4,IPv6 pair) the Node reports"
    )
    parser.add_argument(
        "--discovery-timeout", type=_duration, default=DEFAULT_TIMEOUT, metavar="DURATION",
        help="how long to keep asking for a signed cluster-info (default 5m0s)",
    )  # fmt: skip
    parser.add_argument(
        "--tls-bootstrap-timeout", type=_duration, default=start.TLS_BOOTSTRAP_TIMEOUT,
        metavar="DURATION", help="how long to wait for the agent's TLS bootstrap (default 5m0s)",
    )  # fmt: skip
    parser.add_argument(
        "--no-start", action="store_true",
        help="write the files only; do not restart nodeagent.service (print how to start it)",
    )  # fmt: skip
    parser.set_defaults(func=run)


def _duration(text: str) -> float:
    try:
        value = Duration.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if value.nanoseconds <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value.seconds


def server_url(endpoint: str) -> str:
    """``https://host:port`` from kubeadm's ``host:port`` (an ``https://`` URL is accepted)."""
    text = endpoint.strip().removeprefix("https://").rstrip("/")
    if not text or "/" in text or "://" in text or ":" not in text:
        raise JoinError(
            f"API_SERVER_ENDPOINT {endpoint!r}: expected host:port (e.g. 10.0.0.1:6443)"
        )
    return f"https://{text}"


def run(
    args: argparse.Namespace,
    *,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    steps: Steps | None = None,
) -> int:
    try:
        return asyncio.run(join(args, out=out, steps=steps or Steps()))
    except ConfigError as e:
        print(f"nodeagent join: invalid configuration: {e}", file=err)
        return EXIT_USAGE
    except JoinError as e:
        print(f"nodeagent join: {e}", file=err)
        return EXIT_REFUSED


class Steps:
    """The effects ``join`` has on the world; unit tests replace them."""

    def __init__(self) -> None:
        from nodeagent.apiserver.discovery import get_cluster_info

        self.fetch = get_cluster_info
        self.ready_node_exists = start.ready_node_exists
        self.fetch_kubelet_config = kubeletconfig.fetch_with_token
        self.systemd_manages_agent: Callable[[], bool] = start.systemd_manages_agent
        self.restart_agent: Callable[[], str | None] = start.restart_agent
        self.wait_for_tls_bootstrap = start.wait_for_tls_bootstrap
        self.hostname: Callable[[], str] = hostinfo.hostname


async def join(args: argparse.Namespace, *, out: TextIO, steps: Steps) -> int:
    from nodeagent.join.discovery import discover

    say = partial(print, file=out, flush=True)
    token = parse_token(args.token)
    pins = parse_pins(args.ca_cert_hashes)
    if not pins and not args.unsafe_skip_ca_verification:
        raise JoinError(
            "using token-based discovery without --discovery-token-ca-cert-hash can be unsafe: "
            f"pass the cluster CA's hash, or {UNSAFE_FLAG} to continue without one"
        )
    server = server_url(args.api_server_endpoint)
    cfg = _resolve(args, cluster_kubelet=_NONE_YET)  # join writes that file, it need not exist
    node_name = (cfg.node.hostname_override or steps.hostname()).strip().lower()
    paths = files.paths_for(
        kubeconfig=cfg.node.kubeconfig,
        bootstrap_kubeconfig=cfg.node.bootstrap_kubeconfig,
        root_dir=cfg.node.root_dir,
        client_ca_file=cfg.kubelet.authentication.x509.client_ca_file,
        cluster_kubelet_config=cfg.node.cluster_kubelet_config,
    )
    flags = files.agent_flags(paths, node_name=args.node_name, node_ip=args.node_ip)
    if paths.kubeconfig.exists():
        raise JoinError(
            f"this node has joined already: {paths.kubeconfig} exists (node.kubeconfig); "
            "remove it and the agent's pki directory to join again"
        )
    info = await discover(
        server=server,
        token=token,
        pins=pins,
        fetch=steps.fetch,
        give_up_after=args.discovery_timeout,
        say=say,
    )
    try:
        taken = await steps.ready_node_exists(
            server=info.server, ca_pem=info.ca_pem, token=token, node_name=node_name
        )
    except ApiError as e:
        raise JoinError(
            f"cannot get Node {node_name!r} from {info.server} (the server cluster-info names) "
            f"with the bootstrap token: {e}"
        ) from None
    if taken:
        raise JoinError(
            f'a Node with name "{node_name}" and status "Ready" already exists in the cluster: '
            "delete it, or give this node another name (--node-name)"
        )
    cluster = await _cluster_kubelet(
        args, server=info.server, ca_pem=info.ca_pem, token=token, steps=steps, say=say
    )
    if cluster is None:
        paths = replace(paths, kubelet_config=None)
        flags = files.agent_flags(paths, node_name=args.node_name, node_ip=args.node_ip)
    text = None if cluster is None else render(cluster, header=_header(info.server, args.config))
    files.write_join_files(
        paths,
        server=info.server,
        ca_pem=info.ca_pem,
        token=token,
        flags=flags,
        kubelet_config=text,
    )
    say(f"[join] Wrote the bootstrap kubeconfig {paths.bootstrap_kubeconfig} ({info.server})")
    if paths.client_ca is not None:
        say(f"[join] Wrote the cluster CA {paths.client_ca} (the agent's client CA)")
    if cluster is not None and paths.kubelet_config is not None:
        say(
            f"[kubelet-start] Wrote the cluster's kubelet configuration ({kubeletconfig.WHAT}) "
            f"to {paths.kubelet_config}; fields in {args.config} and flags win over it"
        )
        if cluster.skipped:
            left = ", ".join(f"{name}: {show(value)}" for name, value in cluster.skipped)
            say(
                f"[kubelet-start] WARNING: left out of {paths.kubelet_config}, nodeagent does "
                f"not implement: {left}"
            )
    say(f"[join] Wrote the agent's flags {paths.flags_file}: {' '.join(flags)}")
    if args.no_start or not steps.systemd_manages_agent():
        why = "--no-start" if args.no_start else f"no systemd managing {start.UNIT}"
        say(
            f"[join] Not starting the agent ({why}). Start it with:\n"
            f"  nodeagent run --config {args.config} {' '.join(flags)}\n"
            f"It requests its client certificate (TLS bootstrap) as node {node_name!r}."
        )
        return EXIT_OK
    say(f"[kubelet-start] Restarting {start.UNIT}")
    if problem := steps.restart_agent():
        say(
            f"[kubelet-start] WARNING: unable to restart {start.UNIT}: {problem}; systemd "
            "retries it (Restart=always), see journalctl -u nodeagent.service"
        )
    say(
        "[kubelet-start] Waiting for the agent to perform the TLS Bootstrap "
        f"(up to {Duration.of(seconds=args.tls_bootstrap_timeout)})"
    )
    await steps.wait_for_tls_bootstrap(paths.kubeconfig, give_up_after=args.tls_bootstrap_timeout)
    paths.bootstrap_kubeconfig.unlink(missing_ok=True)  # the token is no longer needed here
    say(
        "\nThis node has joined the cluster:\n"
        "* Certificate signing request was sent to apiserver and a response was received.\n"
        f"* The agent uses its own client certificate now ({paths.kubeconfig}).\n\n"
        f"Run 'kubectl get nodes' on the control-plane to see node {node_name!r} join the "
        "cluster."
    )
    return EXIT_OK


_NONE_YET: Final = ClusterKubelet(data={}, doc=yamldoc.Document(data={}))


async def _cluster_kubelet(
    args: argparse.Namespace,
    *,
    server: str,
    ca_pem: bytes,
    token: BootstrapToken,
    steps: Steps,
    say: Callable[[str], None],
) -> ClusterKubelet | None:
    """The cluster's kubelet configuration, checked with this node's configuration over it;
    None when the cluster publishes none (said, and the join goes on)."""
    say(f"[kubelet-start] Downloading the cluster's kubelet configuration ({kubeletconfig.WHAT})")
    try:
        fetched = await steps.fetch_kubelet_config(server=server, ca_pem=ca_pem, token=token)
    except ApiError as e:
        raise JoinError(
            f"cannot get {kubeletconfig.WHAT} from {server} with the bootstrap token: {e}; "
            "nothing was written"
        ) from None
    if isinstance(fetched, kubeletconfig.NotPublished):
        say(
            f"[kubelet-start] {fetched.reason}: no cluster-wide kubelet settings; the agent "
            f"runs with {args.config} alone (kubeadm would stop here)"
        )
        return None
    try:
        cluster = kubeletconfig.from_configmap(fetched)
        _resolve(args, cluster_kubelet=cluster)
    except ConfigError as e:
        raise JoinError(
            f"the cluster's kubelet configuration is not valid for this node; nothing was "
            f"written:\n{e}"
        ) from None
    return cluster


def _header(server: str, config_path: str) -> str:
    return (
        f"Written by `nodeagent join` from {kubeletconfig.SOURCE} of {server}.\n"
        f"The agent applies it beneath the kubelet: section of {config_path}: a field set\n"
        "there, or a flag, wins. `nodeagent join` replaces this file; edit that one instead."
    )


def _resolve(
    args: argparse.Namespace, *, cluster_kubelet: ClusterKubelet | None = None
) -> config.Config:
    """The agent's configuration with the join's name and IP over it, checked by the same rules
    as ``nodeagent run`` (an error names ``--node-name``, not the agent's flag)."""
    overlay = argparse.Namespace(
        config=args.config, hostname_override=args.node_name, node_ip=args.node_ip
    )
    try:
        return config.resolve(overlay, cluster_kubelet=cluster_kubelet)
    except ConfigError as e:
        if e.path == "--hostname-override":
            raise ConfigError("--node-name", e.message, e.value) from None
        raise

"""Command line: ``nodeagent run`` (the daemon), ``nodeagent config ...``, ``nodeagent version``.

Each subcommand is registered by the package that owns it (``config.cli.register``) and sets
``func``; this module only parses and dispatches.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence

from nodeagent import __version__, cgroups, config
from nodeagent.cm import cli as swap_cli
from nodeagent.cm.host import fail_swap_on_refusal
from nodeagent.config import cli as config_cli
from nodeagent.errors import ConfigError
from nodeagent.join import cli as join_cli
from nodeagent.nodeshutdown import cli as shutdown_cli
from nodeagent.nodestatus import cli as status_cli
from nodeagent.proxy import cli as proxy_cli
from nodeagent.stats import cli as stats_cli

EXIT_USAGE = 2
EXIT_FAILURE = 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nodeagent",
        description="The node half of Kubernetes: kubelet and kube-proxy in one daemon.",
    )
    parser.add_argument("--version", action="version", version=f"nodeagent {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = sub.add_parser("run", help="run the node agent daemon")
    config.add_flags(run)
    run.set_defaults(func=_run)

    config_cli.register(sub)
    join_cli.register(sub)
    status_cli.register(sub)
    proxy_cli.register(sub)
    shutdown_cli.register(sub)
    stats_cli.register(sub)
    swap_cli.register(sub)

    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=_version)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    code: int = func(args)
    return code


def _version(args: argparse.Namespace) -> int:
    print(f"nodeagent {__version__}")
    return 0


def check_credential_providers(cfg: config.Config) -> None:
    """The credential provider plugin config and binaries, checked before anything starts
    (the kubelet refuses to start on a bad one); raises ConfigError listing each problem."""
    node = cfg.node
    if not node.image_credential_provider_config_path:
        return
    from nodeagent.config import features
    from nodeagent.config.credentialproviders import ProviderConfigError, load_providers

    try:
        load_providers(
            node.image_credential_provider_config_path,
            node.image_credential_provider_bin_dir,
            features.effective(cfg.kubelet.feature_gates),
        )
    except ProviderConfigError as e:
        errors = [
            ConfigError("node.imageCredentialProviderConfigPath", f"{where}: {message}")
            for where, message in e.problems
        ]
        first = errors[0]
        raise ConfigError(first.path, first.message, more=tuple(errors[1:])) from e


def _run(args: argparse.Namespace) -> int:
    from nodeagent import agent, log

    try:
        cfg = config.resolve(args)
        check_credential_providers(cfg)
    except ConfigError as e:
        config_cli.report(e)
        return EXIT_USAGE
    fs_type = cgroups.host_cgroup_fs()
    v2 = fs_type == "cgroup2"
    refusal = cgroups.cgroup_v1_refusal(
        cgroup_v2=v2, fail_cgroup_v1=cfg.kubelet.fail_cgroup_v1, fs_type=fs_type
    )
    if refusal:
        print(f"nodeagent: {refusal}", file=sys.stderr)
        return EXIT_FAILURE
    if swap_refusal := fail_swap_on_refusal(cfg.kubelet.fail_swap_on):
        # The kubelet's words, then what to change here (kubelet.failSwapOn is the flag).
        print(
            f"nodeagent: {swap_refusal} (kubelet.failSwapOn is true: set kubelet.failSwapOn: "
            "false to run with swap on)",
            file=sys.stderr,
        )
        return EXIT_FAILURE
    log.setup(verbosity=cfg.kubelet.logging.verbosity, environ=os.environ)
    if not v2:
        log.get_logger("agent").warning(
            "cgroup v1 host: running in maintenance mode (kubelet.failCgroupV1 is false); swap is"
            " NoSwap and per-container PSI is unavailable",
            cgroup_fs=fs_type or "",
        )
    return asyncio.run(agent.build(cfg, environ=os.environ).run())


if __name__ == "__main__":
    sys.exit(main())

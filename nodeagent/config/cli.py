"""The ``nodeagent config`` subcommands (placeholder: ``show``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nodeagent import config
from nodeagent.errors import ConfigError

EXIT_USAGE = 2


def register(sub: Any) -> None:
    cfg = sub.add_parser("config", help="inspect the configuration")
    cfg.set_defaults(func=lambda a: (cfg.print_help(sys.stderr), EXIT_USAGE)[1])
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="SUBCOMMAND")
    show = cfg_sub.add_parser("show", help="print the effective configuration with defaults")
    config.add_flags(show)
    show.set_defaults(func=_show)


def _show(args: argparse.Namespace) -> int:
    try:
        print(config.render(config.resolve(args)), end="")
    except ConfigError as e:
        print(f"nodeagent: invalid configuration: {e}", file=sys.stderr)
        return EXIT_USAGE
    return 0

"""``nodeagent config show | validate | reference``.

``show`` prints the effective configuration (file + flags + defaults) as YAML; ``validate``
prints nothing on success; both print every problem on stderr and exit 2 when the
configuration is invalid. ``reference`` prints the Markdown reference generated from the
schema (``docs/configuration.md`` is its output).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from nodeagent import config
from nodeagent.errors import ConfigError

EXIT_OK = 0
EXIT_INVALID = 2


def register(sub: Any) -> None:
    cfg = sub.add_parser("config", help="inspect and check the configuration")
    cfg.set_defaults(func=lambda _args: _usage(cfg))
    cfg_sub = cfg.add_subparsers(dest="config_command", metavar="SUBCOMMAND")

    show = cfg_sub.add_parser("show", help="print the effective configuration with defaults")
    config.add_flags(show)
    show.set_defaults(func=_show)

    validate = cfg_sub.add_parser("validate", help="check the configuration (exit 0 or 2)")
    config.add_flags(validate)
    validate.set_defaults(func=_validate)

    reference = cfg_sub.add_parser("reference", help="print the Markdown configuration reference")
    reference.set_defaults(func=_reference)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_INVALID


def report(error: ConfigError) -> None:
    """Print every problem of ``error`` on stderr, one per line."""
    print("nodeagent: invalid configuration:", file=sys.stderr)
    for line in str(error).splitlines():
        print(f"  {line}", file=sys.stderr)


def _show(args: argparse.Namespace) -> int:
    try:
        effective = config.resolve(args)
    except ConfigError as e:
        report(e)
        return EXIT_INVALID
    sys.stdout.write(config.render(effective))
    return EXIT_OK


def _validate(args: argparse.Namespace) -> int:
    try:
        config.resolve(args)
    except ConfigError as e:
        report(e)
        return EXIT_INVALID
    return EXIT_OK


def _reference(args: argparse.Namespace) -> int:
    sys.stdout.write(config.reference())
    return EXIT_OK

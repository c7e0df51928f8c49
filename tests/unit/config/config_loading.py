"""Helpers for the config tests: parse flags and load YAML the way `nodeagent` does."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from nodeagent import config
from nodeagent.errors import ConfigError

HEADER = "apiVersion: nodeagent.io/v1alpha1\nkind: NodeAgentConfiguration\n"

Load = Callable[..., config.Config]
Fail = Callable[..., ConfigError]


def parse_flags(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(exit_on_error=False)
    config.add_flags(parser)
    return parser.parse_args(list(argv))

"""Configuration: one YAML file plus kubelet-compatible flags (placeholder API).

- ``add_flags(parser)`` adds ``--config`` and the kubelet-compatible flags to a parser;
- ``resolve(args)`` loads the file, applies defaults, then flags, validates, and returns a
  :class:`Config` or raises :class:`nodeagent.errors.ConfigError`;
- ``render(config)`` gives the effective configuration as YAML (``nodeagent config show``).
"""

from __future__ import annotations

import argparse

import msgspec
import yaml

from nodeagent.errors import ConfigError


class LoggingConfiguration(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    verbosity: int = 0


class KubeletConfiguration(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    logging: LoggingConfiguration = msgspec.field(default_factory=LoggingConfiguration)


class ProxyConfiguration(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    pass


class Config(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    api_version: str = msgspec.field(name="apiVersion", default="nodeagent.io/v1alpha1")
    kind: str = "NodeAgentConfiguration"
    kubelet: KubeletConfiguration = msgspec.field(default_factory=KubeletConfiguration)
    proxy: ProxyConfiguration = msgspec.field(default_factory=ProxyConfiguration)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", help="path to the NodeAgentConfiguration YAML file")
    parser.add_argument("-v", "--v", dest="verbosity", type=int, default=None,
                        help="log verbosity (like the kubelet's -v)")


def resolve(args: argparse.Namespace) -> Config:
    data: object = {}
    if args.config:
        try:
            with open(args.config, encoding="utf-8") as f:
                data = yaml.safe_load(f) or {}
        except OSError as e:
            raise ConfigError("--config", f"cannot read file: {e.strerror}", args.config) from e
    try:
        cfg = msgspec.convert(data, Config)
    except msgspec.ValidationError as e:
        raise ConfigError("config", str(e)) from e
    if args.verbosity is not None:
        cfg.kubelet.logging.verbosity = args.verbosity
    return cfg


def render(config: Config) -> str:
    return yaml.safe_dump(msgspec.to_builtins(config), sort_keys=False)

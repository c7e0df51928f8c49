"""The kubelet-compatible command-line flags, and how they override the file.

Every flag defaults to ``None`` so "not given" is distinguishable from any value. A given
flag replaces the field it names (``--node-labels`` replaces ``node.nodeLabels`` as a whole;
repeating the flag merges its values). Relative paths on flags are made absolute against the
current directory.
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from nodeagent.config import syntax
from nodeagent.config.problem import show
from nodeagent.config.units import parse_bool
from nodeagent.errors import ConfigError


def _path(values: Sequence[str]) -> object:
    text = values[-1]
    return os.path.abspath(text) if text else ""


def _text(values: Sequence[str]) -> object:
    return values[-1]


def _bool(values: Sequence[str]) -> object:
    return parse_bool(values[-1])


_INT = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)


def _int(values: Sequence[str]) -> object:
    """Go's ``strconv.ParseInt(s, 10, 64)``: ASCII digits, no spaces or underscores."""
    text = values[-1]
    if not _INT.fullmatch(text) or not -(2**63) <= (number := int(text)) < 2**63:
        raise ValueError(f"{show(text)} is not an integer in the int64 range")
    return number


def _labels(values: Sequence[str]) -> object:
    merged: dict[str, str] = {}
    for text in values:
        merged.update(syntax.parse_labels(text))
    return merged


def _taints(values: Sequence[str]) -> object:
    return [syntax.parse_taint(s) for text in values for s in text.split(",") if s.strip()]


@dataclass(frozen=True)
class Flag:
    names: tuple[str, ...]
    dest: str
    path: str  # the field it overrides
    parse: Callable[[Sequence[str]], object]
    help: str
    metavar: str = ""
    optional_value: bool = False  # a bool flag: "--x" means true, "--x=false" works
    repeatable: bool = False  # values of repeated flags are merged

    @property
    def name(self) -> str:
        return self.names[-1]


FLAGS: tuple[Flag, ...] = (
    Flag(
        ("--kubeconfig",),
        "kubeconfig",
        "node.kubeconfig",
        _path,
        "kubeconfig with the node's credentials",
        "PATH",
    ),
    Flag(
        ("--bootstrap-kubeconfig",),
        "bootstrap_kubeconfig",
        "node.bootstrapKubeconfig",
        _path,
        "kubeconfig with a bootstrap token for TLS bootstrap",
        "PATH",
    ),
    Flag(
        ("--cluster-kubelet-config",),
        "cluster_kubelet_config",
        "node.clusterKubeletConfig",
        _path,
        "KubeletConfiguration file of cluster-wide settings, beneath the config's kubelet:",
        "PATH",
    ),
    Flag(
        ("--hostname-override",),
        "hostname_override",
        "node.hostnameOverride",
        _text,
        "node name to use instead of the host name",
        "NAME",
    ),
    Flag(
        ("--node-ip",),
        "node_ip",
        "node.nodeIP",
        _text,
        "node IP (or IPv4,IPv6 pair) to report",
        "IP[,IP]",
    ),
    Flag(
        ("--node-labels",),
        "node_labels",
        "node.nodeLabels",
        _labels,
        "labels to register the node with",
        "K=V[,K=V...]",
        repeatable=True,
    ),
    Flag(
        ("--register-with-taints",),
        "register_with_taints",
        "kubelet.registerWithTaints",
        _taints,
        "taints to register the node with",
        "KEY[=VALUE]:EFFECT[,...]",
        repeatable=True,
    ),
    Flag(
        ("--register-node",),
        "register_node",
        "kubelet.registerNode",
        _bool,
        "register the node with the API server (--register-node=false: manual)",
        "BOOL",
        optional_value=True,
    ),
    Flag(
        ("--container-runtime-endpoint",),
        "container_runtime_endpoint",
        "kubelet.containerRuntimeEndpoint",
        _text,
        "CRI socket URL",
        "URL",
    ),
    Flag(
        ("--fail-cgroupv1",),
        "fail_cgroup_v1",
        "kubelet.failCgroupV1",
        _bool,
        "refuse to start on a cgroup v1 host (--fail-cgroupv1=false: maintenance mode)",
        "BOOL",
        optional_value=True,
    ),
    Flag(("--root-dir",), "root_dir", "node.rootDir", _path, "state directory", "PATH"),
    Flag(
        ("--client-ca-file",),
        "client_ca_file",
        "kubelet.authentication.x509.clientCAFile",
        _path,
        "CA bundle that verifies the client certificates of requests to the node's API",
        "PATH",
    ),
    Flag(
        ("--registry-qps",),
        "registry_qps",
        "kubelet.registryPullQPS",
        _int,
        "image pulls started per second (0: no limit)",
        "N",
    ),
    Flag(
        ("--registry-burst",),
        "registry_burst",
        "kubelet.registryBurst",
        _int,
        "image pulls that may start at once above --registry-qps",
        "N",
    ),
    Flag(
        ("--image-credential-provider-config",),
        "image_credential_provider_config",
        "node.imageCredentialProviderConfigPath",
        _path,
        "credential provider plugin config file or directory",
        "PATH",
    ),
    Flag(
        ("--image-credential-provider-bin-dir",),
        "image_credential_provider_bin_dir",
        "node.imageCredentialProviderBinDir",
        _path,
        "directory of the credential provider plugin executables",
        "PATH",
    ),
    Flag(("-v", "--v"), "verbosity", "kubelet.logging.verbosity", _int, "log verbosity", "N"),
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config", metavar="PATH", default=None, help="NodeAgentConfiguration YAML file"
    )
    for flag in FLAGS:
        kwargs: dict[str, Any] = {"dest": flag.dest, "default": None, "metavar": flag.metavar}
        if flag.optional_value:
            kwargs.update(nargs="?", const="true")
        if flag.repeatable:
            kwargs["action"] = "append"
        parser.add_argument(*flag.names, help=f"{flag.help} (overrides {flag.path})", **kwargs)


def overlay(data: dict[str, Any], args: argparse.Namespace) -> dict[str, str]:
    """Write the given flags into ``data``; return ``{field path: flag name}`` for each."""
    given: dict[str, str] = {}
    for flag in FLAGS:
        values = getattr(args, flag.dest, None)
        if values is None:
            continue
        if isinstance(values, str):
            values = [values]
        try:
            value = flag.parse(values)
        except ValueError as e:
            raise ConfigError(flag.name, str(e), values[-1]) from e
        _set(data, flag.path.split("."), value)
        given[flag.path] = flag.name
    return given


def _set(data: dict[str, Any], keys: list[str], value: object) -> None:
    for key in keys[:-1]:
        nxt = data.get(key)
        if nxt is None:
            nxt = data[key] = {}
        if not isinstance(nxt, dict):
            return  # the file has a non-mapping here; decoding reports it
        data = nxt
    data[keys[-1]] = value

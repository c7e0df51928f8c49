"""Syntax rules for Kubernetes names, labels, taints and addresses.

Each ``check_*`` function returns ``None`` when the value is fine, or a message that says
what is allowed. The rules are those of ``k8s.io/apimachinery/pkg/util/validation`` and of
the kubelet's ``--node-labels`` / ``--register-with-taints`` checks.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from typing import Final

from nodeagent.config.problem import show

_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")

TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")

# k8s.io/kubelet/pkg/apis/well_known_labels.go: what a kubelet may set on its own Node.
KUBELET_LABEL_NAMESPACES: Final = ("kubelet.kubernetes.io", "node.kubernetes.io")
KUBELET_LABELS: Final = (
    "beta.kubernetes.io/arch",
    "beta.kubernetes.io/instance-type",
    "beta.kubernetes.io/os",
    "failure-domain.beta.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "kubernetes.io/arch",
    "kubernetes.io/hostname",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)


def check_dns_subdomain(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS_SUBDOMAIN.fullmatch(value):
        return (
            "must be a lowercase RFC 1123 subdomain: lowercase letters, digits, '-' and '.', "
            "starting and ending with a letter or digit (e.g. example.com)"
        )
    return None


def check_qualified_name(value: str) -> str | None:
    """A label or taint key: ``[prefix/]name``."""
    prefix, slash, name = value.rpartition("/")
    if slash and not prefix:
        return "prefix part must not be empty"
    if slash and (msg := check_dns_subdomain(prefix)):
        return f"prefix part {msg}"
    if not name:
        return "name part must not be empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not _NAME.fullmatch(name):
        return (
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
            "and end with an alphanumeric character (e.g. 'MyName', 'my.name' or '123-abc'), "
            "with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        )
    return None


def check_label_value(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if value and not _NAME.fullmatch(value):
        return (
            "must be empty or consist of alphanumeric characters, '-', '_' or '.', and must "
            "start and end with an alphanumeric character (e.g. 'MyValue' or 'my_value')"
        )
    return None


def _namespace(key: str) -> str:
    return key.rpartition("/")[0]


def _is_kubernetes_label(key: str) -> bool:
    ns = _namespace(key)
    return any(ns == d or ns.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))


def is_kubelet_label(key: str) -> bool:
    """True when the kubelet (and the NodeRestriction admission plugin) allows ``key``."""
    if key in KUBELET_LABELS:
        return True
    ns = _namespace(key)
    return any(ns == n or ns.endswith("." + n) for n in KUBELET_LABEL_NAMESPACES)


def unknown_kubernetes_labels(keys: Iterable[str]) -> list[str]:
    """Keys in the kubernetes.io / k8s.io namespaces that a kubelet may not set, sorted."""
    return sorted(k for k in set(keys) if _is_kubernetes_label(k) and not is_kubelet_label(k))


def node_labels_message(unknown: Iterable[str]) -> str:
    """The kubelet's startup error for disallowed ``--node-labels``, with its exact text."""
    return (
        "unknown 'kubernetes.io' or 'k8s.io' labels specified with --node-labels: "
        f"[{' '.join(unknown)}]\n--node-labels in the 'kubernetes.io' namespace must begin with "
        f"an allowed prefix ({', '.join(KUBELET_LABEL_NAMESPACES)}) or be in the specifically "
        f"allowed set ({', '.join(KUBELET_LABELS)})"
    )


def parse_labels(text: str) -> dict[str, str]:
    """``k=v,k2=v2`` (the kubelet's ``--node-labels`` syntax); ``ValueError`` if malformed."""
    labels: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise ValueError(f"{show(item)} is not key=value (expected k1=v1,k2=v2)")
        labels[key.strip()] = value.strip()
    return labels


def parse_taint(spec: str) -> dict[str, str]:
    """``key[=value]:Effect`` -> ``{"key", "value", "effect"}``; ``ValueError`` if malformed."""
    head, colon, effect = spec.rpartition(":")
    if not colon or not head:
        raise ValueError(f"{show(spec)} is not a taint (expected key[=value]:Effect)")
    key, _, value = head.partition("=")
    return {"key": key, "value": value, "effect": effect}


def check_ip(value: str) -> str | None:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return "is not an IP address"
    return None


def check_node_ip(value: str) -> str | None:
    """One IP, or two of different families for dual-stack; ``0.0.0.0``/``::`` auto-detect."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > 2:
        return "must be one IP address, or two of different families (IPv4,IPv6)"
    ips = []
    for part in parts:
        try:
            ip = ipaddress.ip_address(part)
        except ValueError:
            return "is not an IP address" if len(parts) == 1 else f"has {show(part)}, not an IP"
        if ip.is_unspecified and len(parts) > 1:
            return f"has {part} (auto-detect), which cannot be combined with another address"
        if ip.is_loopback or ip.is_multicast or ip.is_link_local:
            return (
                "is a loopback, multicast or link-local address, which a node cannot use"
                if len(parts) == 1
                else f"has {part}, a loopback, multicast or link-local address"
            )
        ips.append(ip)
    if len(ips) == 2 and ips[0].version == ips[1].version:
        return "has two addresses of one family; dual-stack needs one IPv4 and one IPv6"
    return None


def check_cidrs(value: str) -> str | None:
    """One CIDR, or an IPv4 and an IPv6 CIDR separated by a comma (dual-stack)."""
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > 2:
        return "must be one CIDR, or two of different families (e.g. 10.244.0.0/16,fd00::/48)"
    nets = []
    for part in parts:
        try:
            nets.append(ipaddress.ip_network(part, strict=False))
        except ValueError:
            what = "is" if len(parts) == 1 else f"has {show(part)}, which is"
            return f"{what} not a CIDR (e.g. 10.244.0.0/16 or fd00::/48)"
    if len(nets) == 2 and nets[0].version == nets[1].version:
        return "has two blocks of one family; dual-stack needs one IPv4 and one IPv6"
    return None


def check_unix_endpoint(value: str) -> str | None:
    if not value.startswith("unix:///"):
        return "must be a unix socket URL with an absolute path, e.g. unix:///run/x.sock"
    return None


def check_absolute_path(value: str) -> str | None:
    return None if value.startswith("/") else "must be an absolute path"


def check_labels(labels: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """Syntax problems in a label map, as ``(key, message, bad key or value)``."""
    problems: list[tuple[str, str, str]] = []
    for key, value in labels.items():
        if msg := check_qualified_name(key):
            problems.append((key, f"label key {show(key)}: {msg}", key))
        elif msg := check_label_value(value):
            problems.append((key, f"label value {show(value)} of {show(key)} {msg}", value))
    return problems

"""Checks on a decoded ``Config``: header, ``node:``, ``proxy:``, then ``kubelet:``.

``validate`` returns every problem found, so one run reports them all.
"""

from __future__ import annotations

import ipaddress

from nodeagent.config import syntax
from nodeagent.config.problem import Findings, Problem, child, entry, item, show
from nodeagent.config.schema import API_VERSION, KIND, Config, NodeConfiguration, ProxyConfiguration
from nodeagent.config.validate_kubelet import validate_kubelet


def validate(config: Config) -> list[Problem]:
    out = Findings()
    if config.api_version != API_VERSION:
        out.add(
            "apiVersion",
            f"{show(config.api_version)} is not supported; must be {show(API_VERSION)}",
            config.api_version,
        )
    if config.kind != KIND:
        hint = ""
        if config.kind == "KubeletConfiguration":
            hint = " (a KubeletConfiguration's fields go under kubelet: in this file)"
        out.add("kind", f"{show(config.kind)} must be {show(KIND)}{hint}", config.kind)
    _node(config.node, out)
    validate_kubelet(config.kubelet, out)
    _proxy(config.proxy, out)
    return out.problems


def _node(n: NodeConfiguration, out: Findings) -> None:
    for name, value, required in (
        ("kubeconfig", n.kubeconfig, False),
        ("bootstrapKubeconfig", n.bootstrap_kubeconfig, False),
        ("rootDir", n.root_dir, True),
        ("imageCredentialProviderConfigPath", n.image_credential_provider_config_path, False),
        ("imageCredentialProviderBinDir", n.image_credential_provider_bin_dir, False),
    ):
        if value or required:
            out.check(child("node", name), value, syntax.check_absolute_path(value))
    if n.image_credential_provider_config_path and not n.image_credential_provider_bin_dir:
        out.add(
            "node.imageCredentialProviderBinDir",
            "must be set when node.imageCredentialProviderConfigPath is (the directory of the "
            "plugin executables)",
            n.image_credential_provider_bin_dir,
        )
    if n.hostname_override:
        out.check(
            "node.hostnameOverride",
            n.hostname_override,
            syntax.check_dns_subdomain(n.hostname_override.lower()),
        )
    if n.node_ip:
        out.check("node.nodeIP", n.node_ip, syntax.check_node_ip(n.node_ip))
    for key, message, bad in syntax.check_labels(n.node_labels):
        out.add(entry("node.nodeLabels", key), message, bad)
    if unknown := syntax.unknown_kubernetes_labels(n.node_labels):
        out.add("node.nodeLabels", syntax.node_labels_message(unknown), unknown)


DETECT_LOCAL_MODES = ("ClusterCIDR", "NodeCIDR")


def _bind_address(value: str) -> str | None:
    """Why ``value`` is not ``ip:port`` (kube-proxy's bind addresses), or None."""
    host, sep, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        number = -1
    if not sep or not 0 < number < 65536:
        return f"{show(value)} is not an ip:port (e.g. 0.0.0.0:10256)"
    return None


def _proxy(p: ProxyConfiguration, out: Findings) -> None:
    if p.cluster_cidr:
        out.check("proxy.clusterCIDR", p.cluster_cidr, syntax.check_cidrs(p.cluster_cidr))
    if p.service_cidr:
        out.check("proxy.serviceCIDR", p.service_cidr, syntax.check_cidrs(p.service_cidr))
    for i, cidr in enumerate(p.node_port_addresses):
        path = item("proxy.nodePortAddresses", i)
        if cidr == "primary":
            if len(p.node_port_addresses) > 1:
                out.add(path, '"primary" cannot be combined with CIDRs', cidr)
        elif "," in cidr or syntax.check_cidrs(cidr):
            out.add(path, f'{show(cidr)} is not a CIDR (e.g. 192.168.0.0/16) or "primary"', cidr)
    out.positive("proxy.syncPeriod", p.sync_period)
    out.not_negative("proxy.minSyncPeriod", p.min_sync_period)
    if p.sync_period.nanoseconds > 0 and p.min_sync_period > p.sync_period:
        out.add(
            "proxy.minSyncPeriod",
            f"{p.min_sync_period} must be <= proxy.syncPeriod ({p.sync_period})",
            p.min_sync_period,
            summary=f"proxy.minSyncPeriod ({p.min_sync_period}) must be <= "
            f"proxy.syncPeriod ({p.sync_period})",
        )
    out.in_range("proxy.masqueradeBit", p.masquerade_bit, 0, 31)
    if p.detect_local_mode not in DETECT_LOCAL_MODES:
        out.add(
            "proxy.detectLocalMode",
            f"{show(p.detect_local_mode)} is not one of {', '.join(DETECT_LOCAL_MODES)}"
            " (BridgeInterface and InterfaceNamePrefix are not supported)",
            p.detect_local_mode,
        )
    for key, address in (
        ("healthzBindAddress", p.healthz_bind_address),
        ("metricsBindAddress", p.metrics_bind_address),
    ):
        if address:
            out.check(child("proxy", key), address, _bind_address(address))
    ct = p.conntrack
    out.at_least("proxy.conntrack.maxPerCore", ct.max_per_core, 0)
    out.at_least("proxy.conntrack.min", ct.min, 0)
    for name, value in (
        ("tcpEstablishedTimeout", ct.tcp_established_timeout),
        ("tcpCloseWaitTimeout", ct.tcp_close_wait_timeout),
        ("udpTimeout", ct.udp_timeout),
        ("udpStreamTimeout", ct.udp_stream_timeout),
    ):
        out.not_negative(child("proxy.conntrack", name), value)

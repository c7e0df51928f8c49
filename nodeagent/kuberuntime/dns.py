"""A pod's resolver settings and hostname, as the kubelet's ``network/dns`` computes them.

Pure functions: the host's resolv.conf is parsed by the caller (:func:`parse_resolv_conf`) and
passed in. ``pod_dns`` returns the CRI ``DNSConfig`` plus the warnings the kubelet would send as
events (``MissingClusterDNS``, ``DNSConfigForming``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from nodeagent.gotext import quote
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.podsettings import PodRuntimeSettings, ResolvConf
from nodeagent.podspec import Pod, dns1123_label_problem, dns1123_subdomain_problem

MAX_NAMESERVERS: Final = 3
MAX_SEARCHES: Final = 32
MAX_SEARCH_CHARS: Final = 2048
MAX_HOSTNAME: Final = 63
MAX_FQDN: Final = 64
DEFAULT_OPTIONS: Final = ("ndots:5",)


class PodDNSError(ValueError):
    """The pod's hostname or DNS policy cannot be honoured (CreatePodSandbox fails)."""


def parse_resolv_conf(text: str) -> ResolvConf:
    servers: list[str] = []
    searches: list[str] = []
    options: list[str] = []
    for raw in text.splitlines():
        fields = raw.split("#", 1)[0].split(";", 1)[0].split()
        if not fields:
            continue
        if fields[0] == "nameserver" and len(fields) > 1:
            servers.append(fields[1])
        elif fields[0] == "search":
            searches = [s.rstrip(".") for s in fields[1:] if s != "."]
        elif fields[0] == "options":
            options.extend(fields[1:])
    return ResolvConf(servers=tuple(servers), searches=tuple(searches), options=tuple(options))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _merge_options(base: Iterable[str], pod_options: Iterable[tuple[str, str | None]]) -> list[str]:
    merged: dict[str, str] = {}
    for option in base:
        name, _, value = option.partition(":")
        merged[name] = value
    for option_name, option_value in pod_options:
        merged[option_name] = option_value or ""
    return [f"{k}:{v}" if v else k for k, v in merged.items()]


def _policy(pod: Pod) -> str:
    policy = pod.spec.dns_policy or "ClusterFirst"
    if policy == "ClusterFirstWithHostNet":
        return "cluster"
    if policy == "ClusterFirst":
        return "host" if pod.spec.host_network else "cluster"
    if policy == "Default":
        return "host"
    if policy == "None":
        return "none"
    raise PodDNSError(f"invalid DNSPolicy={policy}")


def pod_dns(
    pod: Pod, *, settings: PodRuntimeSettings, host: ResolvConf
) -> tuple[cri.DNSConfig, list[str]]:
    warnings: list[str] = []
    servers, searches, options = list(host.servers), list(host.searches), list(host.options)
    kind = _policy(pod)
    if kind == "none":
        servers, searches, options = [], [], []
    elif kind == "cluster" and settings.cluster_dns:
        servers = list(settings.cluster_dns)
        if settings.cluster_domain:
            domain = settings.cluster_domain
            ours = [f"{pod.namespace}.svc.{domain}", f"svc.{domain}", domain]
            searches = _unique([*ours, *searches])
        options = list(DEFAULT_OPTIONS)
    else:
        if kind == "cluster":
            warnings.append(
                "kubelet does not have ClusterDNS IP configured and cannot create Pod using "
                '"ClusterFirst" policy. Falling back to "Default" policy.'
            )
        if not settings.resolv_conf:
            servers = ["::1" if ":" in ip else "127.0.0.1" for ip in settings.node_ips]
            servers = servers or ["127.0.0.1"]
            searches = ["."]
    if pod.spec.dns_config is not None:
        extra = pod.spec.dns_config
        servers = _unique([*servers, *extra.nameservers])
        searches = _unique([*searches, *extra.searches])
        options = _merge_options(options, ((o.name, o.value) for o in extra.options))
    if len(servers) > MAX_NAMESERVERS:
        servers = servers[:MAX_NAMESERVERS]
        warnings.append(
            "Nameserver limits were exceeded, some nameservers have been omitted, the applied "
            f"nameserver line is: {' '.join(servers)}"
        )
    fitted = _fit_searches(searches)
    if fitted != searches:
        warnings.append(
            "Search Line limits were exceeded, some search paths have been omitted, the applied "
            f"search line is: {' '.join(fitted)}"
        )
    return cri.DNSConfig(servers=servers, searches=fitted, options=options), warnings


def _fit_searches(searches: list[str]) -> list[str]:
    fitted = searches[:MAX_SEARCHES]
    while fitted and len(" ".join(fitted)) > MAX_SEARCH_CHARS:
        fitted = fitted[:-1]
    return fitted


def _truncated(pod: Pod, hostname: str) -> str:
    """At most 63 characters, without a trailing ``-`` or ``.``
    (``truncatePodHostnameIfNeeded``)."""
    if len(hostname) <= MAX_HOSTNAME:
        return hostname
    truncated = hostname[:MAX_HOSTNAME].rstrip("-.")
    if not truncated:
        raise PodDNSError(f"hostname for pod {quote(pod.name)} was invalid: {quote(hostname)}")
    return truncated


def pod_hostname(
    pod: Pod, *, cluster_domain: str, hostname_override: bool = True
) -> tuple[str, str]:
    """(hostname, domain) as the kubelet's ``GeneratePodHostNameAndDomain``: with the
    ``HostnameOverride`` gate (``hostname_override``), ``spec.hostnameOverride`` wins over
    everything and has no domain; else ``spec.hostname`` or the pod name cut to 63 characters,
    and ``<subdomain>.<namespace>.svc.<clusterDomain>`` when a subdomain is set. A value the
    apiserver would have refused raises :class:`PodDNSError` with the kubelet's message."""
    spec = pod.spec
    if hostname_override and spec.hostname_override is not None:
        override = spec.hostname_override
        if problem := dns1123_subdomain_problem(override):
            raise PodDNSError(
                f"pod HostnameOverride {quote(override)} is not a valid DNS subdomain: {problem}"
            )
        return _truncated(pod, override), ""
    hostname = pod.name
    if spec.hostname:
        if problem := dns1123_label_problem(spec.hostname):
            raise PodDNSError(
                f"pod Hostname {quote(spec.hostname)} is not a valid DNS label: {problem}"
            )
        hostname = spec.hostname
    hostname = _truncated(pod, hostname)
    domain = ""
    if spec.subdomain:
        if problem := dns1123_label_problem(spec.subdomain):
            raise PodDNSError(
                f"pod Subdomain {quote(spec.subdomain)} is not a valid DNS label: {problem}"
            )
        domain = f"{spec.subdomain}.{pod.namespace}.svc.{cluster_domain}"
    return hostname, domain


def kernel_hostname(pod: Pod, *, cluster_domain: str, hostname_override: bool = True) -> str:
    """What the sandbox's UTS namespace is named: the FQDN with ``setHostnameAsFQDN`` (an
    overridden hostname has no domain, so it is used as it is)."""
    hostname, domain = pod_hostname(
        pod, cluster_domain=cluster_domain, hostname_override=hostname_override
    )
    if pod.spec.set_hostname_as_fqdn and domain:
        fqdn = f"{hostname}.{domain}"
        if len(fqdn) > MAX_FQDN:
            raise PodDNSError(
                f"failed to construct FQDN from pod hostname and cluster domain, FQDN {fqdn} "
                f"is too long ({MAX_FQDN} characters is the max, {len(fqdn)} characters "
                "requested)"
            )
        return fqdn
    return hostname

"""Services and EndpointSlices (decoded JSON) to the proxy's model. Pure; the only place that
reads API fields.

Follows kube-proxy: ExternalName and headless Services are not proxied, nor Services labelled
``service.kubernetes.io/service-proxy-name`` (another proxy owns them), nor EndpointSlices
labelled ``service.kubernetes.io/headless`` (the EndpointSlice controller marks the slices of
headless Services so; on a Service the label means nothing to the proxy: the controller never
copies it to the slices); LoadBalancer ingress
IPs with ``ipMode: Proxy`` are left to the load balancer; ``externalTrafficPolicy`` counts only
for externally reachable Services; EndpointSlices belong to the Service named by their
``kubernetes.io/service-name`` label; an endpoint's missing ``ready`` means ready, missing
``serving`` means as ready, missing ``terminating`` means not terminating; ``hints.forZones``
and ``hints.forNodes`` are kept for topology-aware routing (:func:`.policy.select`).

Objects are checked first (:mod:`nodeagent.proxy.validation`, by the tracker); the functions
here read only checked objects. Every address is rendered canonically (:func:`canonical_ip`):
``010.244.000.005`` is read as Kubernetes reads it, 10.244.0.5, and never reaches nft as text
nft would read as octal.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from nodeagent.apiserver.resources import Resource
from nodeagent.nft.objects import Family
from nodeagent.proxy.model import (
    DEFAULT_AFFINITY_TIMEOUT,
    PROTOCOLS,
    Endpoint,
    Protocol,
    ServiceName,
    ServicePort,
    ServicePortName,
    family_of,
)
from nodeagent.proxy.validation import PROXY_NAME_LABEL, canonical_ip

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
HEADLESS_LABEL = "service.kubernetes.io/headless"
PortKey = tuple[str, Protocol]  # (port name, protocol)


def name_of(obj: Obj) -> ServiceName:
    meta = _dict(obj.get("metadata"))
    return ServiceName(str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def service_of_slice(obj: Obj) -> ServiceName | None:
    meta = _dict(obj.get("metadata"))
    service = _dict(meta.get("labels")).get(SERVICE_NAME_LABEL)
    return ServiceName(str(meta.get("namespace") or ""), str(service)) if service else None


def proxied_slice(obj: Obj) -> bool:
    """Whether an EndpointSlice's endpoints count: not when it is labelled headless."""
    return HEADLESS_LABEL not in _dict(_dict(obj.get("metadata")).get("labels"))


def service_ports(obj: Obj) -> list[ServicePort]:
    """The proxied ports of one Service (empty when it is not proxied at all)."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    if PROXY_NAME_LABEL in (meta.get("labels") or {}):
        return []
    kind = spec.get("type") or "ClusterIP"
    if kind == "ExternalName":
        return []
    cluster_ips = _addresses(
        ip for ip in (spec.get("clusterIPs") or [spec.get("clusterIP")]) if ip and ip != "None"
    )
    if not cluster_ips:
        return []
    external_ips = _addresses(spec.get("externalIPs") or ())
    lb_ips: tuple[str, ...] = ()
    if kind == "LoadBalancer":
        ingress = ((obj.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
        lb_ips = _addresses(i["ip"] for i in ingress if i.get("ip") and i.get("ipMode") != "Proxy")
    reachable = kind in ("NodePort", "LoadBalancer") or bool(external_ips)
    affinity = None
    if spec.get("sessionAffinity") == "ClientIP":
        config = (spec.get("sessionAffinityConfig") or {}).get("clientIP") or {}
        affinity = int(config.get("timeoutSeconds") or DEFAULT_AFFINITY_TIMEOUT)
    service = name_of(obj)
    ports = []
    for port in spec.get("ports") or []:
        protocol = _protocol(port.get("protocol"))
        if protocol is None:
            continue
        node_port = port.get("nodePort") if kind in ("NodePort", "LoadBalancer") else None
        ports.append(
            ServicePort(
                name=ServicePortName(service, str(port.get("name") or ""), protocol),
                port=int(port["port"]),
                cluster_ips=cluster_ips,
                node_port=int(node_port) if node_port else None,
                external_ips=external_ips,
                load_balancer_ips=lb_ips,
                affinity_timeout=affinity,
                internal_local=spec.get("internalTrafficPolicy") == "Local",
                external_local=reachable and spec.get("externalTrafficPolicy") == "Local",
            )
        )
    return ports


def service_families(obj: Obj) -> list[Family]:
    """The families of the Service's cluster IPs, in their order (kube-proxy's proxier of a
    family sees a Service only through a cluster IP of that family)."""
    spec = obj.get("spec") or {}
    ips = spec.get("clusterIPs") or [spec.get("clusterIP")]
    found = (family_of(ip) for ip in ips if isinstance(ip, str) and ip and ip != "None")
    return list(dict.fromkeys(f for f in found if f is not None))


def health_check_node_port(obj: Obj) -> int | None:
    """The Service's ``healthCheckNodePort`` when kube-proxy serves it: a LoadBalancer with
    ``externalTrafficPolicy: Local`` (the apiserver allocates the port then)."""
    spec = obj.get("spec") or {}
    if spec.get("type") != "LoadBalancer" or spec.get("externalTrafficPolicy") != "Local":
        return None
    port = spec.get("healthCheckNodePort")
    return int(port) if isinstance(port, int) and 0 < port < 65536 else None


def endpoints_by_port(slices: Iterable[Obj]) -> dict[PortKey, tuple[Endpoint, ...]]:
    """The endpoints of one Service per (port name, protocol), merged over its slices, sorted.

    The same address:port in two slices (a slice being replaced) counts once, ready first.
    """
    merged: dict[PortKey, dict[tuple[str, int], Endpoint]] = {}
    for obj in slices:
        if obj.get("addressType") not in ("IPv4", "IPv6"):
            continue
        ports = _ports(obj)
        found = _endpoints(obj) if ports else []
        for name, protocol, number in ports:
            into = merged.get((name, protocol))
            if into is None:
                into = merged[(name, protocol)] = {}
            for ip, node, ready, serving, terminating, zones, nodes in found:
                target = (ip, number)
                have = into.get(target)
                if have is None or (ready and not have.ready):
                    into[target] = Endpoint(
                        ip, number, node, ready, serving, terminating, zones, nodes
                    )
    # sorted by (ip, port), which is unique per port: the same order as sorting the endpoints
    return {key: tuple(map(eps.__getitem__, sorted(eps))) for key, eps in merged.items()}


def _ports(obj: Obj) -> list[tuple[str, Protocol, int]]:
    """(name, protocol, number) of each usable port of a slice."""
    ports = []
    for port in obj.get("ports") or []:
        protocol = _protocol(port.get("protocol"))
        number = port.get("port")
        if protocol is not None and number:
            ports.append((str(port.get("name") or ""), protocol, int(number)))
    return ports


_Found = tuple[str, str, bool, bool, bool, frozenset[str], frozenset[str]]
_NO_HINTS: frozenset[str] = frozenset()


def _endpoints(obj: Obj) -> list[_Found]:
    """(address, node name, ready, serving, terminating, zone hints, node hints) of each
    address of a slice."""
    found = []
    for ep in obj.get("endpoints") or []:
        cond = ep.get("conditions") or {}
        ready = cond.get("ready") is not False
        serving = cond.get("serving")
        serving = ready if serving is None else bool(serving)
        terminating = cond.get("terminating") is True
        node = str(ep.get("nodeName") or "")
        hints = _dict(ep.get("hints"))
        zones, nodes = _hint_names(hints.get("forZones")), _hint_names(hints.get("forNodes"))
        for address in ep.get("addresses") or ():
            ip = canonical_ip(address)
            if ip is not None:
                found.append((ip, node, ready, serving, terminating, zones, nodes))
    return found


def _hint_names(value: object) -> frozenset[str]:
    """The names of a ``forZones`` / ``forNodes`` list (most endpoints have none)."""
    if not isinstance(value, list) or not value:
        return _NO_HINTS
    return frozenset(str(h["name"]) for h in value if isinstance(h, dict) and h.get("name"))


def _addresses(texts: Iterable[str]) -> tuple[str, ...]:
    """The addresses canonical, in order, once each (an unreadable one left out)."""
    return tuple(dict.fromkeys(ip for t in texts if (ip := canonical_ip(t)) is not None))


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _protocol(value: object) -> Protocol | None:
    text = str(value or "TCP").lower()
    for protocol in PROTOCOLS:
        if protocol == text:
            return protocol
    return None


# The proxy's caches list and watch EndpointSlices of every namespace (Services: the apiserver
# package's SERVICES).
ENDPOINTSLICES_ALL = Resource(
    "discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", namespaced=False
)

# What the proxy's caches ask the apiserver for: kube-proxy's selectors, so the objects the
# functions above leave out are not even sent (the slices of a large headless StatefulSet
# Service), and adding a label turns into a DELETED event on the watch (removing it, ADDED).
SERVICES_LABEL_SELECTOR = f"!{PROXY_NAME_LABEL}"
SERVICES_FIELD_SELECTOR = "spec.clusterIP!=None"
ENDPOINTSLICES_LABEL_SELECTOR = f"!{HEADLESS_LABEL}"

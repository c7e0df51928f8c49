"""Checks of Services and EndpointSlices before the proxy reads them, and address parsing. Pure.

The apiserver validates these objects, but the proxy must not trust that: objects stored
before a validation rule existed, another apiserver version, or a bug would otherwise reach
the nft script, where one bad value fails the whole family's transaction (and every other
change with it) or raises out of the sync. :func:`service_problem` and :func:`slice_problem`
return the first problem of an object as a :class:`Problem` naming the field path and the
value; the tracker then skips the object (as if it did not exist) and logs the problem once.

The checks are the API's own where the proxy reads the field (port ranges, protocols, port
names as DNS-1123 labels, affinity timeout 1..86400, addresses of the right family) plus the
JSON shape of everything read (a list where a list is expected, ...). Fields the proxy does
not read are not checked.

Addresses are parsed as kube-proxy parses them (``netutils.ParseIPSloppy``, Go 1.16's
``net.ParseIP``): an IPv4 field with leading zeros is decimal (``010.244.000.005`` is
10.244.0.5, never octal as nft and iptables would read the text), because Kubernetes keeps
accepting such stored values and reads them so; an IPv4-mapped IPv6 address is its IPv4
address; zones (``fe80::1%eth0``) are not addresses. :func:`canonical_ip` renders the result
canonically, which is the only form the proxy ever hands to nft.
"""

from __future__ import annotations

import functools
import ipaddress
import re
from typing import Any, NamedTuple, TypeGuard

VALUE_MAX = 64  # characters of an offending value shown in a message
AFFINITY_MAX = 86400  # seconds: the API's limit for sessionAffinityConfig.clientIP
SERVICE_TYPES = ("ClusterIP", "NodePort", "LoadBalancer", "ExternalName")
PROTOCOL_NAMES = ("TCP", "UDP", "SCTP")
TRAFFIC_POLICIES = ("Cluster", "Local")
PROXY_NAME_LABEL = "service.kubernetes.io/service-proxy-name"
_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # DNS-1123 label
_OCTET = r"(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
_V4 = rf"{_OCTET}(?:\.{_OCTET}){{3}}"
_CANONICAL_V4 = re.compile(_V4)  # no leading zeros
_CANONICAL_V4_LINES = re.compile(rf"{_V4}(?:\n{_V4})*")


class Problem(NamedTuple):
    field: str
    """The field path in the object (``spec.ports[1].port``)."""
    value: object
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}: {shown(self.value)}"


def shown(value: object) -> str:
    """``value`` as a message shows it: its repr, truncated."""
    text = repr(value)
    return text if len(text) <= VALUE_MAX else text[: VALUE_MAX - 3] + "..."


@functools.lru_cache(maxsize=1 << 17)
def canonical_ip(text: str) -> str | None:
    """The canonical form of an address as Kubernetes reads it, or None when it is none.

    Cached: a full sync reads every address of every Service and EndpointSlice again."""
    if not isinstance(text, str) or not text.isascii() or "%" in text:
        return None
    if ":" not in text:
        if _CANONICAL_V4.fullmatch(text):  # nearly every address: no need to parse it
            return text
        v4 = _sloppy_v4(text)
        return None if v4 is None else str(v4)
    head, sep, tail = text.rpartition(":")
    if "." in tail:  # an embedded IPv4 part: leading zeros are decimal there too
        v4 = _sloppy_v4(tail)
        if v4 is None:
            return None
        text = f"{head}{sep}{v4}"
    try:
        v6 = ipaddress.IPv6Address(text)
    except ValueError:
        return None
    mapped = v6.ipv4_mapped
    return str(mapped) if mapped is not None else str(v6)


def _sloppy_v4(text: str) -> ipaddress.IPv4Address | None:
    fields = text.split(".")
    if len(fields) != 4 or not all(f.isdigit() for f in fields):  # ASCII only (checked above)
        return None
    numbers = [int(f) for f in fields]
    if any(n > 255 for n in numbers):
        return None
    return ipaddress.IPv4Address(".".join(map(str, numbers)))


def service_problem(obj: Any) -> Problem | None:
    """The first problem of a Service the proxy would read, or None."""
    if not isinstance(obj, dict):
        return Problem("", obj, "not an object")
    meta = obj.get("metadata")
    found = _meta_problem(meta)
    if found or not isinstance(meta, dict):
        return found
    labels = meta.get("labels") or {}
    if PROXY_NAME_LABEL in labels:
        return None  # another proxy's: nothing else is read
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return Problem("spec", spec, "must be an object")
    kind = spec.get("type")
    if kind is not None and kind not in SERVICE_TYPES:
        return Problem("spec.type", kind, f"must be one of {', '.join(SERVICE_TYPES)}")
    if kind == "ExternalName":
        return None
    return (
        _cluster_ips_problem(spec)
        or _addresses_problem("spec.externalIPs", spec.get("externalIPs"))
        or _ingress_problem(obj.get("status"))
        or _affinity_problem(spec)
        or _policies_problem(spec)
        or _service_ports_problem(spec.get("ports"))
    )


def slice_problem(obj: Any) -> Problem | None:
    """The first problem of an EndpointSlice the proxy would read, or None."""
    if not isinstance(obj, dict):
        return Problem("", obj, "not an object")
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return Problem("metadata", meta, "must be an object")
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        return Problem("metadata.labels", labels, "must be an object")
    address_type = obj.get("addressType")
    if address_type not in ("IPv4", "IPv6"):
        return None  # FQDN (or unknown): not proxied, nothing else is read
    ports = obj.get("ports")
    if ports is not None and not isinstance(ports, list):
        return Problem("ports", ports, "must be a list")
    for i, port in enumerate(ports or ()):
        found = _port_problem(f"ports[{i}]", port, number_optional=True)
        if found:
            return found
    endpoints = obj.get("endpoints")
    if endpoints is not None and not isinstance(endpoints, list):
        return Problem("endpoints", endpoints, "must be a list")
    if endpoints and address_type == "IPv4" and _plain_v4_endpoints(endpoints):
        return None
    for i, ep in enumerate(endpoints or ()):
        found = _endpoint_problem(f"endpoints[{i}]", ep, "ip6" if address_type == "IPv6" else "ip")
        if found:
            return found
    return None


def _meta_problem(meta: object) -> Problem | None:
    if not isinstance(meta, dict):
        return Problem("metadata", meta, "must be an object")
    for key in ("namespace", "name"):
        value = meta.get(key)
        if not isinstance(value, str) or not _LABEL.match(value):
            return Problem(f"metadata.{key}", value, "must be a DNS-1123 label")
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, dict):
        return Problem("metadata.labels", labels, "must be an object")
    return None


def _cluster_ips_problem(spec: dict[str, Any]) -> Problem | None:
    single = spec.get("clusterIP")
    if single is not None and not isinstance(single, str):
        return Problem("spec.clusterIP", single, "must be a string")
    ips = spec.get("clusterIPs")
    if ips is None:
        ips, where = [single], "spec.clusterIP"
    elif not isinstance(ips, list) or len(ips) > 2:
        return Problem("spec.clusterIPs", ips, "must be a list of at most 2 addresses")
    else:
        where = "spec.clusterIPs"
    families = set()
    for i, ip in enumerate(ips):
        field = where if where == "spec.clusterIP" else f"{where}[{i}]"
        if ip in (None, "", "None"):
            continue
        canonical = canonical_ip(ip) if isinstance(ip, str) else None
        if canonical is None:
            return Problem(field, ip, "must be a valid IP address")
        family = ":" in canonical
        if family in families:
            return Problem(field, ip, "must not be of the same IP family as another cluster IP")
        families.add(family)
    return None


def _addresses_problem(where: str, ips: object) -> Problem | None:
    if ips is None:
        return None
    if not isinstance(ips, list):
        return Problem(where, ips, "must be a list")
    for i, ip in enumerate(ips):
        if not isinstance(ip, str) or canonical_ip(ip) is None:
            return Problem(f"{where}[{i}]", ip, "must be a valid IP address")
    return None


def _ingress_problem(status: object) -> Problem | None:
    if status is None:
        return None
    if not isinstance(status, dict):
        return Problem("status", status, "must be an object")
    lb = status.get("loadBalancer")
    if lb is None:
        return None
    if not isinstance(lb, dict):
        return Problem("status.loadBalancer", lb, "must be an object")
    ingress = lb.get("ingress")
    if ingress is None:
        return None
    if not isinstance(ingress, list):
        return Problem("status.loadBalancer.ingress", ingress, "must be a list")
    for i, entry in enumerate(ingress):
        where = f"status.loadBalancer.ingress[{i}]"
        if not isinstance(entry, dict):
            return Problem(where, entry, "must be an object")
        ip = entry.get("ip")
        if ip and (not isinstance(ip, str) or canonical_ip(ip) is None):
            return Problem(f"{where}.ip", ip, "must be a valid IP address")
    return None


def _affinity_problem(spec: dict[str, Any]) -> Problem | None:
    affinity = spec.get("sessionAffinity")
    if affinity not in (None, "", "None", "ClientIP"):
        return Problem("spec.sessionAffinity", affinity, "must be ClientIP or None")
    if affinity != "ClientIP":
        return None
    config = spec.get("sessionAffinityConfig")
    if config is None:
        return None
    where = "spec.sessionAffinityConfig"
    if not isinstance(config, dict):
        return Problem(where, config, "must be an object")
    client = config.get("clientIP")
    if client is None:
        return None
    if not isinstance(client, dict):
        return Problem(f"{where}.clientIP", client, "must be an object")
    timeout = client.get("timeoutSeconds")
    if timeout is None:
        return None
    if not _is_int(timeout) or not 0 < timeout <= AFFINITY_MAX:
        return Problem(
            f"{where}.clientIP.timeoutSeconds", timeout, f"must be between 1 and {AFFINITY_MAX}"
        )
    return None


def _policies_problem(spec: dict[str, Any]) -> Problem | None:
    for key in ("internalTrafficPolicy", "externalTrafficPolicy"):
        value = spec.get(key)
        if value not in (None, "", *TRAFFIC_POLICIES):
            return Problem(f"spec.{key}", value, "must be Cluster or Local")
    return None


def _service_ports_problem(ports: object) -> Problem | None:
    if ports is None:
        return None
    if not isinstance(ports, list):
        return Problem("spec.ports", ports, "must be a list")
    for i, port in enumerate(ports):
        where = f"spec.ports[{i}]"
        found = _port_problem(where, port, number_optional=False)
        if found:
            return found
        node_port = port.get("nodePort")
        if node_port is not None and (not _is_int(node_port) or not 0 <= node_port <= 65535):
            return Problem(f"{where}.nodePort", node_port, "must be between 1 and 65535")
    return None


def _port_problem(where: str, port: object, *, number_optional: bool) -> Problem | None:
    if not isinstance(port, dict):
        return Problem(where, port, "must be an object")
    name = port.get("name")
    if name not in (None, "") and (not isinstance(name, str) or not _LABEL.match(name)):
        return Problem(f"{where}.name", name, "must be a DNS-1123 label")
    protocol = port.get("protocol")
    if protocol is not None and protocol not in PROTOCOL_NAMES:
        return Problem(f"{where}.protocol", protocol, f"must be one of {', '.join(PROTOCOL_NAMES)}")
    number = port.get("port")
    if number_optional and number in (None, 0):
        return None  # kube-proxy ignores a slice port without a number
    if not _is_int(number) or not 0 < number <= 65535:
        return Problem(f"{where}.port", number, "must be between 1 and 65535")
    return None


def _plain_v4_endpoints(endpoints: list[Any]) -> bool:
    """Whether every endpoint is well-formed with canonical IPv4 addresses only, checked in a
    few passes (a first sync reads 100,000s of them; the slow path finds what is wrong)."""
    addresses: list[Any] = []
    for ep in endpoints:
        if type(ep) is not dict:
            return False
        found, node, cond = ep.get("addresses"), ep.get("nodeName"), ep.get("conditions")
        if type(found) is not list or (node is not None and type(node) is not str):
            return False
        if cond is not None and type(cond) is not dict:
            return False
        addresses += found
    if not addresses:
        return True
    if not all(type(a) is str for a in addresses):
        return False
    text = "\n".join(addresses)  # one address per line, none holding a newline itself
    return text.count("\n") == len(addresses) - 1 and bool(_CANONICAL_V4_LINES.fullmatch(text))


def _endpoint_problem(where: str, ep: object, family: str) -> Problem | None:
    if not isinstance(ep, dict):
        return Problem(where, ep, "must be an object")
    addresses = ep.get("addresses")
    if addresses is not None and not isinstance(addresses, list):
        return Problem(f"{where}.addresses", addresses, "must be a list")
    for i, address in enumerate(addresses or ()):
        canonical = canonical_ip(address) if isinstance(address, str) else None
        if canonical is None:
            return Problem(f"{where}.addresses[{i}]", address, "must be a valid IP address")
        if (":" in canonical) != (family == "ip6"):
            want = "IPv6" if family == "ip6" else "IPv4"
            return Problem(f"{where}.addresses[{i}]", address, f"must be an {want} address")
    node = ep.get("nodeName")
    if node is not None and not isinstance(node, str):
        return Problem(f"{where}.nodeName", node, "must be a string")
    conditions = ep.get("conditions")
    if conditions is not None and not isinstance(conditions, dict):
        return Problem(f"{where}.conditions", conditions, "must be an object")
    return None


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)

"""What the agent refuses in a pod it decodes, with the apiserver's wording (``Invalid value:
"<value>": <why>`` at the field's path), so nothing downstream meets a value it cannot use.

- Identity: what the agent itself builds paths and runtime requests from: the pod's name
  (DNS-1123 subdomain), namespace (DNS-1123 label) and UID, container names (DNS-1123 labels,
  at most 63 characters), ports' ``hostIP``, ``hostAliases`` and seccomp profiles. The
  apiserver already refuses such pods; static pods and any future source must not depend on
  that.
- Quantities (``spec.containers[0].resources.limits.memory: Invalid value: "1Gi2": quantities
  must match the regular expression ...``), so admission, QoS and the container builder never
  meet one they cannot parse.
- The fields the apiserver refuses on an ephemeral container.

Pure.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

import msgspec

from nodeagent.podspec.types import (
    Container,
    EphemeralContainer,
    HostAlias,
    Pod,
    SeccompProfile,
)
from nodeagent.quantity import parse_quantity

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL: Final = re.compile(_LABEL)
_DNS1123_SUBDOMAIN: Final = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_UID: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,126}[A-Za-z0-9])?")
LABEL_MESSAGE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    f"regex used for validation is '{_LABEL}')"
)
SUBDOMAIN_MESSAGE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
    f"regex used for validation is '{_LABEL}(\\.{_LABEL})*')"
)
SHOWN_VALUE_MAX: Final = 80


class PodSpecError(msgspec.ValidationError):
    """A pod the agent must not run: ``field`` is the path (``spec.containers[0].name``),
    ``message`` the apiserver's ``Invalid value: "<value>": <why>``. ``str()`` has msgspec's
    shape (``<message> - at `$.<field>```), so callers handle both alike."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{message} - at `$.{field}`")


def show_value(value: object) -> str:
    """A value as it appears in an error: JSON-quoted strings, cut at 80 characters."""
    text = json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= SHOWN_VALUE_MAX else text[: SHOWN_VALUE_MAX - 3] + "..."


def invalid(field: str, value: object, why: str) -> PodSpecError:
    return PodSpecError(field, f"Invalid value: {show_value(value)}: {why}")


def dns1123_label_problem(value: str) -> str | None:
    if len(value) > DNS1123_LABEL_MAX:
        return f"must be no more than {DNS1123_LABEL_MAX} characters"
    return None if _DNS1123_LABEL.fullmatch(value) else LABEL_MESSAGE


def dns1123_subdomain_problem(value: str) -> str | None:
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        return f"must be no more than {DNS1123_SUBDOMAIN_MAX} characters"
    return None if _DNS1123_SUBDOMAIN.fullmatch(value) else SUBDOMAIN_MESSAGE


def _containers(pod: Pod) -> Iterator[tuple[str, Container]]:
    """Every container with the path of its field (``spec.initContainers[0]``): init, regular,
    then ephemeral containers."""
    for key, containers in (
        ("initContainers", pod.spec.init_containers),
        ("containers", pod.spec.containers),
        ("ephemeralContainers", pod.spec.ephemeral_containers),
    ):
        for i, container in enumerate(containers):
            yield f"spec.{key}[{i}]", container


def check_identity(pod: Pod) -> None:
    """Raise :class:`PodSpecError` unless every name the agent builds paths from is safe."""
    meta = pod.metadata
    if meta.name and (problem := dns1123_subdomain_problem(meta.name)):
        raise invalid("metadata.name", meta.name, problem)
    if problem := dns1123_label_problem(meta.namespace):
        raise invalid("metadata.namespace", meta.namespace, problem)
    if meta.uid and (not _UID.fullmatch(meta.uid) or ".." in meta.uid):
        raise invalid(
            "metadata.uid", meta.uid, "must be letters, digits, '-', '_' or '.', without '..'"
        )
    if pod.spec.security_context is not None:
        _check_seccomp("spec.securityContext", pod.spec.security_context.seccomp_profile)
    for where, container in _containers(pod):
        if container.security_context is not None:
            profile = container.security_context.seccomp_profile
            _check_seccomp(f"{where}.securityContext", profile)
        if not container.name:
            raise PodSpecError(f"{where}.name", "Required value")
        if problem := dns1123_label_problem(container.name):
            raise invalid(f"{where}.name", container.name, problem)
        for j, port in enumerate(container.ports):
            if port.host_ip and not _is_ip(port.host_ip):
                raise invalid(
                    f"{where}.ports[{j}].hostIP",
                    port.host_ip,
                    IP_MESSAGE,
                )
    _check_host_aliases(pod.spec.host_aliases)


IP_MESSAGE: Final = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"


def _check_host_aliases(aliases: tuple[HostAlias, ...]) -> None:
    """Each alias becomes a line of the pod's /etc/hosts: only an IP address and host names
    may get there (the apiserver's ``validateHostAliases``; static pods are not checked by it)."""
    for i, alias in enumerate(aliases):
        where = f"spec.hostAliases[{i}]"
        if not alias.ip:
            raise PodSpecError(f"{where}.ip", "Required value")
        if not _is_ip(alias.ip):
            raise invalid(f"{where}.ip", alias.ip, IP_MESSAGE)
        for j, hostname in enumerate(alias.hostnames):
            if problem := dns1123_subdomain_problem(hostname):
                raise invalid(f"{where}.hostnames[{j}]", hostname, problem)


SECCOMP_TYPES: Final = ("RuntimeDefault", "Unconfined", "Localhost")


def _check_seccomp(where: str, profile: SeccompProfile | None) -> None:
    if profile is None:
        return
    if profile.type not in SECCOMP_TYPES:
        supported = ", ".join(f'"{t}"' for t in SECCOMP_TYPES)
        raise PodSpecError(
            f"{where}.seccompProfile.type",
            f"Unsupported value: {show_value(profile.type)}: supported values: {supported}",
        )
    local = profile.localhost_profile
    field = f"{where}.seccompProfile.localhostProfile"
    if profile.type == "Localhost" and not local:
        raise PodSpecError(field, "Required value: must be set when seccomp type is Localhost")
    if profile.type != "Localhost" and local is not None:
        raise invalid(field, local, "can only be set when seccomp type is Localhost")
    if local and (local.startswith("/") or ".." in local.split("/")):
        raise invalid(field, local, "must be a relative path without '..'")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def ephemeral_forbidden_field(container: EphemeralContainer) -> str | None:
    """The first field of ``container`` the apiserver refuses on an ephemeral container
    (ports, probes, lifecycle, resources), else None."""
    for field, present in (
        ("ports", bool(container.ports)),
        ("livenessProbe", container.liveness_probe is not None),
        ("readinessProbe", container.readiness_probe is not None),
        ("startupProbe", container.startup_probe is not None),
        ("lifecycle", container.lifecycle is not None),
        ("resources", bool(container.resources.limits or container.resources.requests)),
    ):
        if present:
            return field
    return None


QUANTITY_MESSAGE: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
QUANTITY_MAX_CHARS: Final = 64


def check_quantity(field: str, raw: object) -> None:
    """Raise :class:`PodSpecError` unless ``raw`` is a quantity the agent can compute with."""
    if isinstance(raw, bool) or not isinstance(raw, str | int | float):
        raise invalid(field, raw, QUANTITY_MESSAGE)
    if isinstance(raw, str) and len(raw) > QUANTITY_MAX_CHARS:
        raise invalid(field, raw, QUANTITY_MESSAGE)
    try:
        parse_quantity(raw)
    except (ValueError, ArithmeticError) as e:  # OverflowError, ZeroDivisionError: both
        raise invalid(field, raw, QUANTITY_MESSAGE) from e


def _quantities(pod: Pod) -> Iterator[tuple[str, object]]:
    for where, container in _containers(pod):
        for kind, values in (
            ("limits", container.resources.limits),
            ("requests", container.resources.requests),
        ):
            for name, raw in values.items():
                yield f"{where}.resources.{kind}.{name}", raw
        for j, var in enumerate(container.env):
            ref = var.value_from.resource_field_ref if var.value_from else None
            if ref is not None and ref.divisor not in (None, ""):
                yield f"{where}.env[{j}].valueFrom.resourceFieldRef.divisor", ref.divisor
    for name, raw in pod.spec.overhead.items():
        yield f"spec.overhead.{name}", raw
    for i, volume in enumerate(pod.spec.volumes):
        if volume.empty_dir is not None and volume.empty_dir.size_limit not in (None, ""):
            yield f"spec.volumes[{i}].emptyDir.sizeLimit", volume.empty_dir.size_limit


def check_quantities(pod: Pod) -> None:
    for field, raw in _quantities(pod):
        check_quantity(field, raw)


def raw_quantities(obj: Mapping[str, Any]) -> Iterator[tuple[str, object]]:
    """The quantity maps of the raw JSON, so a value of the wrong type is named by its key
    (msgspec alone would say ``limits[...]``)."""
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return
    for key in ("initContainers", "containers", "ephemeralContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for i, container in enumerate(containers):
            resources = container.get("resources") if isinstance(container, Mapping) else None
            if not isinstance(resources, Mapping):
                continue
            for kind in ("limits", "requests"):
                values = resources.get(kind)
                if isinstance(values, Mapping):
                    for name, raw in values.items():
                        yield f"spec.{key}[{i}].resources.{kind}.{name}", raw
    overhead = spec.get("overhead")
    if isinstance(overhead, Mapping):
        for name, raw in overhead.items():
            yield f"spec.overhead.{name}", raw

"""A container's environment, as the kubelet's ``makeEnvironmentVariables`` computes it.

``envFrom`` first, then ``env`` in order (later wins), ``$(VAR)`` references expanded against
the variables declared before and the service variables, ``valueFrom`` resolved through the
downward API (``fieldRef``, ``resourceFieldRef``) or the ConfigMaps and Secrets the caller
fetched, then the service variables the container did not set. A reference that cannot be
resolved raises :class:`ContainerConfigError` with the kubelet's message; the container then
waits with reason ``CreateContainerConfigError``. Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Final

from nodeagent.podspec import (
    Container,
    EnvVarSource,
    KeySelector,
    Pod,
    ResourceFieldSelector,
    show_value,
)
from nodeagent.quantity import parse_quantity

DEFAULTED_LIMITS: Final = ("cpu", "memory", "ephemeral-storage")


class ContainerConfigError(ValueError):
    """The container's configuration cannot be generated (``CreateContainerConfigError``)."""


@dataclass(frozen=True, kw_only=True)
class EnvInputs:
    pod_ips: tuple[str, ...] = ()
    host_ips: tuple[str, ...] = ()
    node_allocatable: Mapping[str, str] = field(default_factory=dict)
    service_env: Mapping[str, str] = field(default_factory=dict)
    services_synced: bool = True
    """False while the node's Service cache has not listed once: no environment can be made
    (the kubelet refuses rather than start a container without its service variables)."""
    config_maps: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)
    """ConfigMap name -> data; None when the ConfigMap does not exist."""
    secrets: Mapping[str, Mapping[str, str] | None] = field(default_factory=dict)


def expand(text: str, lookup: Callable[[str], str | None]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` is a literal ``$``, unknown names stay as is."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "$" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                end = text.find(")", i + 2)
                if end != -1:
                    name = text[i + 2 : end]
                    found = lookup(name)
                    out.append(found if found is not None else f"$({name})")
                    i = end + 1
                    continue
        out.append(ch)
        i += 1
    return "".join(out)


def format_map(values: Mapping[str, str]) -> str:
    return "\n".join(f"{k}={json.dumps(values[k])}" for k in sorted(values))


# The labels ``ConvertDownwardAPIFieldLabel`` (pkg/apis/core/pods) lets through; the kubelet
# then resolves only some of them (spec.restartPolicy, spec.schedulerName and status.phase end
# in "unsupported fieldPath").
_DOWNWARD_API_LABELS: Final = frozenset(
    {
        "metadata.annotations",
        "metadata.labels",
        "metadata.name",
        "metadata.namespace",
        "metadata.uid",
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.serviceAccountName",
        "spec.schedulerName",
        "status.phase",
        "status.hostIP",
        "status.hostIPs",
        "status.podIP",
        "status.podIPs",
    }
)


def _split_subscript(field_path: str) -> tuple[str, str] | None:
    """``metadata.labels['k']`` -> (``metadata.labels``, ``k``); None without a subscript."""
    path, bracket, rest = field_path.partition("[")
    if bracket and rest.endswith("]") and len(rest) > 2 and rest[0] == rest[-2] == "'":
        return path, rest[1:-2]
    return None


def convert_field_label(api_version: str, field_path: str) -> str:
    """The internal field path of a ``fieldRef``, with the kubelet's errors."""
    if api_version != "v1":
        raise ContainerConfigError(f"unsupported pod version: {api_version}")
    split = _split_subscript(field_path)
    if split is not None:
        if split[0] in ("metadata.annotations", "metadata.labels"):
            return field_path
        raise ContainerConfigError(f"field label does not support subscript: {field_path}")
    if field_path == "spec.host":  # old v1 clients' name for spec.nodeName
        return "spec.nodeName"
    if field_path not in _DOWNWARD_API_LABELS:
        raise ContainerConfigError(f"field label not supported: {field_path}")
    return field_path


def field_value(field_path: str, pod: Pod, inputs: EnvInputs) -> str:
    simple = {
        "spec.nodeName": pod.spec.node_name,
        "spec.serviceAccountName": pod.spec.service_account_name,
        "status.hostIP": inputs.host_ips[0] if inputs.host_ips else "",
        "status.hostIPs": ",".join(inputs.host_ips),
        "status.podIP": inputs.pod_ips[0] if inputs.pod_ips else "",
        "status.podIPs": ",".join(inputs.pod_ips),
        "metadata.name": pod.name,
        "metadata.namespace": pod.namespace,
        "metadata.uid": pod.uid,
        "metadata.labels": format_map(pod.metadata.labels),
        "metadata.annotations": format_map(pod.metadata.annotations),
    }
    if field_path in simple:
        return simple[field_path]
    split = _split_subscript(field_path)
    if split is not None:
        path, key = split
        if path == "metadata.labels":
            return pod.metadata.labels.get(key, "")
        if path == "metadata.annotations":
            return pod.metadata.annotations.get(key, "")
        raise ContainerConfigError(f'fieldPath "{field_path}" does not support subscript')
    raise ContainerConfigError(f"unsupported fieldPath: {field_path}")


def resource_value(
    ref: ResourceFieldSelector,
    pod: Pod,
    container: Container,
    inputs: EnvInputs,
    *,
    volume: bool = False,
) -> str:
    """A ``resourceFieldRef`` as the kubelet renders it: the quantity divided by the divisor,
    rounded up (cpu in thousandths first, as ``MilliValue()``); a ``limits`` value the
    container does not set, or sets to zero, is the node's allocatable. ``container`` is the
    one whose environment is made (used when the ref names none).

    Which containers get that default follows the kubelet's two paths: for environment
    variables (``defaultPodLimitsForDownwardAPI``) the container itself and the pod's regular
    containers, not a named init container; for a downwardAPI volume (``volume=True``) the
    named container, whatever its kind."""
    target, defaulted = container, True
    if ref.container_name:
        regular = next((c for c in pod.spec.containers if c.name == ref.container_name), None)
        init = next((c for c in pod.spec.init_containers if c.name == ref.container_name), None)
        match = regular or init
        if match is None:
            raise ContainerConfigError(f"container {ref.container_name} not found")
        target, defaulted = match, regular is not None or volume
    kind, _, resource = ref.resource.partition(".")
    if kind not in ("limits", "requests") or not resource:
        raise ContainerConfigError(f"unsupported container resource : {ref.resource}")
    values = dict(getattr(target.resources, kind))
    if kind == "limits" and defaulted:
        for name in DEFAULTED_LIMITS:
            if _unset(values.get(name)) and name in inputs.node_allocatable:
                values[name] = inputs.node_allocatable[name]
    if resource not in ("cpu", "memory", "ephemeral-storage") and not resource.startswith(
        "hugepages-"
    ):
        raise ContainerConfigError(f"unsupported container resource : {ref.resource}")
    try:
        amount = parse_quantity(values.get(resource, 0))
    except ValueError as e:
        raise ContainerConfigError(f"invalid quantity of {ref.resource}: {e}") from e
    divisor = _divisor(ref)
    if resource == "cpu":  # in thousandths, as MilliValue() divides
        return str(math.ceil(math.ceil(amount * 1000) / math.ceil(divisor * 1000)))
    return str(math.ceil(math.ceil(amount) / math.ceil(divisor)))


def _unset(raw: str | int | float | None) -> bool:
    """No limit, or a zero one (``MergeContainerResourceLimits`` replaces both)."""
    if raw is None:
        return True
    try:
        return parse_quantity(raw) == 0
    except ValueError:
        return False  # reported when the value is read


def _divisor(ref: ResourceFieldSelector) -> Fraction:
    """The divisor of a ``resourceFieldRef`` (1 when unset); it must be positive."""
    if ref.divisor in (None, "", 0, "0"):
        return Fraction(1)
    shown = show_value(ref.divisor)
    try:
        divisor = parse_quantity(ref.divisor) if ref.divisor is not None else Fraction(1)
    except ValueError as e:
        raise ContainerConfigError(
            f"invalid divisor {shown} of resourceFieldRef {ref.resource}: {e}"
        ) from e
    if divisor <= 0:
        raise ContainerConfigError(
            f"invalid divisor {shown} of resourceFieldRef {ref.resource}: must be greater than zero"
        )
    return divisor


def _keyed(
    ref: KeySelector,
    kind: str,
    store: Mapping[str, Mapping[str, str] | None],
    namespace: str,
) -> str | None:
    data = store.get(ref.name)
    if data is None:
        if ref.optional:
            return None
        raise ContainerConfigError(f'{kind.lower()} "{ref.name}" not found')
    if ref.key not in data:
        if ref.optional:
            return None
        raise ContainerConfigError(f"couldn't find key {ref.key} in {kind} {namespace}/{ref.name}")
    return data[ref.key]


def _value_from(src: EnvVarSource, pod: Pod, container: Container, inputs: EnvInputs) -> str | None:
    if src.field_ref is not None:
        ref = src.field_ref
        return field_value(convert_field_label(ref.api_version, ref.field_path), pod, inputs)
    if src.resource_field_ref is not None:
        return resource_value(src.resource_field_ref, pod, container, inputs)
    if src.config_map_key_ref is not None:
        return _keyed(src.config_map_key_ref, "ConfigMap", inputs.config_maps, pod.namespace)
    if src.secret_key_ref is not None:
        return _keyed(src.secret_key_ref, "Secret", inputs.secrets, pod.namespace)
    return ""


SERVICES_NOT_READ: Final = "services have not yet been read at least once, cannot construct envvars"


def make_environment(pod: Pod, container: Container, inputs: EnvInputs) -> list[tuple[str, str]]:
    if not inputs.services_synced:
        raise ContainerConfigError(SERVICES_NOT_READ)
    env: dict[str, str] = {}
    for source in container.env_from:
        ref, store, kind = (
            (source.config_map_ref, inputs.config_maps, "configmap")
            if source.config_map_ref is not None
            else (source.secret_ref, inputs.secrets, "secret")
        )
        if ref is None:
            continue
        data = store.get(ref.name)
        if data is None:
            if ref.optional:
                continue
            raise ContainerConfigError(f'{kind} "{ref.name}" not found')
        for key, val in data.items():
            env[source.prefix + key] = val

    def lookup(name: str) -> str | None:
        return env.get(name, inputs.service_env.get(name))

    for var in container.env:
        value: str | None = var.value
        if var.value:
            value = expand(var.value, lookup)
        elif var.value_from is not None:
            value = _value_from(var.value_from, pod, container, inputs)
            if value is None:
                continue
        env[var.name] = value or ""
    result = list(env.items())
    result.extend((k, v) for k, v in inputs.service_env.items() if k not in env)
    return result


def expand_command(
    container: Container, env: Sequence[tuple[str, str]]
) -> tuple[list[str], list[str]]:
    values = dict(env)
    command = [expand(part, values.get) for part in container.command]
    args = [expand(part, values.get) for part in container.args]
    return command, args


MASTER_SERVICES: Final = frozenset({"kubernetes"})


def _env_name(text: str) -> str:
    return text.replace("-", "_").upper()


def _one_service_env(service: Mapping[str, Any]) -> list[tuple[str, str]]:
    spec = service.get("spec") or {}
    ip = str(spec.get("clusterIP") or "")
    ports = spec.get("ports") or []
    if not ports:
        return []
    prefix = _env_name(str(service["metadata"]["name"]))
    out = [(f"{prefix}_SERVICE_HOST", ip), (f"{prefix}_SERVICE_PORT", str(ports[0]["port"]))]
    out += [
        (f"{prefix}_SERVICE_PORT_{_env_name(p['name'])}", str(p["port"]))
        for p in ports
        if p.get("name")
    ]
    host = f"[{ip}]" if ":" in ip else ip
    for index, port in enumerate(ports):
        proto = str(port.get("protocol") or "TCP")
        url = f"{proto.lower()}://{host}:{port['port']}"
        if index == 0:
            out.append((f"{prefix}_PORT", url))
        port_prefix = f"{prefix}_PORT_{port['port']}_{proto.upper()}"
        out += [
            (port_prefix, url),
            (f"{port_prefix}_PROTO", proto.lower()),
            (f"{port_prefix}_PORT", str(port["port"])),
            (f"{port_prefix}_ADDR", ip),
        ]
    return out


def service_env(
    services: Sequence[Mapping[str, Any]], *, namespace: str, enable_service_links: bool
) -> dict[str, str]:
    """Docker-link style variables for Services: always the ``kubernetes`` Service of
    ``default``, and the pod's namespace's Services when ``enableServiceLinks``."""
    chosen: dict[str, Mapping[str, Any]] = {}
    for service in services:
        meta = service.get("metadata") or {}
        ip = (service.get("spec") or {}).get("clusterIP")
        if not ip or ip == "None":
            continue
        name = str(meta.get("name", ""))
        if meta.get("namespace") == "default" and name in MASTER_SERVICES:
            chosen.setdefault(name, service)
        elif meta.get("namespace") == namespace and enable_service_links:
            chosen[name] = service
    env: dict[str, str] = {}
    for name in sorted(chosen):
        env.update(_one_service_env(chosen[name]))
    return env

"""What a configMap, secret, downwardAPI or projected volume holds: pure functions from the pod,
its volume and the objects the caller fetched to a payload for the atomic writer, with the
kubelet's errors (``configmap "y" not found``, ``configmap references non-existent config key:
k``, ``failed to fetch token: ...``).

The kubelet's rules kept here:
- a ConfigMap volume without ``items`` holds every key of ``data`` and ``binaryData`` with
  ``defaultMode``; with ``items`` only those keys, at their ``path``, with their ``mode``; a key
  the object lacks is an error unless the source is ``optional``; a missing object is an error
  unless ``optional`` (then the volume is empty). Secrets alike (base64 ``data``).
- downwardAPI files take the pod's metadata (``metadata.name``, ``namespace``, ``uid``,
  ``labels``, ``annotations``, one label or annotation by subscript; maps as sorted
  ``key="value"`` lines, Go-quoted) and container resources (``resourceFieldRef`` with
  ``divisor``, limits defaulting to the node's allocatable), each error collected.
- a projected volume merges its sources in order (later paths win) with its ``defaultMode``;
  a service-account token file gets mode 0600 when the pod has an ``fsGroup`` (the volume
  manager then makes it group-readable), and the errors of all sources are aggregated.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from nodeagent.gotext import quote
from nodeagent.kuberuntime.env import ContainerConfigError, EnvInputs, resource_value
from nodeagent.podspec import (
    ConfigMapVolumeSource,
    DownwardAPIVolumeFile,
    KeyToPath,
    Pod,
    ProjectedVolumeSource,
    SecretVolumeSource,
    ServiceAccountTokenProjection,
    Volume,
    volume_objects,
)
from nodeagent.volumemanager.content.errors import VolumeSetupError, aggregate
from nodeagent.volumemanager.content.writer import FileProjection

TOKEN_MODE_WITH_FS_GROUP: Final = 0o600


@dataclass(frozen=True, slots=True)
class ObjectData:
    """The content of a ConfigMap (``data`` then ``binaryData``) or a Secret (decoded ``data``)."""

    data: Mapping[str, bytes]


@dataclass(frozen=True, slots=True)
class FetchError:
    """Why an object or a token could not be had, in the kubelet's words."""

    message: str


NOT_FOUND: Final = None
Fetched = ObjectData | FetchError | None
"""A fetched object: its data, None when it does not exist, or why fetching it failed."""

TokenKey = tuple[str, int]
"""(audience, expirationSeconds) of a ``serviceAccountToken`` projection."""


@dataclass(frozen=True, kw_only=True)
class Inputs:
    config_maps: Mapping[str, Fetched] = field(default_factory=dict)
    secrets: Mapping[str, Fetched] = field(default_factory=dict)
    tokens: Mapping[TokenKey, bytes | FetchError] = field(default_factory=dict)
    allocatable: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class References:
    """What a volume's content needs fetched."""

    config_maps: frozenset[str] = frozenset()
    secrets: frozenset[str] = frozenset()
    tokens: frozenset[TokenKey] = frozenset()


def token_key(projection: ServiceAccountTokenProjection) -> TokenKey:
    return (projection.audience, projection.expiration_seconds)


def references(volume: Volume) -> References:
    config_maps, secrets = volume_objects(volume)
    tokens: set[TokenKey] = set()
    if volume.projected is not None:
        for source in volume.projected.sources:
            if source.service_account_token is not None:
                tokens.add(token_key(source.service_account_token))
    return References(frozenset(config_maps), frozenset(secrets), frozenset(tokens))


# --- ConfigMap and Secret ---------------------------------------------------------------------


def _keyed_payload(
    items: Sequence[KeyToPath],
    data: Mapping[str, bytes],
    default_mode: int,
    optional: bool,
    missing_key: str,
) -> dict[str, FileProjection]:
    if not items:
        return {key: FileProjection(value, default_mode) for key, value in data.items()}
    payload: dict[str, FileProjection] = {}
    for item in items:
        if item.key not in data:
            if optional:
                continue
            raise VolumeSetupError(f"{missing_key}: {item.key}")
        mode = item.mode if item.mode is not None else default_mode
        payload[item.path] = FileProjection(data[item.key], mode)
    return payload


def _object_data(kind: str, name: str, fetched: Fetched, optional: bool) -> Mapping[str, bytes]:
    if isinstance(fetched, FetchError):
        raise VolumeSetupError(fetched.message)
    if fetched is None:
        if optional:
            return {}
        raise VolumeSetupError(f'{kind} "{name}" not found')
    return fetched.data


def config_map_payload(
    name: str,
    items: Sequence[KeyToPath],
    fetched: Fetched,
    *,
    default_mode: int,
    optional: bool,
) -> dict[str, FileProjection]:
    data = _object_data("configmap", name, fetched, optional)
    return _keyed_payload(
        items, data, default_mode, optional, "configmap references non-existent config key"
    )


def secret_payload(
    name: str,
    items: Sequence[KeyToPath],
    fetched: Fetched,
    *,
    default_mode: int,
    optional: bool,
) -> dict[str, FileProjection]:
    data = _object_data("secret", name, fetched, optional)
    return _keyed_payload(items, data, default_mode, optional, "references non-existent secret key")


# --- downward API -----------------------------------------------------------------------------


def format_map(values: Mapping[str, str]) -> str:
    """Labels or annotations as the kubelet's ``fieldpath.FormatMap``: sorted ``k="v"`` lines."""
    return "\n".join(f"{key}={quote(values[key])}" for key in sorted(values))


def _subscript(field_path: str) -> tuple[str, str] | None:
    path, bracket, rest = field_path.partition("[")
    if bracket and rest.endswith("]") and len(rest) > 2 and rest[0] == rest[-2] == "'":
        return path, rest[1:-2]
    return None


def metadata_field(pod: Pod, field_path: str) -> str:
    """A downwardAPI volume ``fieldRef``, as ``fieldpath.ExtractFieldPathAsString``: only the
    pod's metadata (the apiserver refuses other fields in volumes)."""
    meta = pod.metadata
    split = _subscript(field_path)
    if split is not None:
        path, key = split
        if path == "metadata.annotations":
            return meta.annotations.get(key, "")
        if path == "metadata.labels":
            return meta.labels.get(key, "")
        raise VolumeSetupError(f'fieldPath "{field_path}" does not support subscript')
    simple = {
        "metadata.name": meta.name,
        "metadata.namespace": meta.namespace,
        "metadata.uid": meta.uid,
    }
    if field_path in simple:
        return simple[field_path]
    if field_path == "metadata.labels":
        return format_map(meta.labels)
    if field_path == "metadata.annotations":
        return format_map(meta.annotations)
    raise VolumeSetupError(f"unsupported fieldPath: {field_path}")


def downward_api_payload(
    pod: Pod,
    items: Sequence[DownwardAPIVolumeFile],
    *,
    default_mode: int,
    allocatable: Mapping[str, str],
) -> dict[str, FileProjection]:
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    for item in items:
        mode = item.mode if item.mode is not None else default_mode
        value = ""
        try:
            if item.field_ref is not None:
                value = metadata_field(pod, item.field_ref.field_path)
            elif item.resource_field_ref is not None:
                value = _resource(pod, item, allocatable)
        except VolumeSetupError as e:
            errors.append(e.message)
        payload[item.path] = FileProjection(value.encode(), mode)
    if errors:
        raise VolumeSetupError(aggregate(errors))
    return payload


def _resource(pod: Pod, item: DownwardAPIVolumeFile, allocatable: Mapping[str, str]) -> str:
    ref = item.resource_field_ref
    assert ref is not None
    containers = (*pod.spec.containers, *pod.spec.init_containers)
    if not containers:
        raise VolumeSetupError(f"container {ref.container_name} not found")
    try:
        return resource_value(
            ref, pod, containers[0], EnvInputs(node_allocatable=allocatable), volume=True
        )
    except ContainerConfigError as e:
        raise VolumeSetupError(str(e)) from e


# --- the volumes ------------------------------------------------------------------------------


def unsupported_projection(volume: Volume) -> str | None:
    """The first projected source this node cannot fill, by its API name."""
    if volume.projected is None:
        return None
    for source in volume.projected.sources:
        if source.cluster_trust_bundle is not None:
            return "clusterTrustBundle"
        if source.pod_certificate is not None:
            return "podCertificate"
    return None


def projected_payload(
    pod: Pod, projected: ProjectedVolumeSource, inputs: Inputs
) -> dict[str, FileProjection]:
    payload: dict[str, FileProjection] = {}
    errors: list[str] = []
    mode = projected.default_mode
    context = pod.spec.security_context
    token_mode = TOKEN_MODE_WITH_FS_GROUP if context and context.fs_group is not None else mode
    for source in projected.sources:
        try:
            if source.config_map is not None:
                cm = source.config_map
                payload |= config_map_payload(
                    cm.name,
                    cm.items,
                    inputs.config_maps.get(cm.name),
                    default_mode=mode,
                    optional=bool(cm.optional),
                )
            elif source.secret is not None:
                secret = source.secret
                payload |= secret_payload(
                    secret.name,
                    secret.items,
                    inputs.secrets.get(secret.name),
                    default_mode=mode,
                    optional=bool(secret.optional),
                )
            elif source.downward_api is not None:
                payload |= downward_api_payload(
                    pod,
                    source.downward_api.items,
                    default_mode=mode,
                    allocatable=inputs.allocatable,
                )
            elif source.service_account_token is not None:
                projection = source.service_account_token
                token = inputs.tokens.get(token_key(projection))
                if token is None:
                    raise VolumeSetupError("failed to fetch token: not requested")
                if isinstance(token, FetchError):
                    raise VolumeSetupError(token.message)
                payload[projection.path] = FileProjection(token, token_mode)
            elif source.cluster_trust_bundle is not None:
                raise VolumeSetupError("clusterTrustBundle is not supported on this node")
            elif source.pod_certificate is not None:
                raise VolumeSetupError("podCertificate is not supported on this node")
        except VolumeSetupError as e:
            errors.append(e.message)
    if errors:
        raise VolumeSetupError(aggregate(errors))
    return payload


def volume_payload(pod: Pod, volume: Volume, inputs: Inputs) -> dict[str, FileProjection]:
    """The files of a configMap, secret, downwardAPI or projected ``volume``; raises
    :class:`VolumeSetupError` with the kubelet's message."""
    if volume.config_map is not None:
        cm: ConfigMapVolumeSource = volume.config_map
        return config_map_payload(
            cm.name,
            cm.items,
            inputs.config_maps.get(cm.name),
            default_mode=cm.default_mode,
            optional=bool(cm.optional),
        )
    if volume.secret is not None:
        secret: SecretVolumeSource = volume.secret
        return secret_payload(
            secret.secret_name,
            secret.items,
            inputs.secrets.get(secret.secret_name),
            default_mode=secret.default_mode,
            optional=bool(secret.optional),
        )
    if volume.downward_api is not None:
        return downward_api_payload(
            pod,
            volume.downward_api.items,
            default_mode=volume.downward_api.default_mode,
            allocatable=inputs.allocatable,
        )
    if volume.projected is not None:
        return projected_payload(pod, volume.projected, inputs)
    raise VolumeSetupError(
        f"volume {volume.name} has no content source ({volume.source or 'none'})"
    )

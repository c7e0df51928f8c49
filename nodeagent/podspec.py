"""The subset of core/v1 Pod the node agent reads, decoded once at the API edge.

``decode_pod(obj)`` turns the JSON of a Pod into frozen ``msgspec`` structs with the API's
field names (camelCase on the wire, snake_case here) and the apiserver's defaults filled in for
what a bare object may lack. The previous ``status`` stays raw JSON: the status code reads a few
fields of it and writes a whole new one.

Decoding also checks, with the apiserver's wording, what the agent itself builds paths and
runtime requests from: the pod's name (DNS-1123 subdomain), namespace (DNS-1123 label) and UID,
container names (DNS-1123 labels, at most 63 characters) and ports' ``hostIP``. The apiserver
already refuses such pods; static pods and any future source must not depend on that.
"""

from __future__ import annotations

import ipaddress
import json
import re
from typing import Any, Final, NewType

import msgspec

PodUID = NewType("PodUID", str)

DEFAULT_TERMINATION_GRACE_PERIOD: Final = 30
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
CONFIG_SOURCE_ANNOTATION: Final = "kubernetes.io/config.source"


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


class _S(msgspec.Struct, rename="camel", frozen=True, kw_only=True):
    pass


class OwnerReference(_S, frozen=True):
    kind: str = ""
    name: str = ""
    uid: str = ""
    controller: bool | None = None


class ObjectMeta(_S, frozen=True):
    name: str = ""
    namespace: str = "default"
    uid: str = ""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    creation_timestamp: str | None = None
    resource_version: str = ""
    generation: int = 0
    owner_references: tuple[OwnerReference, ...] = ()


class ContainerPort(_S, frozen=True):
    container_port: int
    name: str = ""
    host_port: int = 0
    host_ip: str = msgspec.field(name="hostIP", default="")
    protocol: str = "TCP"


class ObjectFieldSelector(_S, frozen=True):
    field_path: str
    api_version: str = "v1"


class ResourceFieldSelector(_S, frozen=True):
    resource: str
    container_name: str = ""
    divisor: str | int | None = None


class KeySelector(_S, frozen=True):
    key: str
    name: str = ""
    optional: bool | None = None


class EnvVarSource(_S, frozen=True):
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    config_map_key_ref: KeySelector | None = None
    secret_key_ref: KeySelector | None = None


class EnvVar(_S, frozen=True):
    name: str
    value: str = ""
    value_from: EnvVarSource | None = None


class LocalRef(_S, frozen=True):
    name: str = ""
    optional: bool | None = None


class EnvFromSource(_S, frozen=True):
    prefix: str = ""
    config_map_ref: LocalRef | None = None
    secret_ref: LocalRef | None = None


class ResourceRequirements(_S, frozen=True):
    limits: dict[str, str | int | float] = {}
    requests: dict[str, str | int | float] = {}


class ContainerResizePolicy(_S, frozen=True):
    """``resizePolicy[]``: whether resizing ``resourceName`` restarts the container
    (``RestartContainer``) or not (``NotRequired``, the default when absent)."""

    resource_name: str
    restart_policy: str = "NotRequired"


class Capabilities(_S, frozen=True):
    add: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()


class SeccompProfile(_S, frozen=True):
    type: str = ""
    localhost_profile: str | None = None


class SecurityContext(_S, frozen=True):
    privileged: bool | None = None
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_non_root: bool | None = None
    read_only_root_filesystem: bool | None = None
    allow_privilege_escalation: bool | None = None
    capabilities: Capabilities | None = None
    seccomp_profile: SeccompProfile | None = None


class ExecAction(_S, frozen=True):
    command: tuple[str, ...] = ()


class HTTPHeader(_S, frozen=True):
    name: str
    value: str = ""


class HTTPGetAction(_S, frozen=True):
    port: int | str
    path: str = ""
    host: str = ""
    scheme: str = "HTTP"
    http_headers: tuple[HTTPHeader, ...] = ()


class TCPSocketAction(_S, frozen=True):
    port: int | str
    host: str = ""


class GRPCAction(_S, frozen=True):
    port: int
    service: str | None = None


class SleepAction(_S, frozen=True):
    seconds: int


class Probe(_S, frozen=True):
    """A container probe with the apiserver's defaults (``timeoutSeconds`` 1,
    ``periodSeconds`` 10, ``successThreshold`` 1, ``failureThreshold`` 3)."""

    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    grpc: GRPCAction | None = None
    initial_delay_seconds: int = 0
    timeout_seconds: int = 1
    period_seconds: int = 10
    success_threshold: int = 1
    failure_threshold: int = 3
    termination_grace_period_seconds: int | None = None


class LifecycleHandler(_S, frozen=True):
    exec: ExecAction | None = None
    http_get: HTTPGetAction | None = None
    tcp_socket: TCPSocketAction | None = None
    sleep: SleepAction | None = None


class Lifecycle(_S, frozen=True):
    post_start: LifecycleHandler | None = None
    pre_stop: LifecycleHandler | None = None
    stop_signal: str | None = None


class VolumeMount(_S, frozen=True):
    name: str
    mount_path: str
    read_only: bool = False
    sub_path: str = ""
    sub_path_expr: str = ""
    mount_propagation: str | None = None
    recursive_read_only: str | None = None


DEFAULT_VOLUME_MODE: Final = 0o644
"""The apiserver's ``defaultMode`` for configMap, secret, downwardAPI and projected volumes."""


class KeyToPath(_S, frozen=True):
    key: str
    path: str
    mode: int | None = None


class EmptyDirVolumeSource(_S, frozen=True):
    medium: str = ""
    size_limit: str | int | None = None


class HostPathVolumeSource(_S, frozen=True):
    path: str
    type: str | None = None


class ConfigMapVolumeSource(_S, frozen=True):
    name: str = ""
    items: tuple[KeyToPath, ...] = ()
    default_mode: int = DEFAULT_VOLUME_MODE
    optional: bool | None = None


class SecretVolumeSource(_S, frozen=True):
    secret_name: str = ""
    items: tuple[KeyToPath, ...] = ()
    default_mode: int = DEFAULT_VOLUME_MODE
    optional: bool | None = None


class DownwardAPIVolumeFile(_S, frozen=True):
    path: str
    field_ref: ObjectFieldSelector | None = None
    resource_field_ref: ResourceFieldSelector | None = None
    mode: int | None = None


class DownwardAPIVolumeSource(_S, frozen=True):
    items: tuple[DownwardAPIVolumeFile, ...] = ()
    default_mode: int = DEFAULT_VOLUME_MODE


class ConfigMapProjection(_S, frozen=True):
    name: str = ""
    items: tuple[KeyToPath, ...] = ()
    optional: bool | None = None


class SecretProjection(_S, frozen=True):
    name: str = ""
    items: tuple[KeyToPath, ...] = ()
    optional: bool | None = None


class DownwardAPIProjection(_S, frozen=True):
    items: tuple[DownwardAPIVolumeFile, ...] = ()


class ServiceAccountTokenProjection(_S, frozen=True):
    path: str
    audience: str = ""
    expiration_seconds: int = 3600


class VolumeProjection(_S, frozen=True):
    config_map: ConfigMapProjection | None = None
    secret: SecretProjection | None = None
    downward_api: DownwardAPIProjection | None = msgspec.field(name="downwardAPI", default=None)
    service_account_token: ServiceAccountTokenProjection | None = None
    cluster_trust_bundle: dict[str, Any] | None = None
    pod_certificate: dict[str, Any] | None = None


class ProjectedVolumeSource(_S, frozen=True):
    sources: tuple[VolumeProjection, ...] = ()
    default_mode: int = DEFAULT_VOLUME_MODE


SUPPORTED_VOLUME_SOURCES: Final = (
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
)
UNSUPPORTED_VOLUME_SOURCES: Final = (
    "persistentVolumeClaim",
    "csi",
    "ephemeral",
    "image",
    "nfs",
    "iscsi",
    "rbd",
    "cephfs",
    "fc",
    "flexVolume",
    "gitRepo",
    "glusterfs",
    "awsElasticBlockStore",
    "gcePersistentDisk",
    "azureDisk",
    "azureFile",
    "vsphereVolume",
    "cinder",
    "flocker",
    "quobyte",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
)


class Volume(_S, frozen=True, forbid_unknown_fields=False):
    """One ``spec.volumes[]`` entry. The sources nodeagent can set up are typed; any other
    source is kept raw under ``other`` (its API name → its JSON) so the volume manager can
    refuse it by name."""

    name: str
    empty_dir: EmptyDirVolumeSource | None = None
    host_path: HostPathVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None
    downward_api: DownwardAPIVolumeSource | None = msgspec.field(name="downwardAPI", default=None)
    projected: ProjectedVolumeSource | None = None
    other: dict[str, Any] = {}

    @property
    def source(self) -> str:
        """The API name of the volume's source (``emptyDir``, ``persistentVolumeClaim``, ...),
        ``""`` when it has none the agent recognises."""
        for key, value in (
            ("emptyDir", self.empty_dir),
            ("hostPath", self.host_path),
            ("configMap", self.config_map),
            ("secret", self.secret),
            ("downwardAPI", self.downward_api),
            ("projected", self.projected),
        ):
            if value is not None:
                return key
        return next(iter(self.other), "")


class Container(_S, frozen=True):
    name: str
    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    working_dir: str = ""
    ports: tuple[ContainerPort, ...] = ()
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvFromSource, ...] = ()
    resources: ResourceRequirements = ResourceRequirements()
    resize_policy: tuple[ContainerResizePolicy, ...] = ()
    image_pull_policy: str = ""
    termination_message_path: str = "/dev/termination-log"
    termination_message_policy: str = "File"
    security_context: SecurityContext | None = None
    volume_mounts: tuple[VolumeMount, ...] = ()
    stdin: bool = False
    stdin_once: bool = False
    tty: bool = False
    restart_policy: str | None = None
    """Only on init containers: ``Always`` makes a sidecar."""
    liveness_probe: Probe | None = None
    readiness_probe: Probe | None = None
    startup_probe: Probe | None = None
    lifecycle: Lifecycle | None = None

    @property
    def pull_policy(self) -> str:
        """The apiserver's default when unset: Always for ``:latest`` or no tag."""
        if self.image_pull_policy:
            return self.image_pull_policy
        last = self.image.rsplit("/", 1)[-1]
        if "@" in last:
            return "IfNotPresent"
        tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
        return "Always" if tag == "latest" else "IfNotPresent"


class EphemeralContainer(Container, frozen=True):
    """One ``spec.ephemeralContainers[]`` entry (``kubectl debug``): a container added to a
    running pod through the ``ephemeralcontainers`` subresource, started once and never
    restarted. ``targetContainerName`` puts it in that container's PID namespace."""

    target_container_name: str = ""


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


class Sysctl(_S, frozen=True):
    name: str
    value: str


class PodSecurityContext(_S, frozen=True):
    run_as_user: int | None = None
    run_as_group: int | None = None
    run_as_non_root: bool | None = None
    supplemental_groups: tuple[int, ...] = ()
    fs_group: int | None = None
    fs_group_change_policy: str | None = None
    sysctls: tuple[Sysctl, ...] = ()
    seccomp_profile: SeccompProfile | None = None
    supplemental_groups_policy: str | None = None


class DNSOption(_S, frozen=True):
    name: str
    value: str | None = None


class PodDNSConfig(_S, frozen=True):
    nameservers: tuple[str, ...] = ()
    searches: tuple[str, ...] = ()
    options: tuple[DNSOption, ...] = ()


class HostAlias(_S, frozen=True):
    """One ``spec.hostAliases`` entry: a line of the pod's managed /etc/hosts."""

    ip: str = ""
    hostnames: tuple[str, ...] = ()


class PodOS(_S, frozen=True):
    name: str = "linux"


class PodSpec(_S, frozen=True):
    containers: tuple[Container, ...] = ()
    init_containers: tuple[Container, ...] = ()
    ephemeral_containers: tuple[EphemeralContainer, ...] = ()
    restart_policy: str = "Always"
    termination_grace_period_seconds: int | None = DEFAULT_TERMINATION_GRACE_PERIOD
    dns_policy: str = "ClusterFirst"
    dns_config: PodDNSConfig | None = None
    host_network: bool = False
    host_pid: bool = msgspec.field(name="hostPID", default=False)
    host_ipc: bool = msgspec.field(name="hostIPC", default=False)
    share_process_namespace: bool | None = None
    hostname: str = ""
    subdomain: str = ""
    set_hostname_as_fqdn: bool | None = msgspec.field(name="setHostnameAsFQDN", default=None)
    node_name: str = ""
    service_account_name: str = ""
    security_context: PodSecurityContext | None = None
    priority: int | None = None
    priority_class_name: str = ""
    runtime_class_name: str | None = None
    overhead: dict[str, str | int | float] = {}
    tolerations: tuple[dict[str, Any], ...] = ()
    # Admission's general predicates read these as the scheduler's filters do.
    node_selector: dict[str, str] = {}
    affinity: dict[str, Any] | None = None
    os: PodOS | None = None
    enable_service_links: bool | None = None
    volumes: tuple[Volume, ...] = ()
    host_aliases: tuple[HostAlias, ...] = ()
    hostname_override: str | None = None
    # Read only so that admission can refuse them by name (nodeagent does not implement them
    # yet, and a pod must never run as if they were absent): see pods/admission.unsupported.
    resources: dict[str, Any] | None = None
    readiness_gates: tuple[dict[str, Any], ...] = ()
    active_deadline_seconds: int | None = None
    resource_claims: tuple[dict[str, Any], ...] = ()
    host_users: bool | None = None


class Pod(_S, frozen=True):
    metadata: ObjectMeta = ObjectMeta()
    spec: PodSpec = PodSpec()
    status: dict[str, Any] = {}

    @property
    def uid(self) -> PodUID:
        return PodUID(self.metadata.uid)

    @property
    def name(self) -> str:
        return self.metadata.name

    @property
    def namespace(self) -> str:
        return self.metadata.namespace

    @property
    def deleted(self) -> bool:
        return self.metadata.deletion_timestamp is not None

    @property
    def is_static(self) -> bool:
        source = self.metadata.annotations.get(CONFIG_SOURCE_ANNOTATION, "api")
        return source != "api"

    @property
    def is_mirror(self) -> bool:
        return MIRROR_POD_ANNOTATION in self.metadata.annotations


def _keep_other_volume_sources(obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with each volume's unrecognised sources copied under ``other``."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    volumes = spec.get("volumes")
    if not isinstance(volumes, list) or not volumes:
        return obj
    kept = []
    for volume in volumes:
        other = (
            {k: v for k, v in volume.items() if k not in ("name", *SUPPORTED_VOLUME_SOURCES)}
            if isinstance(volume, dict)
            else {}
        )
        kept.append({**volume, "other": other} if other else volume)
    return {**obj, "spec": {**spec, "volumes": kept}}


def decode_pod(obj: dict[str, Any]) -> Pod:
    """A Pod from its JSON; raises ``msgspec.ValidationError`` naming the bad field
    (:class:`PodSpecError` for a name, UID or ``hostIP`` the agent refuses)."""
    pod = msgspec.convert(_keep_other_volume_sources(obj), Pod, strict=False)
    check_identity(pod)
    return pod


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
    for key, containers in (
        ("initContainers", pod.spec.init_containers),
        ("containers", pod.spec.containers),
        ("ephemeralContainers", pod.spec.ephemeral_containers),
    ):
        for i, container in enumerate(containers):
            where = f"spec.{key}[{i}]"
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


def format_pod(pod: Pod) -> str:
    """``name_namespace(uid)``, as the kubelet's ``format.Pod`` writes pods in messages."""
    return f"{pod.name}_{pod.namespace}({pod.uid})"


def termination_grace_period(pod: Pod) -> int:
    """The grace the pod gets when it is killed: the deletion's, else the spec's."""
    if pod.metadata.deletion_grace_period_seconds is not None:
        return pod.metadata.deletion_grace_period_seconds
    if pod.spec.termination_grace_period_seconds is not None:
        return pod.spec.termination_grace_period_seconds
    return DEFAULT_TERMINATION_GRACE_PERIOD

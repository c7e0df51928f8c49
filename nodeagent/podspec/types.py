"""The subset of core/v1 Pod the node agent reads, as frozen ``msgspec`` structs with the API's
field names (camelCase on the wire, snake_case here) and the apiserver's defaults filled in for
what a bare object may lack. The previous ``status`` stays raw JSON: the status code reads a few
fields of it and writes a whole new one. Decoding is :mod:`.decode`'s, the checks
:mod:`.validation`'s.
"""

from __future__ import annotations

from typing import Any, Final, NewType

import msgspec

PodUID = NewType("PodUID", str)

DEFAULT_TERMINATION_GRACE_PERIOD: Final = 30
MIRROR_POD_ANNOTATION: Final = "kubernetes.io/config.mirror"
CONFIG_SOURCE_ANNOTATION: Final = "kubernetes.io/config.source"


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


class PersistentVolumeClaimVolumeSource(_S, frozen=True):
    claim_name: str = ""
    read_only: bool = False


class LocalObjectReference(_S, frozen=True):
    name: str = ""


class CSIVolumeSource(_S, frozen=True):
    """An inline (ephemeral) CSI volume."""

    driver: str = ""
    read_only: bool | None = None
    fs_type: str | None = None
    volume_attributes: dict[str, str] = {}
    node_publish_secret_ref: LocalObjectReference | None = None


class EphemeralVolumeSource(_S, frozen=True):
    """A generic ephemeral volume: the PVC ``<pod>-<volume>`` made from the template; only
    the template's presence matters to the node."""

    volume_claim_template: dict[str, Any] | None = None


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
    "image",
    "persistentVolumeClaim",
    "csi",
    "ephemeral",
)
UNSUPPORTED_VOLUME_SOURCES: Final = (
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


class ImageVolumeSource(_S, frozen=True):
    """``volumes[].image``: an OCI image (or artifact) mounted read-only by the runtime."""

    reference: str = ""
    pull_policy: str = ""

    @property
    def policy(self) -> str:
        """The apiserver's default when unset: Always for ``:latest`` or no tag."""
        if self.pull_policy:
            return self.pull_policy
        last = self.reference.rsplit("/", 1)[-1]
        if "@" in last:
            return "IfNotPresent"
        tag = last.rsplit(":", 1)[1] if ":" in last else "latest"
        return "Always" if tag == "latest" else "IfNotPresent"


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
    image: ImageVolumeSource | None = None
    persistent_volume_claim: PersistentVolumeClaimVolumeSource | None = None
    csi: CSIVolumeSource | None = None
    ephemeral: EphemeralVolumeSource | None = None
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
            ("image", self.image),
            ("persistentVolumeClaim", self.persistent_volume_claim),
            ("csi", self.csi),
            ("ephemeral", self.ephemeral),
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
    volume_devices: tuple[dict[str, Any], ...] = ()
    """Read only so that admission refuses them by name (block volumes are not mapped)."""
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
    image_pull_secrets: tuple[LocalObjectReference, ...] = ()
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
    # yet, and a pod must never run as if they were absent): see lifecycle/admission.unsupported.
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

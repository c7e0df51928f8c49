"""The ``kubelet:`` section: KubeletConfiguration (kubelet.config.k8s.io/v1beta1) field names
and defaults, for the subset nodeagent implements.

Field names follow the kubelet's JSON names exactly (``clusterDNS``,
``imageGCHighThresholdPercent``); the descriptions below are what ``nodeagent config reference``
prints.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec
from msgspec import Meta, field

from nodeagent.config.units import Duration


def doc(text: str) -> Meta:
    return Meta(description=text)


def dur(text: str) -> Duration:
    return Duration.parse(text)


class Section(msgspec.Struct, rename="camel", forbid_unknown_fields=True, frozen=True):
    pass


class Taint(Section, frozen=True):
    key: Annotated[str, doc("Taint key: `[prefix/]name`, like a label key.")]
    effect: Annotated[
        Literal["NoSchedule", "PreferNoSchedule", "NoExecute"], doc("What the taint does.")
    ]
    value: Annotated[str, doc("Optional taint value, with label-value syntax.")] = ""


class ShutdownGracePeriodByPodPriority(Section, frozen=True):
    priority: Annotated[int, doc("Lowest pod priority in this group.")]
    shutdown_grace_period_seconds: Annotated[
        int, doc("Seconds the pods of this group get to stop during node shutdown.")
    ]


class MemorySwapConfiguration(Section, frozen=True):
    swap_behavior: Annotated[
        Literal["NoSwap", "LimitedSwap"],
        doc(
            "`NoSwap`: pods get no swap. `LimitedSwap`: Burstable, non-critical pods get swap "
            "in proportion to their memory request (requires `failSwapOn: false`)."
        ),
    ] = "NoSwap"


class X509Authentication(Section, frozen=True):
    client_ca_file: Annotated[
        str, doc("CA bundle that signs client certificates accepted by the kubelet API.")
    ] = field(name="clientCAFile", default="")


class WebhookAuthentication(Section, frozen=True):
    enabled: Annotated[bool, doc("Authenticate bearer tokens with a TokenReview.")] = True
    cache_ttl: Annotated[Duration, doc("How long TokenReview results are cached.")] = field(
        name="cacheTTL", default=dur("2m")
    )


class AnonymousAuthentication(Section, frozen=True):
    enabled: Annotated[bool, doc("Treat unauthenticated requests as `system:anonymous`.")] = False


class Authentication(Section, frozen=True):
    x509: X509Authentication = X509Authentication()
    webhook: WebhookAuthentication = WebhookAuthentication()
    anonymous: AnonymousAuthentication = AnonymousAuthentication()


class WebhookAuthorization(Section, frozen=True):
    cache_authorized_ttl: Annotated[Duration, doc("Cache time for allowed decisions.")] = field(
        name="cacheAuthorizedTTL", default=dur("5m")
    )
    cache_unauthorized_ttl: Annotated[Duration, doc("Cache time for denied decisions.")] = field(
        name="cacheUnauthorizedTTL", default=dur("30s")
    )


class Authorization(Section, frozen=True):
    mode: Annotated[
        Literal["AlwaysAllow", "Webhook"],
        doc("`Webhook` asks the API server with a SubjectAccessReview."),
    ] = "Webhook"
    webhook: WebhookAuthorization = WebhookAuthorization()


class LoggingConfiguration(Section, frozen=True):
    verbosity: Annotated[int, doc("Log verbosity, like the kubelet's `-v` (0 = least).")] = 0


DEFAULT_EVICTION_HARD = {
    "memory.available": "100Mi",
    "nodefs.available": "10%",
    "nodefs.inodesFree": "5%",
    "imagefs.available": "15%",
}


class KubeletConfiguration(Section, frozen=True):
    # --- pods and static pods -------------------------------------------------------------
    sync_frequency: Annotated[Duration, doc("Max period between pod syncs.")] = dur("1m")
    file_check_frequency: Annotated[Duration, doc("How often `staticPodPath` is re-read.")] = dur(
        "20s"
    )
    static_pod_path: Annotated[
        str, doc("Directory (absolute) of static pod manifests; empty disables static pods.")
    ] = ""
    max_pods: Annotated[int, doc("Most pods this node runs.")] = 110
    pod_pids_limit: Annotated[int, doc("Max PIDs per pod; -1 means no pod-level limit.")] = -1
    cluster_domain: Annotated[str, doc("DNS domain of the cluster (e.g. `cluster.local`).")] = ""
    cluster_dns: Annotated[
        tuple[str, ...], doc("DNS server IPs written into pods' resolv.conf.")
    ] = field(name="clusterDNS", default=())
    resolv_conf: Annotated[str, doc("Host resolver file used as the pods' DNS base.")] = (
        "/etc/resolv.conf"
    )
    pod_logs_dir: Annotated[str, doc("Where container logs are written.")] = "/var/log/pods"
    container_log_max_size: Annotated[
        str, doc("Size at which a container log is rotated (quantity).")
    ] = "10Mi"
    container_log_max_files: Annotated[int, doc("Log files kept per container (at least 2).")] = 5
    container_log_max_workers: Annotated[
        int, doc("Containers whose logs are rotated concurrently (at least 1).")
    ] = 1
    container_log_monitor_interval: Annotated[
        Duration, doc("How often container log sizes are checked for rotation (at least 3s).")
    ] = dur("10s")
    enable_system_log_handler: Annotated[
        bool, doc("Serve the node's `/var/log` on the kubelet API at `/logs/`.")
    ] = True
    enable_system_log_query: Annotated[
        bool,
        doc("Answer `/logs/?query=<unit>` from the journal (needs `enableSystemLogHandler`)."),
    ] = False
    # --- server ---------------------------------------------------------------------------
    address: Annotated[str, doc("IP the kubelet API listens on.")] = "0.0.0.0"
    port: Annotated[int, doc("Port of the kubelet API (HTTPS).")] = 10250
    read_only_port: Annotated[
        int, doc("Unauthenticated read-only port; 0 (off) is the only value nodeagent accepts.")
    ] = 0
    healthz_port: Annotated[int, doc("Port of `/healthz`; 0 disables it.")] = 10248
    healthz_bind_address: Annotated[str, doc("IP `/healthz` listens on.")] = "127.0.0.1"
    tls_cert_file: Annotated[str, doc("Serving certificate; empty means self-signed.")] = ""
    tls_private_key_file: Annotated[str, doc("Key of `tlsCertFile`.")] = ""
    rotate_certificates: Annotated[
        bool, doc("Renew the client certificate through CSRs before it expires.")
    ] = False
    server_tls_bootstrap: Annotated[
        bool, doc("Request the serving certificate through a CSR (kubelet-serving signer).")
    ] = field(name="serverTLSBootstrap", default=False)
    authentication: Authentication = Authentication()
    authorization: Authorization = Authorization()
    # --- node status and lease ------------------------------------------------------------
    register_node: Annotated[
        bool, doc("Create the Node object on start; false = manual registration.")
    ] = True
    register_with_taints: Annotated[
        tuple[Taint, ...], doc("Taints put on the Node when it is created.")
    ] = ()
    node_status_update_frequency: Annotated[Duration, doc("How often node status is computed.")] = (
        dur("10s")
    )
    node_status_report_frequency: Annotated[
        Duration,
        doc(
            "Max period between status patches when nothing changed. Defaults to "
            "`nodeStatusUpdateFrequency` when only that one is set (kubelet rule)."
        ),
    ] = dur("5m")
    node_status_max_images: Annotated[int, doc("Images listed in node status; -1 = all.")] = 50
    node_lease_duration_seconds: Annotated[
        int, doc("Lease duration; renewed every quarter of it.")
    ] = 40
    provider_id: Annotated[str, doc("`spec.providerID` of the Node.")] = field(
        name="providerID", default=""
    )
    # --- images ---------------------------------------------------------------------------
    image_minimum_gc_age: Annotated[
        Duration, doc("Unused images younger than this are never removed.")
    ] = field(name="imageMinimumGCAge", default=dur("2m"))
    image_maximum_gc_age: Annotated[
        Duration, doc("Unused images older than this are removed; 0 disables.")
    ] = field(name="imageMaximumGCAge", default=dur("0s"))
    image_gc_high_threshold_percent: Annotated[
        int, doc("Disk usage (%) that starts image GC; 100 disables it.")
    ] = field(name="imageGCHighThresholdPercent", default=85)
    image_gc_low_threshold_percent: Annotated[
        int, doc("Disk usage (%) image GC frees down to.")
    ] = field(name="imageGCLowThresholdPercent", default=80)
    serialize_image_pulls: Annotated[
        bool,
        doc("Pull one image at a time. Defaults to false when `maxParallelImagePulls` > 1."),
    ] = True
    max_parallel_image_pulls: Annotated[
        int | None, doc("Max parallel pulls; null = 1 if serialized, else unlimited.")
    ] = None
    registry_pull_qps: Annotated[
        int,
        doc(
            "Image pulls started per second (`--registry-qps`); 0: no limit. A pull over it "
            "fails at once with `pull QPS exceeded` (ErrImagePull, then the pull back-off)."
        ),
    ] = field(name="registryPullQPS", default=5)
    registry_burst: Annotated[
        int,
        doc("Pulls that may start at once above `registryPullQPS` (`--registry-burst`)."),
    ] = 10
    image_pull_credentials_verification_policy: Annotated[
        Literal[
            "NeverVerify",
            "NeverVerifyPreloadedImages",
            "NeverVerifyAllowlistedImages",
            "AlwaysVerify",
        ],
        doc(
            "Gate KubeletEnsureSecretPulledImages: when a pod may use an image already on the "
            "node without pulling it with its own credentials. `NeverVerify`: always. "
            "`NeverVerifyPreloadedImages`: images the agent did not pull serve every pod; one "
            "it pulled with a pull secret serves only pods with that secret (or its "
            "credential), the others pull it again. `NeverVerifyAllowlistedImages`: only the "
            "images of `preloadedImagesVerificationAllowlist` serve every pod; every other "
            "image is checked, preloaded or not. `AlwaysVerify`: every image is checked. "
            "Records: `<rootDir>/image_manager/`, pruned after image garbage collection."
        ),
    ] = "NeverVerifyPreloadedImages"
    preloaded_images_verification_allowlist: Annotated[
        tuple[str, ...],
        doc(
            "With `NeverVerifyAllowlistedImages`: images (no tag or digest, e.g. "
            "`registry.example.com/base`) or prefixes ending in `/*` that never need "
            "credentials."
        ),
    ] = ()
    # --- runtime and cgroups --------------------------------------------------------------
    container_runtime_endpoint: Annotated[str, doc("CRI runtime socket URL.")] = (
        "unix:///run/containerd/containerd.sock"
    )
    image_service_endpoint: Annotated[
        str, doc("CRI image service socket; empty = `containerRuntimeEndpoint`.")
    ] = ""
    runtime_request_timeout: Annotated[
        Duration, doc("Timeout of CRI calls (except pulls, logs, exec).")
    ] = dur("2m")
    cgroup_driver: Annotated[
        Literal["cgroupfs", "systemd"],
        doc(
            "How pod cgroups are named (`systemd`: slices). The runtime decides when it can "
            "say: its CRI `RuntimeConfig` answer (containerd 2.0+, CRI-O 1.28+), else "
            "containerd 1.x's runc `SystemdCgroup` option from a verbose `Status`; this "
            "value is used only when the runtime reveals neither."
        ),
    ] = "cgroupfs"
    cgroups_per_qos: Annotated[
        bool, doc("Create the QoS cgroup hierarchy (kubepods, burstable, besteffort).")
    ] = field(name="cgroupsPerQOS", default=True)
    cgroup_root: Annotated[str, doc("Root cgroup for pods; empty = the driver's default.")] = ""
    fail_cgroup_v1: Annotated[
        bool, doc("Refuse to start on a cgroup v1 host (kubelet default since 1.35).")
    ] = field(name="failCgroupV1", default=True)
    allowed_unsafe_sysctls: Annotated[
        tuple[str, ...],
        doc(
            "Unsafe sysctls pods may set besides the safe ones, or prefixes ending in `*` "
            "(`kernel.shm*`); only namespaced ones: `kernel.sem`, `kernel.shm*`, "
            "`kernel.msg*`, `fs.mqueue.*`, `net.*`. Any other is refused at admission "
            "(`SysctlForbidden`)."
        ),
    ] = ()
    seccomp_default: Annotated[
        bool, doc("Run containers without a `seccompProfile` under the runtime's default profile.")
    ] = False
    # --- resources, eviction, swap --------------------------------------------------------
    kube_reserved: Annotated[
        dict[str, str], doc("Resources (cpu, memory, ephemeral-storage, pid) kept for node agents.")
    ] = field(default_factory=dict)
    system_reserved: Annotated[
        dict[str, str], doc("Resources (cpu, memory, ephemeral-storage, pid) kept for the OS.")
    ] = field(default_factory=dict)
    kube_reserved_cgroup: Annotated[
        str, doc("Cgroup enforcing `kubeReserved` when listed in `enforceNodeAllocatable`.")
    ] = ""
    system_reserved_cgroup: Annotated[
        str, doc("Cgroup enforcing `systemReserved` when listed in `enforceNodeAllocatable`.")
    ] = ""
    qos_reserved: Annotated[
        dict[str, str],
        doc(
            "Alpha (gate QOSReserved): share of the higher QoS tiers' memory requests held "
            "back from the lower ones, `{memory: 50%}` (memory only)."
        ),
    ] = field(name="qosReserved", default_factory=dict)
    enforce_node_allocatable: Annotated[
        tuple[str, ...],
        doc("Levels to enforce: `pods`, `system-reserved`, `kube-reserved`, or `none`."),
    ] = ("pods",)
    eviction_hard: Annotated[
        dict[str, str],
        doc("Hard eviction thresholds: signal to quantity or percentage. Replaces the defaults."),
    ] = field(default_factory=lambda: dict(DEFAULT_EVICTION_HARD))
    eviction_soft: Annotated[
        dict[str, str],
        doc(
            "Soft eviction thresholds: signal to quantity or percentage; each needs a grace period."
        ),
    ] = field(default_factory=dict)
    eviction_soft_grace_period: Annotated[
        dict[str, Duration],
        doc("How long each soft threshold must hold before pods are evicted for it."),
    ] = field(default_factory=dict)
    eviction_max_pod_grace_period: Annotated[
        int, doc("Longest grace period (s) a pod evicted for a soft threshold gets; 0 = its own.")
    ] = 0
    eviction_minimum_reclaim: Annotated[
        dict[str, str],
        doc("Per signal, how much beyond the threshold to reclaim before pressure ends."),
    ] = field(default_factory=dict)
    eviction_pressure_transition_period: Annotated[
        Duration, doc("How long a pressure condition stays after the signal clears.")
    ] = dur("5m")
    local_storage_capacity_isolation: Annotated[
        bool,
        doc(
            "Enforce the pods' local ephemeral storage limits: a pod whose emptyDir exceeds "
            "its `sizeLimit`, or whose containers exceed their `limits.ephemeral-storage` "
            "(each, or all together), is evicted, with or without disk pressure."
        ),
    ] = True
    housekeeping_interval: Annotated[
        Duration,
        doc("How often cgroup stats (CPU, memory, IO, pids, PSI) are sampled (cAdvisor's 10s)."),
    ] = dur("10s")
    system_memory_contention_threshold: Annotated[
        float,
        doc(
            "PSINodeCondition (KEP-5394): `SystemMemoryContentionPressure` turns True when "
            "`/proc/pressure/memory` full avg60 and avg10 reach this (PSI percent, 0-100); "
            "0 turns the condition off."
        ),
    ] = 0.9
    system_disk_contention_threshold: Annotated[
        float,
        doc(
            "PSINodeCondition: the same for `SystemDiskContentionPressure` over "
            "`/proc/pressure/io`."
        ),
    ] = 0.9
    kubepods_memory_contention_threshold: Annotated[
        float,
        doc(
            "PSINodeCondition: the same for `KubepodsMemoryContentionPressure` over the "
            "kubepods cgroup's `memory.pressure`."
        ),
    ] = 0.9
    kubepods_disk_contention_threshold: Annotated[
        float,
        doc(
            "PSINodeCondition: the same for `KubepodsDiskContentionPressure` over the kubepods "
            "cgroup's `io.pressure`."
        ),
    ] = 0.9
    fail_swap_on: Annotated[bool, doc("Refuse to start when swap is on.")] = True
    single_process_oom_kill: Annotated[
        bool,
        doc(
            "cgroup v2: OOM-kill only the process that ran out, not the whole container "
            "(`memory.oom.group` 0)."
        ),
    ] = field(name="singleProcessOOMKill", default=False)
    memory_swap: MemorySwapConfiguration = MemorySwapConfiguration()
    # --- graceful node shutdown -----------------------------------------------------------
    shutdown_grace_period: Annotated[
        Duration, doc("Total time node shutdown is delayed for pods; 0 disables (>= 1s).")
    ] = dur("0s")
    shutdown_grace_period_critical_pods: Annotated[
        Duration, doc("Part of `shutdownGracePeriod` kept for critical pods.")
    ] = dur("0s")
    shutdown_grace_period_by_pod_priority: Annotated[
        tuple[ShutdownGracePeriodByPodPriority, ...],
        doc("Per-priority shutdown budgets; exclusive with `shutdownGracePeriod`."),
    ] = ()
    # --- misc -----------------------------------------------------------------------------
    logging: LoggingConfiguration = LoggingConfiguration()
    feature_gates: Annotated[
        dict[str, bool], doc("Feature gates by name (see the list below).")
    ] = field(default_factory=dict)

"""Checks on the ``kubelet:`` section, following ``ValidateKubeletConfiguration``.

Wording differs from the kubelet's (we name the field path and show the value), the rules do
not, except where noted: ``LimitedSwap`` with ``failSwapOn: true`` is refused here because the
kubelet would either refuse to start (swap on) or never use swap (swap off).
"""

from __future__ import annotations

from collections.abc import Mapping

from nodeagent import sysctl
from nodeagent.config import features, syntax
from nodeagent.config.problem import Findings, child, entry, item, one_of, show
from nodeagent.config.schema_kubelet import KubeletConfiguration
from nodeagent.config.units import (
    QUANTITY_HELP,
    Duration,
    parse_percentage,
    parse_quantity,
    parse_reserve_percentage,
)
from nodeagent.credentialprovider import pullpolicy

P = "kubelet"
RESERVABLE = ("cpu", "memory", "ephemeral-storage", "pid")
EVICTION_SIGNALS = (
    "memory.available",
    "nodefs.available",
    "nodefs.inodesFree",
    "imagefs.available",
    "imagefs.inodesFree",
    "containerfs.available",
    "containerfs.inodesFree",
    "pid.available",
    "allocatableMemory.available",
)
ENFORCEMENT_LEVELS = ("pods", "system-reserved", "kube-reserved", "none")
INT32_MAX = 2**31 - 1
PID_MAX_LIMIT = 4 * 1024 * 1024  # linux/threads.h on 64-bit: the most pids.max accepts
ONE_SECOND = Duration.of(seconds=1)


def _p(name: str) -> str:
    return child(P, name)


def validate_kubelet(k: KubeletConfiguration, out: Findings) -> None:
    gates = features.effective(k.feature_gates)
    _feature_gates(k.feature_gates, out)
    _periods(k, out)
    _server(k, out)
    _pods(k, out)
    _images(k, gates, out)
    _runtime(k, out)
    _resources(k, gates, out)
    _swap(k, gates, out)
    _shutdown(k, gates, out)
    for i, taint in enumerate(k.register_with_taints):
        base = item(_p("registerWithTaints"), i)
        out.check(child(base, "key"), taint.key, syntax.check_qualified_name(taint.key))
        out.check(child(base, "value"), taint.value, syntax.check_label_value(taint.value))
    out.at_least(_p("logging.verbosity"), k.logging.verbosity, 0, INT32_MAX)  # klog's int32


def _feature_gates(gates: Mapping[str, bool], out: Findings) -> None:
    for name in gates:
        if name not in features.DEFAULTS:
            out.add(
                entry(_p("featureGates"), name),
                f"unrecognized feature gate {show(name)}; known gates: "
                + ", ".join(features.DEFAULTS),
                name,
            )


def _periods(k: KubeletConfiguration, out: Findings) -> None:
    for name, value in (
        ("syncFrequency", k.sync_frequency),
        ("fileCheckFrequency", k.file_check_frequency),
        ("nodeStatusUpdateFrequency", k.node_status_update_frequency),
        ("nodeStatusReportFrequency", k.node_status_report_frequency),
        ("runtimeRequestTimeout", k.runtime_request_timeout),
    ):
        out.positive(_p(name), value)
    for name, value in (
        ("evictionPressureTransitionPeriod", k.eviction_pressure_transition_period),
        ("authentication.webhook.cacheTTL", k.authentication.webhook.cache_ttl),
        ("authorization.webhook.cacheAuthorizedTTL", k.authorization.webhook.cache_authorized_ttl),
        (
            "authorization.webhook.cacheUnauthorizedTTL",
            k.authorization.webhook.cache_unauthorized_ttl,
        ),
    ):
        out.not_negative(_p(name), value)
    out.in_range(_p("nodeLeaseDurationSeconds"), k.node_lease_duration_seconds, 1, INT32_MAX)


def _server(k: KubeletConfiguration, out: Findings) -> None:
    out.in_range(_p("port"), k.port, 1, 65535)
    if k.read_only_port != 0:
        out.add(
            _p("readOnlyPort"),
            f"{k.read_only_port} is not supported: nodeagent serves no unauthenticated port"
            " (pods and stats are on the authenticated `port`); leave it 0",
            k.read_only_port,
        )
    if k.healthz_port != 0 and not 1 <= k.healthz_port <= 65535:
        out.add(
            _p("healthzPort"),
            f"{k.healthz_port} must be between 1 and 65535, or 0 to disable /healthz",
            k.healthz_port,
        )
    out.check(_p("address"), k.address, syntax.check_ip(k.address))
    out.check(
        _p("healthzBindAddress"), k.healthz_bind_address, syntax.check_ip(k.healthz_bind_address)
    )
    _paths(
        out,
        ("tlsCertFile", k.tls_cert_file),
        ("tlsPrivateKeyFile", k.tls_private_key_file),
        ("authentication.x509.clientCAFile", k.authentication.x509.client_ca_file),
    )
    if bool(k.tls_cert_file) != bool(k.tls_private_key_file):
        missing, given = (
            ("tlsPrivateKeyFile", "tlsCertFile")
            if k.tls_cert_file
            else ("tlsCertFile", "tlsPrivateKeyFile")
        )
        out.add(_p(missing), f"must be set together with {_p(given)}", "")


def _pods(k: KubeletConfiguration, out: Findings) -> None:
    out.in_range(_p("maxPods"), k.max_pods, 1, INT32_MAX)
    if k.pod_pids_limit != -1 and not 1 <= k.pod_pids_limit <= PID_MAX_LIMIT:
        out.add(
            _p("podPidsLimit"),
            f"{show(k.pod_pids_limit)} must be -1 (no limit) or between 1 and {PID_MAX_LIMIT} "
            "(the kernel's PID_MAX_LIMIT; pids.max refuses more)",
            k.pod_pids_limit,
        )
    out.at_least(_p("nodeStatusMaxImages"), k.node_status_max_images, -1, INT32_MAX)
    out.at_least(_p("containerLogMaxFiles"), k.container_log_max_files, 2, INT32_MAX)
    out.at_least(_p("containerLogMaxWorkers"), k.container_log_max_workers, 1, INT32_MAX)
    if k.container_log_monitor_interval.nanoseconds < 3_000_000_000:
        out.add(
            _p("containerLogMonitorInterval"),
            f"{k.container_log_monitor_interval} must be at least 3s",
            k.container_log_monitor_interval,
        )
    _positive_quantity(out, _p("containerLogMaxSize"), k.container_log_max_size)
    _paths(out, ("staticPodPath", k.static_pod_path), ("resolvConf", k.resolv_conf))
    _paths(out, ("podLogsDir", k.pod_logs_dir), required=True)
    if k.cluster_domain:
        out.check(
            _p("clusterDomain"), k.cluster_domain, syntax.check_dns_subdomain(k.cluster_domain)
        )
    for i, ip in enumerate(k.cluster_dns):
        out.check(item(_p("clusterDNS"), i), ip, syntax.check_ip(ip))
    for i, pattern in enumerate(k.allowed_unsafe_sysctls):
        out.check(item(_p("allowedUnsafeSysctls"), i), pattern, sysctl.pattern_problem(pattern))


def _images(k: KubeletConfiguration, gates: Mapping[str, bool], out: Findings) -> None:
    high, low = k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent
    out.in_range(_p("imageGCHighThresholdPercent"), high, 0, 100)
    out.in_range(_p("imageGCLowThresholdPercent"), low, 0, 100)
    if low >= high:
        out.add(
            _p("imageGCLowThresholdPercent"),
            f"{low} must be less than {_p('imageGCHighThresholdPercent')} ({high})",
            low,
            summary=f"{_p('imageGCLowThresholdPercent')} ({low}) must be less than "
            f"{_p('imageGCHighThresholdPercent')} ({high})",
        )
    out.not_negative(_p("imageMinimumGCAge"), k.image_minimum_gc_age)
    max_age, min_age = k.image_maximum_gc_age, k.image_minimum_gc_age
    out.not_negative(_p("imageMaximumGCAge"), max_age)
    if max_age.nanoseconds > 0 and max_age <= min_age:
        out.add(
            _p("imageMaximumGCAge"),
            f"{max_age} must be greater than "
            f"{_p('imageMinimumGCAge')} ({min_age}), or 0 to disable",
            max_age,
        )
    if max_age.nanoseconds > 0 and not gates["ImageMaximumGCAge"]:
        out.add(_p("imageMaximumGCAge"), "requires feature gate ImageMaximumGCAge", max_age)
    _pull_verification(k, gates, out)
    out.at_least(_p("registryPullQPS"), k.registry_pull_qps, 0, INT32_MAX)
    out.at_least(_p("registryBurst"), k.registry_burst, 0, INT32_MAX)
    parallel = k.max_parallel_image_pulls
    if parallel is not None and parallel < 1:
        out.add(_p("maxParallelImagePulls"), f"{parallel} must be >= 1 (or null)", parallel)
    if k.serialize_image_pulls and parallel is not None and parallel > 1:
        out.add(
            _p("maxParallelImagePulls"),
            f"{parallel} cannot be larger than 1 unless {_p('serializeImagePulls')} is false",
            parallel,
        )


def _pull_verification(k: KubeletConfiguration, gates: Mapping[str, bool], out: Findings) -> None:
    allowlist = k.preloaded_images_verification_allowlist
    if not gates["KubeletEnsureSecretPulledImages"]:
        if allowlist:
            out.add(
                _p("preloadedImagesVerificationAllowlist"),
                "must not be set if KubeletEnsureSecretPulledImages feature gate is not enabled",
                list(allowlist),
            )
        return
    policy = k.image_pull_credentials_verification_policy
    if allowlist and policy != pullpolicy.NEVER_VERIFY_ALLOWLISTED:
        out.add(
            _p("preloadedImagesVerificationAllowlist"),
            "can't be set if imagePullCredentialsVerificationPolicy is not "
            f'"{pullpolicy.NEVER_VERIFY_ALLOWLISTED}" (it is "{policy}")',
            list(allowlist),
        )
        return
    for i, pattern in enumerate(allowlist):
        try:
            pullpolicy.allowlist_pattern(pattern)
        except ValueError as e:
            out.add(item(_p("preloadedImagesVerificationAllowlist"), i), str(e), pattern)


def _runtime(k: KubeletConfiguration, out: Findings) -> None:
    out.check(
        _p("containerRuntimeEndpoint"),
        k.container_runtime_endpoint,
        syntax.check_unix_endpoint(k.container_runtime_endpoint),
    )
    if k.image_service_endpoint:
        out.check(
            _p("imageServiceEndpoint"),
            k.image_service_endpoint,
            syntax.check_unix_endpoint(k.image_service_endpoint),
        )
    _paths(
        out,
        ("cgroupRoot", k.cgroup_root),
        ("kubeReservedCgroup", k.kube_reserved_cgroup),
        ("systemReservedCgroup", k.system_reserved_cgroup),
    )


def _resources(k: KubeletConfiguration, gates: Mapping[str, bool], out: Findings) -> None:
    for name, reserved in (
        ("kubeReserved", k.kube_reserved),
        ("systemReserved", k.system_reserved),
    ):
        for resource, amount in reserved.items():
            path = entry(_p(name), resource)
            if resource not in RESERVABLE:
                out.add(
                    path,
                    f"{show(resource)} is not a reservable resource; use {one_of(RESERVABLE)}",
                    resource,
                )
            else:
                _positive_quantity(out, path, amount, allow_zero=True)
    for name, table in (
        ("evictionHard", k.eviction_hard),
        ("evictionSoft", k.eviction_soft),
        ("evictionMinimumReclaim", k.eviction_minimum_reclaim),
    ):
        for signal, threshold in table.items():
            path = entry(_p(name), signal)
            if signal not in EVICTION_SIGNALS:
                out.add(
                    path,
                    f"{show(signal)} is not an eviction signal; use {one_of(EVICTION_SIGNALS)}",
                    signal,
                )
            elif (pct := parse_percentage(threshold)) is not None:
                if pct > 100:
                    out.add(path, f"{show(threshold)} must be between 0% and 100%", threshold)
            else:
                _positive_quantity(out, path, threshold, allow_zero=True, percent=True)
    for signal, grace in k.eviction_soft_grace_period.items():
        path = entry(_p("evictionSoftGracePeriod"), signal)
        if signal not in EVICTION_SIGNALS:
            out.add(
                path,
                f"{show(signal)} is not an eviction signal; use {one_of(EVICTION_SIGNALS)}",
                signal,
            )
        else:
            out.not_negative(path, grace)
    for signal in k.eviction_soft:
        if signal in EVICTION_SIGNALS and signal not in k.eviction_soft_grace_period:
            out.add(
                entry(_p("evictionSoftGracePeriod"), signal),
                f"must be set: evictionSoft has a threshold for {show(signal)}",
            )
    if k.eviction_max_pod_grace_period < 0:
        out.add(
            _p("evictionMaxPodGracePeriod"),
            f"{k.eviction_max_pod_grace_period} must not be negative",
            k.eviction_max_pod_grace_period,
        )
    out.positive(_p("housekeepingInterval"), k.housekeeping_interval)
    thresholds: tuple[tuple[str, float], ...] = (
        ("systemMemoryContentionThreshold", k.system_memory_contention_threshold),
        ("systemDiskContentionThreshold", k.system_disk_contention_threshold),
        ("kubepodsMemoryContentionThreshold", k.kubepods_memory_contention_threshold),
        ("kubepodsDiskContentionThreshold", k.kubepods_disk_contention_threshold),
    )
    for field_name, pct_value in thresholds:
        if not 0 <= pct_value <= 100:
            out.add(
                _p(field_name), f"{pct_value:g} must be between 0 and 100 (PSI percent)", pct_value
            )
    for resource, reserve in k.qos_reserved.items():
        where = entry(_p("qosReserved"), resource)
        if resource != "memory":
            out.add(where, f"cannot reserve {show(resource)} resource (only memory)", resource)
            continue
        try:
            parse_reserve_percentage(reserve)
        except ValueError as e:
            out.add(where, f"failed to parse percentage {show(reserve)}: {e}", reserve)
    if k.qos_reserved and not gates.get("QOSReserved"):
        out.add(_p("qosReserved"), "requires feature gate QOSReserved")
    if gates.get("PSINodeCondition") and not gates.get("KubeletPSI"):
        out.add(_p("featureGates"), "PSINodeCondition requires feature gate KubeletPSI")
    _enforcement(k, out)


def _enforcement(k: KubeletConfiguration, out: Findings) -> None:
    levels = k.enforce_node_allocatable
    path = _p("enforceNodeAllocatable")
    for i, level in enumerate(levels):
        if level not in ENFORCEMENT_LEVELS:
            out.add(item(path, i), f"{show(level)} is not {one_of(ENFORCEMENT_LEVELS)}", level)
        elif level == "none" and len(levels) > 1:
            out.add(item(path, i), '"none" cannot be combined with other levels', level)
        elif level == "system-reserved" and not k.system_reserved_cgroup:
            out.add(
                _p("systemReservedCgroup"),
                "invalid configuration: systemReservedCgroup (--system-reserved-cgroup) must be "
                'specified when "system-reserved" contained in enforceNodeAllocatable '
                "(--enforce-node-allocatable)",
            )
        elif level == "kube-reserved" and not k.kube_reserved_cgroup:
            out.add(
                _p("kubeReservedCgroup"),
                "invalid configuration: kubeReservedCgroup (--kube-reserved-cgroup) must be "
                'specified when "kube-reserved" contained in enforceNodeAllocatable '
                "(--enforce-node-allocatable)",
            )
    if not k.cgroups_per_qos and levels and levels != ("none",):
        out.add(
            path,
            f"{show(list(levels))} is not supported unless {_p('cgroupsPerQOS')} is "
            "true; set it to [] or [none]",
            list(levels),
        )


def _swap(k: KubeletConfiguration, gates: Mapping[str, bool], out: Findings) -> None:
    behavior = k.memory_swap.swap_behavior
    path = _p("memorySwap.swapBehavior")
    if behavior == "LimitedSwap" and k.fail_swap_on:
        out.add(
            path,
            f"LimitedSwap requires {_p('failSwapOn')} to be false (with "
            "failSwapOn: true the agent refuses to start when swap is on, so pods could "
            "never use swap)",
            behavior,
        )
    if behavior != "NoSwap" and not gates["NodeSwap"]:
        out.add(path, f"{behavior} requires feature gate NodeSwap", behavior)


def _shutdown(k: KubeletConfiguration, gates: Mapping[str, bool], out: Findings) -> None:
    grace, critical = k.shutdown_grace_period, k.shutdown_grace_period_critical_pods
    for name, value in (
        ("shutdownGracePeriod", grace),
        ("shutdownGracePeriodCriticalPods", critical),
    ):
        if value.nanoseconds < 0 or (0 < value.nanoseconds < ONE_SECOND.nanoseconds):
            out.add(_p(name), f"{value} must be either 0 or at least 1s", value)
    if critical > grace:
        crit_path, grace_path = _p("shutdownGracePeriodCriticalPods"), _p("shutdownGracePeriod")
        out.add(
            crit_path,
            f"{critical} must be <= {grace_path} ({grace})",
            critical,
            summary=f"{crit_path} ({critical}) must be <= {grace_path} ({grace})",
        )
    legacy = grace.nanoseconds > 0 or critical.nanoseconds > 0
    if legacy and not gates["GracefulNodeShutdown"]:
        out.add(_p("shutdownGracePeriod"), "requires feature gate GracefulNodeShutdown", grace)
    groups = k.shutdown_grace_period_by_pod_priority
    path = _p("shutdownGracePeriodByPodPriority")
    if groups and legacy:
        out.add(
            path,
            f"cannot be set together with {_p('shutdownGracePeriod')} ({grace}) or "
            f"{_p('shutdownGracePeriodCriticalPods')} ({critical}); use one or the other",
            [g.priority for g in groups],
        )
    if groups and not gates["GracefulNodeShutdownBasedOnPodPriority"]:
        out.add(path, "requires feature gate GracefulNodeShutdownBasedOnPodPriority")
    seen: dict[int, int] = {}
    for i, group in enumerate(groups):
        base = item(path, i)
        if group.priority in seen:
            out.add(
                child(base, "priority"),
                f"{group.priority} is already used by "
                f"{item(path, seen[group.priority])}; priorities must be unique",
                group.priority,
            )
        seen.setdefault(group.priority, i)
        out.in_range(child(base, "priority"), group.priority, -(2**31), INT32_MAX)
        out.at_least(
            child(base, "shutdownGracePeriodSeconds"), group.shutdown_grace_period_seconds, 0
        )


def _paths(out: Findings, *fields: tuple[str, str], required: bool = False) -> None:
    for name, value in fields:
        if value or required:
            out.check(_p(name), value, syntax.check_absolute_path(value))


def _positive_quantity(
    out: Findings, path: str, text: str, *, allow_zero: bool = False, percent: bool = False
) -> None:
    try:
        amount = parse_quantity(text)
    except ValueError as e:
        also = " or a percentage such as 10%" if percent else ""
        why = str(e) if "out of range" in str(e) else f"{show(text)} is not {QUANTITY_HELP}{also}"
        out.add(path, why, text)
        return
    if amount < 0 or (amount == 0 and not allow_zero):
        out.add(path, f"{show(text)} must be {'>= 0' if allow_zero else 'greater than 0'}", text)

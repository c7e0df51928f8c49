"""Good files load with the kubelet's defaults filled in; the sample config is valid."""

from __future__ import annotations

from importlib import resources

import msgspec
import pytest
from config_loading import Load

from nodeagent.config import Config, Duration, ShutdownGracePeriodByPodPriority, Taint


def test_no_file_means_kubelet_defaults(load: Load) -> None:
    cfg = load(None)
    k = cfg.kubelet
    assert (k.sync_frequency, k.file_check_frequency) == (
        Duration.of(minutes=1),
        Duration.of(seconds=20),
    )
    assert (k.address, k.port, k.healthz_port, k.healthz_bind_address) == (
        "0.0.0.0",
        10250,
        10248,
        "127.0.0.1",
    )
    assert k.node_status_update_frequency == Duration.of(seconds=10)
    assert k.node_status_report_frequency == Duration.of(minutes=5)
    assert k.node_lease_duration_seconds == 40
    assert (k.image_gc_high_threshold_percent, k.image_gc_low_threshold_percent) == (85, 80)
    assert k.image_minimum_gc_age == Duration.of(minutes=2)
    assert (k.max_pods, k.pod_pids_limit, k.cgroup_driver, k.cgroups_per_qos) == (
        110,
        -1,
        "cgroupfs",
        True,
    )
    assert k.runtime_request_timeout == Duration.of(minutes=2)
    assert k.eviction_hard == {
        "memory.available": "100Mi",
        "nodefs.available": "10%",
        "nodefs.inodesFree": "5%",
        "imagefs.available": "15%",
    }
    assert k.eviction_pressure_transition_period == Duration.of(minutes=5)
    assert (k.fail_swap_on, k.memory_swap.swap_behavior) == (True, "NoSwap")
    assert (k.shutdown_grace_period, k.shutdown_grace_period_by_pod_priority) == (Duration(0), ())
    assert (k.register_node, k.register_with_taints) == (True, ())
    assert k.container_runtime_endpoint == "unix:///run/containerd/containerd.sock"
    assert (k.pod_logs_dir, k.container_log_max_size, k.container_log_max_files) == (
        "/var/log/pods",
        "10Mi",
        5,
    )
    assert (k.enforce_node_allocatable, k.serialize_image_pulls) == (("pods",), True)
    assert k.authorization.mode == "Webhook"
    assert k.authentication.webhook.cache_ttl == Duration.of(minutes=2)
    assert k.logging.verbosity == 0
    assert (cfg.node.root_dir, cfg.node.kubeconfig) == (
        "/var/lib/nodeagent",
        "/etc/nodeagent/kubeconfig",
    )
    p = cfg.proxy
    assert (p.enabled, p.sync_period, p.min_sync_period, p.masquerade_bit) == (
        True,
        Duration.of(seconds=30),
        Duration.of(seconds=1),
        14,
    )
    assert p.conntrack.tcp_established_timeout == Duration.of(hours=24)


@pytest.mark.parametrize(
    "text", ["", "# only a comment\n", "{}\n"], ids=["empty", "comment", "empty mapping"]
)
def test_empty_file_means_all_defaults(load: Load, text: str) -> None:
    assert load(text, header=False) == Config()


def test_report_frequency_follows_update_frequency_when_only_that_is_set(load: Load) -> None:
    cfg = load("kubelet:\n  nodeStatusUpdateFrequency: 20s\n")
    assert cfg.kubelet.node_status_report_frequency == Duration.of(seconds=20)
    both = load("kubelet:\n  nodeStatusUpdateFrequency: 20s\n  nodeStatusReportFrequency: 1m\n")
    assert both.kubelet.node_status_report_frequency == Duration.of(minutes=1)


def test_parallel_image_pulls_turn_serialized_pulls_off(load: Load) -> None:
    cfg = load("kubelet:\n  maxParallelImagePulls: 3\n")
    assert (cfg.kubelet.serialize_image_pulls, cfg.kubelet.max_parallel_image_pulls) == (False, 3)


def test_a_full_file_loads_into_typed_values(load: Load) -> None:
    cfg = load(
        "node:\n"
        "  nodeIP: 192.168.1.10,fd00::10\n"
        "  nodeLabels: {node.kubernetes.io/pool: gpu, example.com/team: infra}\n"
        "kubelet:\n"
        "  cgroupDriver: systemd\n"
        "  clusterDNS: [10.96.0.10]\n"
        "  clusterDomain: cluster.local\n"
        "  failSwapOn: false\n"
        "  memorySwap: {swapBehavior: LimitedSwap}\n"
        "  registerWithTaints:\n"
        "  - {key: dedicated, value: gpu, effect: NoSchedule}\n"
        "  shutdownGracePeriodByPodPriority:\n"
        "  - {priority: 0, shutdownGracePeriodSeconds: 20}\n"
        "  - {priority: 2000000000, shutdownGracePeriodSeconds: 10}\n"
        "  kubeReserved: {cpu: 500m, memory: 1Gi}\n"
        "  evictionHard: {memory.available: 200Mi}\n"
        "  imageMaximumGCAge: 168h\n"
        "  syncFrequency: 1m30s\n"
        "  featureGates: {KubeletPSI: false}\n"
        "proxy:\n"
        "  clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n"
        "  nodePortAddresses: [192.168.0.0/16]\n"
        "  minSyncPeriod: 300ms\n"
    )
    assert cfg.node.node_labels == {"node.kubernetes.io/pool": "gpu", "example.com/team": "infra"}
    assert cfg.kubelet.register_with_taints == (
        Taint(key="dedicated", value="gpu", effect="NoSchedule"),
    )
    assert cfg.kubelet.shutdown_grace_period_by_pod_priority == (
        ShutdownGracePeriodByPodPriority(priority=0, shutdown_grace_period_seconds=20),
        ShutdownGracePeriodByPodPriority(priority=2000000000, shutdown_grace_period_seconds=10),
    )
    assert cfg.kubelet.memory_swap.swap_behavior == "LimitedSwap"
    assert cfg.kubelet.eviction_hard == {"memory.available": "200Mi"}  # replaces the defaults
    assert cfg.kubelet.sync_frequency.seconds == 90.0
    assert cfg.kubelet.image_maximum_gc_age == Duration.of(hours=168)
    assert cfg.kubelet.feature_gates == {"KubeletPSI": False}
    assert cfg.proxy.min_sync_period == Duration.of(seconds=0.3)


def test_config_is_immutable(load: Load) -> None:
    cfg = load(None)
    with pytest.raises(AttributeError):
        cfg.kubelet.max_pods = 5  # type: ignore[misc]


def test_shipped_sample_config_is_valid(load: Load) -> None:
    text = resources.files("nodeagent.config").joinpath("sample.yaml").read_text("utf-8")
    cfg = load(text, header=False)
    assert cfg.kubelet.cgroup_driver == "systemd"
    assert [g.priority for g in cfg.kubelet.shutdown_grace_period_by_pod_priority] == [
        0,
        2000000000,
    ]


KUBELET_CONFIGURATION_NAMES = {
    "syncFrequency",
    "fileCheckFrequency",
    "address",
    "port",
    "readOnlyPort",
    "healthzPort",
    "healthzBindAddress",
    "staticPodPath",
    "clusterDomain",
    "clusterDNS",
    "nodeStatusUpdateFrequency",
    "nodeStatusReportFrequency",
    "nodeLeaseDurationSeconds",
    "imageMinimumGCAge",
    "imageMaximumGCAge",
    "imageGCHighThresholdPercent",
    "imageGCLowThresholdPercent",
    "cgroupDriver",
    "cgroupsPerQOS",
    "cgroupRoot",
    "failCgroupV1",
    "runtimeRequestTimeout",
    "maxPods",
    "podPidsLimit",
    "evictionHard",
    "evictionPressureTransitionPeriod",
    "evictionSoft",
    "evictionSoftGracePeriod",
    "evictionMaxPodGracePeriod",
    "evictionMinimumReclaim",
    "failSwapOn",
    "memorySwap",
    "shutdownGracePeriod",
    "shutdownGracePeriodCriticalPods",
    "shutdownGracePeriodByPodPriority",
    "registerNode",
    "registerWithTaints",
    "containerRuntimeEndpoint",
    "imageServiceEndpoint",
    "podLogsDir",
    "kubeReserved",
    "systemReserved",
    "enforceNodeAllocatable",
    "serializeImagePulls",
    "maxParallelImagePulls",
    "registryPullQPS",
    "registryBurst",
    "containerLogMaxSize",
    "containerLogMaxFiles",
    "authentication",
    "authorization",
    "tlsCertFile",
    "tlsPrivateKeyFile",
    "rotateCertificates",
    "serverTLSBootstrap",
    "logging",
    "featureGates",
    "providerID",
}


def test_kubelet_section_uses_kubelet_configuration_field_names() -> None:
    written = msgspec.to_builtins(Config(), enc_hook=str)["kubelet"]
    assert set(written) >= KUBELET_CONFIGURATION_NAMES
    assert written["authentication"]["x509"] == {"clientCAFile": ""}
    assert set(written["authorization"]["webhook"]) == {
        "cacheAuthorizedTTL",
        "cacheUnauthorizedTTL",
    }

"""The kubelet's own metrics (pkg/kubelet/metrics/metrics.go at the pinned v1.36.3) against
what nodeagent's ``/metrics`` serves: every one is either served — with the kubelet's name,
type, label names and buckets — or listed as not served, with the reason. (Metrics defined
elsewhere in the kubelet, ``kubelet_http_*`` and ``prober_*``, are served too and tested
beside their code.)"""

from __future__ import annotations

from typing import Any, Final

import prometheus_client
import pytest

import nodeagent.gc.metrics
import nodeagent.kuberuntime.metrics
import nodeagent.nodeshutdown.metrics
import nodeagent.nodestatus.metrics
import nodeagent.pods.metrics
import nodeagent.status.metrics

DEF: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# metrics.ExponentialBuckets(.005, 2.5, 14), as Go computes it (each the last times 2.5)
RUNTIME_OPS: Final = (
    0.005, 0.0125, 0.03125, 0.078125, 0.1953125, 0.48828125, 1.220703125, 3.0517578125,
    7.62939453125, 19.073486328125, 47.6837158203125, 119.20928955078125, 298.0232238769531,
    745.0580596923828,
)  # fmt: skip

# name: (type, label names, buckets) of each metric in metrics.go, v1.36.3.
KUBELET: Final[dict[str, tuple[str, tuple[str, ...], tuple[float, ...] | None]]] = {
    "kubelet_node_name": ("gauge", ("node",), None),
    "kubelet_containers_per_pod_count": ("histogram", (), (1.0, 2.0, 4.0, 8.0, 16.0)),
    "kubelet_pod_worker_duration_seconds": ("histogram", ("operation_type",), DEF),
    "kubelet_pod_start_duration_seconds": ("histogram", (), None),
    "kubelet_pod_start_sli_duration_seconds": ("histogram", (), None),
    "kubelet_pod_start_total_duration_seconds": ("histogram", (), None),
    "kubelet_first_network_pod_start_sli_duration_seconds": ("gauge", (), None),
    "kubelet_cgroup_manager_duration_seconds": ("histogram", ("operation_type",), DEF),
    "kubelet_pod_worker_start_duration_seconds": ("histogram", (), DEF),
    "kubelet_pod_status_sync_duration_seconds": ("histogram", (), None),
    "kubelet_pleg_relist_duration_seconds": ("histogram", (), DEF),
    "kubelet_pleg_discard_events": ("counter", (), None),
    "kubelet_pleg_relist_interval_seconds": ("histogram", (), DEF),
    "kubelet_pleg_last_seen_seconds": ("gauge", (), None),
    "kubelet_pleg_pod_relist_duration_seconds": ("histogram", (), DEF),
    "kubelet_evented_pleg_connection_error_count": ("counter", (), None),
    "kubelet_evented_pleg_connection_success_count": ("counter", (), None),
    "kubelet_evented_pleg_connection_latency_seconds": ("histogram", (), DEF),
    "kubelet_runtime_operations_total": ("counter", ("operation_type",), None),
    "kubelet_runtime_operations_duration_seconds": (
        "histogram",
        ("operation_type",),
        RUNTIME_OPS,
    ),
    "kubelet_runtime_operations_errors_total": ("counter", ("operation_type",), None),
    "kubelet_evictions": ("counter", ("eviction_signal",), None),
    "kubelet_eviction_stats_age_seconds": ("histogram", ("eviction_signal",), DEF),
    "kubelet_preemptions": ("counter", ("preemption_signal",), None),
    "kubelet_device_plugin_registration_total": ("counter", ("resource_name",), None),
    "kubelet_device_plugin_alloc_duration_seconds": ("histogram", ("resource_name",), DEF),
    "kubelet_pod_resources_endpoint_requests_total": ("counter", ("server_api_version",), None),
    "kubelet_pod_resources_endpoint_requests_list": ("counter", ("server_api_version",), None),
    "kubelet_pod_resources_endpoint_requests_get_allocatable": (
        "counter",
        ("server_api_version",),
        None,
    ),
    "kubelet_pod_resources_endpoint_errors_list": ("counter", ("server_api_version",), None),
    "kubelet_pod_resources_endpoint_errors_get_allocatable": (
        "counter",
        ("server_api_version",),
        None,
    ),
    "kubelet_pod_resources_endpoint_requests_get": ("counter", ("server_api_version",), None),
    "kubelet_pod_resources_endpoint_errors_get": ("counter", ("server_api_version",), None),
    "kubelet_run_podsandbox_duration_seconds": ("histogram", ("runtime_handler",), DEF),
    "kubelet_run_podsandbox_errors_total": ("counter", ("runtime_handler",), None),
    "kubelet_running_pods": ("gauge", (), None),
    "kubelet_running_containers": ("gauge", ("container_state",), None),
    "kubelet_desired_pods": ("gauge", ("static",), None),
    "kubelet_active_pods": ("gauge", ("static",), None),
    "kubelet_mirror_pods": ("gauge", (), None),
    "kubelet_working_pods": ("gauge", ("lifecycle", "config", "static"), None),
    "kubelet_orphaned_runtime_pods_total": ("counter", (), None),
    "kubelet_restarted_pods_total": ("counter", ("static",), None),
    "kubelet_started_pods_total": ("counter", (), None),
    "kubelet_started_pods_errors_total": ("counter", (), None),
    "kubelet_started_containers_total": ("counter", ("container_type",), None),
    "kubelet_terminated_containers_total": (
        "counter",
        ("container_type", "exit_code", "reason"),
        None,
    ),
    "kubelet_started_containers_errors_total": ("counter", ("container_type", "code"), None),
    "kubelet_started_host_process_containers_total": ("counter", ("container_type",), None),
    "kubelet_started_host_process_containers_errors_total": (
        "counter",
        ("container_type", "code"),
        None,
    ),
    "kubelet_started_user_namespaced_pods_total": ("counter", (), None),
    "kubelet_started_user_namespaced_pods_errors_total": ("counter", (), None),
    "kubelet_managed_ephemeral_containers": ("gauge", (), None),
    "kubelet_graceful_shutdown_start_time_seconds": ("gauge", (), None),
    "kubelet_graceful_shutdown_end_time_seconds": ("gauge", (), None),
    "kubelet_lifecycle_handler_http_fallbacks_total": ("counter", (), None),
    "kubelet_cpu_manager_pinning_requests_total": ("counter", (), None),
    "kubelet_cpu_manager_pinning_errors_total": ("counter", (), None),
    "kubelet_cpu_manager_shared_pool_size_millicores": ("gauge", (), None),
    "kubelet_cpu_manager_exclusive_cpu_allocation_count": ("gauge", (), None),
    "kubelet_cpu_manager_allocation_per_numa": ("gauge", ("numa_node",), None),
    "kubelet_container_aligned_compute_resources_count": ("counter", ("scope", "boundary"), None),
    "kubelet_container_aligned_compute_resources_failure_count": (
        "counter",
        ("scope", "boundary"),
        None,
    ),
    "kubelet_memory_manager_pinning_requests_total": ("counter", (), None),
    "kubelet_memory_manager_pinning_errors_total": ("counter", (), None),
    "kubelet_memory_qos_node_memory_min_bytes": ("gauge", (), None),
    "kubelet_memory_qos_node_memory_low_bytes": ("gauge", (), None),
    "kubelet_topology_manager_admission_requests_total": ("counter", (), None),
    "kubelet_topology_manager_admission_errors_total": ("counter", (), None),
    "kubelet_topology_manager_admission_duration_ms": ("histogram", (), None),
    "kubelet_orphan_pod_cleaned_volumes": ("gauge", (), None),
    "kubelet_orphan_pod_cleaned_volumes_errors": ("gauge", (), None),
    "kubelet_node_startup_pre_kubelet_duration_seconds": ("gauge", (), None),
    "kubelet_node_startup_pre_registration_duration_seconds": ("gauge", (), None),
    "kubelet_node_startup_registration_duration_seconds": ("gauge", (), None),
    "kubelet_node_startup_post_registration_duration_seconds": ("gauge", (), None),
    "kubelet_node_startup_duration_seconds": ("gauge", (), None),
    "kubelet_image_garbage_collected_total": ("counter", ("reason",), None),
    "kubelet_image_pull_duration_seconds": ("histogram", ("image_size_in_bytes",), None),
    "kubelet_sleep_action_terminated_early_total": ("counter", (), None),
    "kubelet_cgroup_version": ("gauge", (), None),
    "kubelet_cri_losing_support": ("gauge", ("version",), None),
    "dra_operations_duration_seconds": ("histogram", ("operation_name", "is_error"), None),
    "dra_grpc_operations_duration_seconds": (
        "histogram",
        ("driver_name", "method_name", "grpc_status_code"),
        None,
    ),
    "kubelet_admission_rejections_total": ("counter", ("reason",), None),
    "kubelet_image_volume_requested_total": ("counter", (), None),
    "kubelet_image_volume_mounted_succeed_total": ("counter", (), None),
    "kubelet_image_volume_mounted_errors_total": ("counter", (), None),
    "kubelet_container_requested_resizes_total": (
        "counter",
        ("resource", "requirement", "operation"),
        None,
    ),
    "kubelet_pod_resize_duration_milliseconds": ("histogram", ("success",), None),
    "kubelet_pod_pending_resizes": ("gauge", ("reason",), None),
    "kubelet_pod_infeasible_resizes_total": ("counter", ("reason_detail",), None),
    "kubelet_pod_in_progress_resizes": ("gauge", (), None),
    "kubelet_pod_deferred_accepted_resizes_total": ("counter", ("retry_trigger",), None),
    "resource_manager_allocations_total": ("counter", ("resource_name", "source"), None),
    "resource_manager_allocation_errors_total": ("counter", ("resource_name", "source"), None),
    "resource_manager_container_assignments": (
        "counter",
        ("resource_name", "assignment_type"),
        None,
    ),
    "kubelet_pod_watch_events_dropped_total": ("counter", (), None),
}

# What nodeagent serves, by the module that defines it.
SERVED: Final = {
    "kubelet_node_name": nodeagent.nodestatus.metrics.NODE_NAME,
    "kubelet_cgroup_version": nodeagent.nodestatus.metrics.CGROUP_VERSION,
    "kubelet_containers_per_pod_count": nodeagent.pods.metrics.CONTAINERS_PER_POD,
    "kubelet_pleg_relist_duration_seconds": nodeagent.pods.metrics.PLEG_RELIST_DURATION,
    "kubelet_pleg_relist_interval_seconds": nodeagent.pods.metrics.PLEG_RELIST_INTERVAL,
    "kubelet_running_pods": nodeagent.pods.metrics.RUNNING_PODS,
    "kubelet_running_containers": nodeagent.pods.metrics.RUNNING_CONTAINERS,
    "kubelet_desired_pods": nodeagent.pods.metrics.DESIRED_PODS,
    "kubelet_active_pods": nodeagent.pods.metrics.ACTIVE_PODS,
    "kubelet_mirror_pods": nodeagent.pods.metrics.MIRROR_PODS,
    "kubelet_admission_rejections_total": nodeagent.pods.metrics.ADMISSION_REJECTIONS,
    "kubelet_started_pods_total": nodeagent.kuberuntime.metrics.STARTED_PODS,
    "kubelet_started_pods_errors_total": nodeagent.kuberuntime.metrics.STARTED_PODS_ERRORS,
    "kubelet_started_containers_total": nodeagent.kuberuntime.metrics.STARTED_CONTAINERS,
    "kubelet_started_containers_errors_total": (
        nodeagent.kuberuntime.metrics.STARTED_CONTAINERS_ERRORS
    ),
    "kubelet_run_podsandbox_duration_seconds": (
        nodeagent.kuberuntime.metrics.RUN_PODSANDBOX_DURATION
    ),
    "kubelet_run_podsandbox_errors_total": nodeagent.kuberuntime.metrics.RUN_PODSANDBOX_ERRORS,
    "kubelet_lifecycle_handler_http_fallbacks_total": (
        nodeagent.kuberuntime.metrics.LIFECYCLE_HTTP_FALLBACKS
    ),
    "kubelet_runtime_operations_total": nodeagent.kuberuntime.metrics.RUNTIME_OPERATIONS,
    "kubelet_runtime_operations_duration_seconds": (
        nodeagent.kuberuntime.metrics.RUNTIME_OPERATIONS_DURATION
    ),
    "kubelet_runtime_operations_errors_total": (
        nodeagent.kuberuntime.metrics.RUNTIME_OPERATIONS_ERRORS
    ),
    "kubelet_terminated_containers_total": nodeagent.status.metrics.TERMINATED_CONTAINERS,
    "kubelet_image_garbage_collected_total": nodeagent.gc.metrics.IMAGES_COLLECTED,
    "kubelet_graceful_shutdown_start_time_seconds": nodeagent.nodeshutdown.metrics.START_TIME,
    "kubelet_graceful_shutdown_end_time_seconds": nodeagent.nodeshutdown.metrics.END_TIME,
}

NO_CPU_MANAGER = "no CPU manager (the kubelet's `none` policy): nothing is pinned"
NO_MEMORY_MANAGER = "no memory manager (the kubelet's `None` policy)"
NO_TOPOLOGY = "no topology manager: no NUMA alignment is attempted"
NO_DEVICES = "no device plugins and no pod-resources gRPC API"
NO_DRA = "no dynamic resource allocation (pods with resourceClaims are refused)"
NOT_LINUX = "Windows HostProcess containers only"
NO_SUFFIX = (
    "a counter whose name has no _total: prometheus_client always exposes <name>_total, so "
    "the kubelet's series name cannot be reproduced"
)
NOT_YET = "not yet instrumented"

NOT_SERVED: Final = {
    "kubelet_cpu_manager_pinning_requests_total": NO_CPU_MANAGER,
    "kubelet_cpu_manager_pinning_errors_total": NO_CPU_MANAGER,
    "kubelet_cpu_manager_shared_pool_size_millicores": NO_CPU_MANAGER,
    "kubelet_cpu_manager_exclusive_cpu_allocation_count": NO_CPU_MANAGER,
    "kubelet_cpu_manager_allocation_per_numa": NO_CPU_MANAGER,
    "kubelet_container_aligned_compute_resources_count": NO_TOPOLOGY,
    "kubelet_container_aligned_compute_resources_failure_count": NO_TOPOLOGY,
    "kubelet_topology_manager_admission_requests_total": NO_TOPOLOGY,
    "kubelet_topology_manager_admission_errors_total": NO_TOPOLOGY,
    "kubelet_topology_manager_admission_duration_ms": NO_TOPOLOGY,
    "kubelet_memory_manager_pinning_requests_total": NO_MEMORY_MANAGER,
    "kubelet_memory_manager_pinning_errors_total": NO_MEMORY_MANAGER,
    "resource_manager_allocations_total": "PodLevelResourceManagers (alpha) is not implemented",
    "resource_manager_allocation_errors_total": "PodLevelResourceManagers (alpha) is absent",
    "resource_manager_container_assignments": "PodLevelResourceManagers (alpha) is absent",
    "kubelet_device_plugin_registration_total": NO_DEVICES,
    "kubelet_device_plugin_alloc_duration_seconds": NO_DEVICES,
    "kubelet_pod_resources_endpoint_requests_total": NO_DEVICES,
    "kubelet_pod_resources_endpoint_requests_list": NO_DEVICES,
    "kubelet_pod_resources_endpoint_requests_get_allocatable": NO_DEVICES,
    "kubelet_pod_resources_endpoint_errors_list": NO_DEVICES,
    "kubelet_pod_resources_endpoint_errors_get_allocatable": NO_DEVICES,
    "kubelet_pod_resources_endpoint_requests_get": NO_DEVICES,
    "kubelet_pod_resources_endpoint_errors_get": NO_DEVICES,
    "dra_operations_duration_seconds": NO_DRA,
    "dra_grpc_operations_duration_seconds": NO_DRA,
    "kubelet_started_host_process_containers_total": NOT_LINUX,
    "kubelet_started_host_process_containers_errors_total": NOT_LINUX,
    "kubelet_started_user_namespaced_pods_total": (
        "registered only with UserNamespacesSupport; pods with hostUsers: false are refused"
    ),
    "kubelet_started_user_namespaced_pods_errors_total": (
        "registered only with UserNamespacesSupport; pods with hostUsers: false are refused"
    ),
    "kubelet_memory_qos_node_memory_min_bytes": "MemoryQoS (alpha) is not implemented",
    "kubelet_memory_qos_node_memory_low_bytes": "MemoryQoS (alpha) is not implemented",
    "kubelet_image_volume_requested_total": "image volumes are not implemented",
    "kubelet_image_volume_mounted_succeed_total": "image volumes are not implemented",
    "kubelet_image_volume_mounted_errors_total": "image volumes are not implemented",
    "kubelet_evented_pleg_connection_error_count": "the generic PLEG only (EventedPLEG is off)",
    "kubelet_evented_pleg_connection_success_count": "the generic PLEG only (EventedPLEG is off)",
    "kubelet_evented_pleg_connection_latency_seconds": "the generic PLEG only",
    "kubelet_first_network_pod_start_sli_duration_seconds": "INTERNAL stability, not for users",
    "kubelet_preemptions": "no critical-pod preemption at admission",
    "kubelet_cri_losing_support": "CRI v1 only: no runtime API version is losing support",
    "kubelet_evictions": NO_SUFFIX,
    "kubelet_pleg_discard_events": NO_SUFFIX,
    "kubelet_pleg_last_seen_seconds": NOT_YET + " (the PLEG keeps loop time; its health is "
    "on /healthz/syncloop and in the Ready condition)",
    "kubelet_pleg_pod_relist_duration_seconds": NOT_YET,
    "kubelet_pod_worker_duration_seconds": NOT_YET,
    "kubelet_pod_start_duration_seconds": NOT_YET,
    "kubelet_pod_start_sli_duration_seconds": NOT_YET,
    "kubelet_pod_start_total_duration_seconds": NOT_YET,
    "kubelet_cgroup_manager_duration_seconds": NOT_YET,
    "kubelet_pod_worker_start_duration_seconds": NOT_YET,
    "kubelet_pod_status_sync_duration_seconds": NOT_YET,
    "kubelet_eviction_stats_age_seconds": NOT_YET,
    "kubelet_working_pods": NOT_YET,
    "kubelet_orphaned_runtime_pods_total": NOT_YET,
    "kubelet_restarted_pods_total": NOT_YET,
    "kubelet_managed_ephemeral_containers": NOT_YET,
    "kubelet_orphan_pod_cleaned_volumes": NOT_YET,
    "kubelet_orphan_pod_cleaned_volumes_errors": NOT_YET,
    "kubelet_node_startup_pre_kubelet_duration_seconds": NOT_YET,
    "kubelet_node_startup_pre_registration_duration_seconds": NOT_YET,
    "kubelet_node_startup_registration_duration_seconds": NOT_YET,
    "kubelet_node_startup_post_registration_duration_seconds": NOT_YET,
    "kubelet_node_startup_duration_seconds": NOT_YET,
    "kubelet_image_pull_duration_seconds": NOT_YET,
    "kubelet_sleep_action_terminated_early_total": NOT_YET,
    "kubelet_container_requested_resizes_total": NOT_YET,
    "kubelet_pod_resize_duration_milliseconds": NOT_YET,
    "kubelet_pod_pending_resizes": NOT_YET,
    "kubelet_pod_infeasible_resizes_total": NOT_YET,
    "kubelet_pod_in_progress_resizes": NOT_YET,
    "kubelet_pod_deferred_accepted_resizes_total": NOT_YET,
    "kubelet_pod_watch_events_dropped_total": NOT_YET,
}


def test_every_kubelet_metric_is_served_or_its_absence_explained() -> None:
    assert SERVED.keys() & NOT_SERVED.keys() == set()
    assert SERVED.keys() | NOT_SERVED.keys() == KUBELET.keys()
    assert all(NOT_SERVED.values())


def _shape(metric: Any) -> tuple[str, tuple[str, ...], tuple[float, ...] | None]:
    upper = getattr(metric, "_upper_bounds", None)
    buckets = tuple(b for b in upper if b != float("inf")) if upper is not None else None
    return metric._type, tuple(metric._labelnames), buckets


@pytest.mark.parametrize("name", sorted(SERVED))
def test_a_served_metric_has_the_kubelets_name_type_labels_and_buckets(name: str) -> None:
    metric = SERVED[name]
    kind, labels, buckets = KUBELET[name]
    family = next(iter(metric.describe()))
    exposed = family.name + ("_total" if family.type == "counter" else "")
    assert exposed == name
    shape = _shape(metric)
    assert shape[:2] == (kind, labels)
    if buckets is not None:
        assert shape[2] == buckets


@pytest.mark.parametrize("name", sorted(SERVED))
def test_a_served_metric_is_on_the_registry_metrics_serves(name: str) -> None:
    text = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert f"# TYPE {name} {KUBELET[name][0]}\n" in text

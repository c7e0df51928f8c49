"""The pod benchmark's CRI calls per minute: a component's ``/metrics`` text read into counts
by operation, the rate between two readings, and the report's table (nothing runs)."""

from __future__ import annotations

import cri_calls
import pod_report
from pod_startup import Result, Window

# As the kubelet serves it (component-base adds "[ALPHA]"), beside the other two series.
KUBELET_TEXT = """\
# HELP kubelet_runtime_operations_duration_seconds [ALPHA] Duration in seconds of runtime \
operations. Broken down by operation type.
# TYPE kubelet_runtime_operations_duration_seconds histogram
kubelet_runtime_operations_duration_seconds_bucket{operation_type="list_containers",le="0.005"} 9
kubelet_runtime_operations_duration_seconds_count{operation_type="list_containers"} 1234
# HELP kubelet_runtime_operations_errors_total [ALPHA] Cumulative number of runtime operation \
errors by operation type.
# TYPE kubelet_runtime_operations_errors_total counter
kubelet_runtime_operations_errors_total{operation_type="container_status"} 2
# HELP kubelet_runtime_operations_total [ALPHA] Cumulative number of runtime operations by \
operation type.
# TYPE kubelet_runtime_operations_total counter
kubelet_runtime_operations_total{operation_type="container_status"} 16
kubelet_runtime_operations_total{operation_type="list_containers"} 1234
kubelet_runtime_operations_total{operation_type="list_podsandbox"} 1.5e+03
# HELP kubelet_running_pods [ALPHA] Number of pods that have a running pod sandbox
# TYPE kubelet_running_pods gauge
kubelet_running_pods 30
"""


def test_the_counter_is_read_by_operation_type() -> None:
    assert cri_calls.operations(KUBELET_TEXT) == {
        "container_status": 16.0,
        "list_containers": 1234.0,
        "list_podsandbox": 1500.0,
    }


def test_a_component_that_has_not_called_yet_has_no_operations() -> None:
    assert cri_calls.operations("# TYPE kubelet_running_pods gauge\nkubelet_running_pods 0\n") == {}


def test_calls_per_minute_between_two_readings() -> None:
    before = {"list_containers": 100.0, "status": 4.0}
    after = {"list_containers": 220.0, "status": 4.0, "exec_sync": 3.0}
    assert cri_calls.per_minute(before, after, 120.0) == {
        "exec_sync": 1.5,  # not called before the window: from 0
        "list_containers": 60.0,  # "status" was not called within: left out
    }


def test_the_rows_hold_every_operation_and_the_totals() -> None:
    rows = cri_calls.rows(
        {
            "nodeagent": {"list_containers": 60.0, "exec_sync": 1.5},
            "kubelet": {"list_containers": 60.0, "status": 6.0},
            "absent": None,  # its /metrics was not read
        }
    )
    assert rows == [
        ["exec_sync", "1.5", "-", "-"],
        ["list_containers", "60.0", "60.0", "-"],
        ["status", "-", "6.0", "-"],
        ["total", "61.5", "66.0", "-"],
    ]


def _window(pods: int, rates: dict[str, float] | None) -> Window:
    return Window(
        pods=pods,
        seconds=120.0,
        rss_max_kib=1,
        rss_final_kib=1,
        cpu_s=1.0,
        runtime_cpu_s=1.0,
        load_mean=0.5,
        load_max=0.5,
        cri_per_min=rates,
    )


def test_the_report_has_one_cri_table_per_idle_window() -> None:
    results = {
        "nodeagent": Result(
            windows=[_window(30, {"list_containers": 60.0}), _window(100, {"status": 6.0})]
        ),
        "kubelet": Result(windows=[_window(30, {"list_containers": 61.0})]),
    }
    first, second = pod_report.cri_tables(results, markdown=True)
    assert first.splitlines() == [
        "| CRI calls/min, idle with 30 pods | nodeagent | kubelet |",
        "|---|---|---|",
        "| list_containers | 60.0 | 61.0 |",
        "| total | 60.0 | 61.0 |",
    ]
    assert second.splitlines()[0] == "| CRI calls/min, idle with 100 pods | nodeagent | kubelet |"
    assert second.splitlines()[-1] == "| total | 6.0 | - |"  # the kubelet had no second window


# As containerd 1.6 serves it at /v1/metrics with [metrics] grpc_histogram = true (trimmed).
CONTAINERD_TEXT = """\
# HELP grpc_server_handled_total Total number of RPCs completed on the server, regardless of \
success or failure.
# TYPE grpc_server_handled_total counter
grpc_server_handled_total{grpc_code="OK",grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 600
grpc_server_handled_total{grpc_code="NotFound",grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 3
grpc_server_handled_total{grpc_code="OK",grpc_method="ContainerStatus",\
grpc_service="runtime.v1alpha2.RuntimeService",grpc_type="unary"} 7
grpc_server_handled_total{grpc_code="OK",grpc_method="ListImages",\
grpc_service="runtime.v1.ImageService",grpc_type="unary"} 2
grpc_server_handled_total{grpc_code="OK",grpc_method="List",\
grpc_service="containerd.services.containers.v1.Containers",grpc_type="unary"} 40
# HELP grpc_server_handling_seconds Histogram of response latency (seconds) of gRPC that had \
been application-level handled by the server.
# TYPE grpc_server_handling_seconds histogram
grpc_server_handling_seconds_bucket{grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary",le="0.005"} 590
grpc_server_handling_seconds_bucket{grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary",le="+Inf"} 603
grpc_server_handling_seconds_sum{grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 1.5
grpc_server_handling_seconds_count{grpc_method="ContainerStatus",\
grpc_service="runtime.v1.RuntimeService",grpc_type="unary"} 603
grpc_server_handling_seconds_sum{grpc_method="ListImages",\
grpc_service="runtime.v1.ImageService",grpc_type="unary"} 1.1347e-05
"""


def test_containerd_counts_each_cri_method_over_every_code_and_its_handling_time() -> None:
    calls, seconds = cri_calls.handled(CONTAINERD_TEXT)

    assert calls == {"ContainerStatus": 603.0, "ListImages": 2.0}  # v1 CRI only
    assert seconds == {"ContainerStatus": 1.5, "ListImages": 1.1347e-05}


def test_the_runtime_rows_give_calls_and_milliseconds_per_minute_and_totals() -> None:
    calls = {"nodeagent": {"ContainerStatus": 600.0, "ListImages": 2.0}, "kubelet": None}
    ms = {"nodeagent": {"ContainerStatus": 1500.0}, "kubelet": None}

    assert cri_calls.runtime_rows(calls, ms) == [
        ["ContainerStatus", "600.0 (1500)", "-"],
        ["ListImages", "2.0 (0)", "-"],
        ["total", "602.0 (1500)", "-"],
    ]

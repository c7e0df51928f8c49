"""Typed errors from HTTP statuses, and patch bodies that round-trip."""

from __future__ import annotations

from typing import Any

import pytest

from nodeagent.apiserver import errors
from nodeagent.apiserver.patch import (
    NODE_SCHEMA,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_patch,
    op_add,
    op_remove,
    op_replace,
    op_test,
    pointer,
    two_way_merge_patch,
    two_way_strategic_patch,
)
from nodeagent.errors import AgentError


@pytest.mark.parametrize(
    ("code", "reason", "expected"),
    [
        pytest.param(404, "NotFound", errors.NotFound, id="404 is NotFound"),
        pytest.param(409, "Conflict", errors.Conflict, id="409 is a Conflict"),
        pytest.param(409, "AlreadyExists", errors.AlreadyExists, id="409 AlreadyExists"),
        pytest.param(403, "Forbidden", errors.Forbidden, id="403 is Forbidden"),
        pytest.param(401, "Unauthorized", errors.Unauthorized, id="401 is Unauthorized"),
        pytest.param(410, "Expired", errors.Gone, id="410 is Gone"),
        pytest.param(422, "Invalid", errors.Invalid, id="422 is Invalid"),
        pytest.param(429, "TooManyRequests", errors.TooManyRequests, id="429 throttles"),
        pytest.param(500, "InternalError", errors.ServerError, id="500 is a ServerError"),
        pytest.param(503, "ServiceUnavailable", errors.ServerError, id="503 is a ServerError"),
        pytest.param(504, "Timeout", errors.Timeout, id="504 is a Timeout"),
        pytest.param(500, "Timeout", errors.Timeout, id="reason Timeout is a Timeout"),
        pytest.param(418, "", errors.ApiError, id="unknown codes stay ApiError"),
    ],
)
def test_status_codes_map_to_typed_errors(code: int, reason: str, expected: type) -> None:
    status = {"kind": "Status", "code": code, "reason": reason, "message": "the words"}
    err = errors.error_for_status(code, status, verb="GET", path="/api/v1/nodes/a")

    assert type(err) is expected
    assert isinstance(err, AgentError)
    assert str(err) == f"GET /api/v1/nodes/a: the words ({code} {reason})"


def test_too_many_requests_carries_retry_after_from_header_or_details() -> None:
    from_header = errors.error_for_status(429, {}, retry_after=errors.parse_retry_after("3"))
    from_details = errors.error_for_status(429, {"details": {"retryAfterSeconds": 7}})

    assert (from_header.retry_after, from_details.retry_after) == (3.0, 7.0)
    assert errors.parse_retry_after("soon") is None


def test_only_transient_errors_are_retryable() -> None:
    assert errors.retryable(errors.ServerError("x"))
    assert errors.retryable(errors.TransportError("x"))
    assert not errors.retryable(errors.Forbidden("x"))
    assert not errors.retryable(errors.Conflict("x"))


def cond(kind: str, status: str, hb: str = "t1") -> dict[str, str]:
    return {"type": kind, "status": status, "lastHeartbeatTime": hb}


OLD: dict[str, Any] = {
    "metadata": {"name": "n", "labels": {"a": "1", "gone": "x"}},
    "status": {
        "conditions": [cond("MemoryPressure", "False"), cond("Ready", "False")],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        "capacity": {"cpu": "2", "memory": "1Gi"},
        "images": [{"names": ["a"]}],
    },
}
NEW: dict[str, Any] = {
    "metadata": {"name": "n", "labels": {"a": "2"}},
    "status": {
        "conditions": [cond("MemoryPressure", "False", "t2"), cond("Ready", "True", "t2")],
        "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}],
        "capacity": {"cpu": "2", "memory": "2Gi"},
        "images": [{"names": ["b"]}],
    },
}


def test_strategic_patch_merges_conditions_by_type_and_replaces_addresses() -> None:
    patch = two_way_strategic_patch(OLD, NEW, schema=NODE_SCHEMA)

    assert patch == {
        "metadata": {"labels": {"a": "2", "gone": None}},
        "status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [
                {"type": "MemoryPressure", "lastHeartbeatTime": "t2"},
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"$patch": "replace"}],
            "capacity": {"memory": "2Gi"},
            "images": [{"names": ["b"]}],
        },
    }
    assert apply_strategic_patch(OLD, patch, schema=NODE_SCHEMA) == NEW


def test_strategic_patch_deletes_conditions_that_are_gone() -> None:
    new = {"status": {"conditions": [cond("Ready", "True")]}}
    patch = two_way_strategic_patch({"status": OLD["status"]}, new, schema=NODE_SCHEMA)

    assert {"type": "MemoryPressure", "$patch": "delete"} in patch["status"]["conditions"]
    applied = apply_strategic_patch({"status": OLD["status"]}, patch, schema=NODE_SCHEMA)
    assert applied["status"]["conditions"] == [cond("Ready", "True")]


def test_merge_patch_round_trips_and_nulls_removed_keys() -> None:
    patch = two_way_merge_patch(OLD, NEW)

    assert patch["metadata"] == {"labels": {"a": "2", "gone": None}}
    assert apply_merge_patch(OLD, patch) == NEW


def test_json_patch_ops_apply_with_escaped_pointers() -> None:
    doc = {"metadata": {"labels": {"node.kubernetes.io/pool": "a"}}, "spec": {"taints": []}}
    label = pointer("metadata", "labels", "node.kubernetes.io/pool")
    ops = [
        op_test(label, "a"),
        op_replace(label, "b"),
        op_add("/spec/taints/-", {"key": "k", "effect": "NoSchedule"}),
        op_remove("/spec/taints/0"),
        op_add(pointer("metadata", "labels", "x~y"), "z"),
    ]

    assert label == "/metadata/labels/node.kubernetes.io~1pool"
    assert apply_json_patch(doc, ops) == {
        "metadata": {"labels": {"node.kubernetes.io/pool": "b", "x~y": "z"}},
        "spec": {"taints": []},
    }

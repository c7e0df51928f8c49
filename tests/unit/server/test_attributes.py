"""The kubelet's mapping of request paths and methods to authorization attributes."""

from __future__ import annotations

import pytest

from nodeagent.server.attributes import api_verb, is_subpath, request_attributes


@pytest.mark.parametrize(
    ("path", "subresources"),
    [
        ("/stats/summary", ["stats"]),
        ("/stats", ["stats"]),
        ("/statsx", ["proxy"]),
        ("/metrics", ["metrics"]),
        ("/metrics/resource", ["metrics"]),
        ("/metrics/cadvisor", ["metrics"]),
        ("/logs/", ["log"]),
        ("/logs/syslog", ["log"]),
        ("/checkpoint/ns/pod/c", ["checkpoint"]),
        ("/pods", ["pods", "proxy"]),
        ("/pods/", ["pods", "proxy"]),
        ("/runningpods/", ["pods", "proxy"]),
        ("/healthz", ["healthz", "proxy"]),
        ("/healthz/syncloop", ["healthz", "proxy"]),
        ("/configz", ["configz", "proxy"]),
        ("/spec", ["proxy"]),
        ("/exec/default/p/c", ["proxy"]),
        ("/attach/default/p/c", ["proxy"]),
        ("/portForward/default/p", ["proxy"]),
        ("/containerLogs/default/p/c", ["proxy"]),
        ("/", ["proxy"]),
    ],
)
def test_path_to_subresources(path: str, subresources: list[str]) -> None:
    attrs = request_attributes("GET", path, "node-a")
    assert [a.subresource for a in attrs] == subresources
    assert {(a.resource, a.name, a.api_version, a.path) for a in attrs} == {
        ("nodes", "node-a", "v1", path)
    }


def test_without_fine_grained_authz_pods_and_healthz_are_proxy() -> None:
    assert [a.subresource for a in request_attributes("GET", "/pods", "n", fine_grained=False)] == [
        "proxy"
    ]
    healthz = request_attributes("GET", "/healthz", "n", fine_grained=False)
    assert [a.subresource for a in healthz] == ["proxy"]


@pytest.mark.parametrize(
    ("method", "verb"),
    [
        ("GET", "get"),
        ("POST", "create"),
        ("PUT", "update"),
        ("PATCH", "patch"),
        ("DELETE", "delete"),
        ("OPTIONS", ""),
    ],
)
def test_verb_follows_the_method(method: str, verb: str) -> None:
    assert api_verb(method) == verb
    assert request_attributes(method, "/containerLogs/ns/p/c", "n")[0].verb == verb
    assert request_attributes(method, "/exec/ns/p/c", "n", streaming_create=False)[0].verb == verb


STREAMS = ["/exec/ns/p/c", "/exec/ns/p/uid/c", "/attach/ns/p/c", "/run/ns/p/c", "/portForward/ns/p"]


@pytest.mark.parametrize("path", STREAMS)
@pytest.mark.parametrize("method", ["GET", "POST"], ids=["WebSocket (GET)", "SPDY (POST)"])
def test_streaming_needs_create_whatever_the_transport(path: str, method: str) -> None:
    attrs = request_attributes(method, path, "n")
    assert [(a.verb, a.subresource) for a in attrs] == [("create", "proxy")]


@pytest.mark.parametrize("path", STREAMS)
def test_the_kubelets_mapping_on_request_a_websocket_is_a_get(path: str) -> None:
    assert request_attributes("GET", path, "n", streaming_create=False)[0].verb == "get"
    assert request_attributes("POST", path, "n", streaming_create=False)[0].verb == "create"


def test_other_paths_keep_the_methods_verb() -> None:
    for path in ("/containerLogs/ns/p/c", "/pods", "/execx", "/runningpods/", "/logs/run"):
        assert request_attributes("GET", path, "n")[0].verb == "get", path


def test_is_subpath() -> None:
    assert is_subpath("/logs/x", "/logs/")
    assert is_subpath("/logs", "/logs/")
    assert not is_subpath("/logsx", "/logs/")

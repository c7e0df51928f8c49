"""Endpoints and image references are read the way the kubelet and containerd read them."""

from __future__ import annotations

import grpc
import pytest

from nodeagent.kuberuntime.endpoint import parse_endpoint
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.imageref import normalize_image_ref
from nodeagent.kuberuntime.remote import go_code_name


@pytest.mark.parametrize(
    ("endpoint", "display", "target"),
    [
        pytest.param(
            "unix:///run/containerd/containerd.sock",
            "unix:///run/containerd/containerd.sock",
            "unix:///run/containerd/containerd.sock",
            id="unix URL",
        ),
        pytest.param("unix:/run/c.sock", "unix:///run/c.sock", "unix:///run/c.sock", id="unix:/"),
        pytest.param("/run/c.sock", "unix:///run/c.sock", "unix:///run/c.sock", id="bare path"),
        pytest.param("run/c.sock", "unix:run/c.sock", "unix:run/c.sock", id="relative path"),
    ],
)
def test_endpoints_are_normalised_to_unix_urls(endpoint: str, display: str, target: str) -> None:
    parsed = parse_endpoint(endpoint)
    assert (parsed.display, parsed.target) == (display, target)


@pytest.mark.parametrize(
    ("endpoint", "message"),
    [
        pytest.param("tcp://10.0.0.1:9000", 'protocol "tcp" not supported', id="tcp"),
        pytest.param("npipe:////./pipe/x", 'protocol "npipe" not supported', id="windows pipe"),
        pytest.param("unix://", "no socket path", id="empty path"),
    ],
)
def test_unusable_endpoints_are_refused(endpoint: str, message: str) -> None:
    with pytest.raises(CriError, match=message):
        parse_endpoint(endpoint)


@pytest.mark.parametrize(
    ("ref", "normalised"),
    [
        pytest.param("busybox", "docker.io/library/busybox:latest", id="official image"),
        pytest.param("busybox:1.36", "docker.io/library/busybox:1.36", id="tagged"),
        pytest.param("nginxinc/nginx", "docker.io/nginxinc/nginx:latest", id="user repository"),
        pytest.param(
            "index.docker.io/library/busybox", "docker.io/library/busybox:latest", id="legacy host"
        ),
        pytest.param(
            "localhost:5000/busybox", "localhost:5000/busybox:latest", id="registry with port"
        ),
        pytest.param("localhost/pause:3.10", "localhost/pause:3.10", id="localhost"),
        pytest.param(
            "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10", id="registry domain"
        ),
        pytest.param(
            "busybox@sha256:abc", "docker.io/library/busybox@sha256:abc", id="digest, no tag"
        ),
        pytest.param("r.io/a/b:1@sha256:abc", "r.io/a/b:1@sha256:abc", id="tag and digest kept"),
    ],
)
def test_image_references_are_normalised_like_containerd(ref: str, normalised: str) -> None:
    assert normalize_image_ref(ref) == normalised


@pytest.mark.parametrize("ref", ["", "busybox:", " busybox", "registry.io/"])
def test_malformed_image_references_are_rejected(ref: str) -> None:
    with pytest.raises(ValueError, match="invalid image reference"):
        normalize_image_ref(ref)


GO_CODE_NAMES = [
    "OK",
    "Canceled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
]


@pytest.mark.parametrize(("number", "go_name"), list(enumerate(GO_CODE_NAMES)))
def test_grpc_codes_are_spelled_as_go_spells_them(number: int, go_name: str) -> None:
    """``GO_CODE_NAMES`` is what ``codes.Code(n).String()`` of grpc-go v1.79.3 (the pinned
    kubelet's) printed for n = 0..16 (a throwaway Go program, not in the repository)."""
    [code] = [c for c in grpc.StatusCode if c.value[0] == number]
    assert go_code_name(code) == go_name

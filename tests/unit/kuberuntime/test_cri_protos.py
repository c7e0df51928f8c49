"""The committed CRI stubs are current and speak the published runtime.v1 wire format."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from cri_protos.runtime.v1 import api_pb2 as api

REPO = Path(__file__).resolve().parents[3]
STUBS = ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi")


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(
        ["sh", str(REPO / "cri_protos" / "generate.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    for name in STUBS:
        fresh = (tmp_path / "cri_protos" / "runtime" / "v1" / name).read_text()
        committed = (REPO / "cri_protos" / "runtime" / "v1" / name).read_text()
        assert committed == fresh, f"{name} is stale: run cri_protos/generate.sh"


@pytest.mark.parametrize(
    ("message", "encoded"),
    [
        pytest.param(api.VersionRequest(version="v1"), b"\x0a\x02v1", id="VersionRequest"),
        pytest.param(
            api.LinuxContainerResources(unified={"memory.swap.max": "1024"}),
            # field 9, length-delimited map entry {1: key, 2: value}
            b"\x4a\x17" + b"\x0a\x0fmemory.swap.max" + b"\x12\x041024",
            id="unified map (swap limit)",
        ),
        pytest.param(
            api.StopContainerRequest(container_id="abc", timeout=30),
            b"\x0a\x03abc\x10\x1e",
            id="StopContainerRequest",
        ),
        pytest.param(
            api.ImageSpec(image="busybox", user_specified_image="busybox"),
            # field 18 needs a two-byte tag: (18 << 3 | 2) = 146 -> 0x92 0x01
            b"\x0a\x07busybox" + b"\x92\x01\x07busybox",
            id="ImageSpec high field number",
        ),
        pytest.param(
            api.PodSandboxFilter(state=api.PodSandboxStateValue(state=api.SANDBOX_NOTREADY)),
            b"\x12\x02\x08\x01",
            id="PodSandboxFilter state",
        ),
    ],
)
def test_messages_encode_to_the_published_bytes(message: object, encoded: bytes) -> None:
    assert message.SerializeToString(deterministic=True) == encoded  # type: ignore[attr-defined]
    assert type(message).FromString(encoded) == message  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("message", "field", "number"),
    [
        ("VersionResponse", "runtime_api_version", 4),
        ("PodSandboxConfig", "linux", 8),
        ("LinuxPodSandboxConfig", "resources", 5),
        ("LinuxSandboxSecurityContext", "run_as_group", 8),
        ("LinuxSandboxSecurityContext", "supplemental_groups_policy", 11),
        ("PodSandboxStatus", "runtime_handler", 9),
        ("ContainerConfig", "CDI_devices", 17),
        ("ContainerConfig", "stop_signal", 18),
        ("LinuxContainerResources", "memory_swap_limit_in_bytes", 10),
        ("LinuxContainerSecurityContext", "supplemental_groups_policy", 17),
        ("ContainerStatus", "user", 18),
        ("ContainerStatus", "stop_signal", 19),
        ("Container", "image_id", 10),
        ("ImageSpec", "image_ref", 20),
        ("Mount", "image_sub_path", 10),
        ("Image", "pinned", 8),
        ("StatusResponse", "features", 4),
        ("ContainerEventResponse", "containers_statuses", 5),
        ("PsiData", "Avg300", 4),
    ],
)
def test_field_numbers_match_the_published_cri(message: str, field: str, number: int) -> None:
    assert api.DESCRIPTOR.message_types_by_name[message].fields_by_name[field].number == number


def test_the_services_carry_every_published_rpc() -> None:
    runtime = api.DESCRIPTOR.services_by_name["RuntimeService"]
    images = api.DESCRIPTOR.services_by_name["ImageService"]
    assert api.DESCRIPTOR.package == "runtime.v1"
    assert runtime.full_name == "runtime.v1.RuntimeService"
    assert len(runtime.methods) == 35
    assert [m.name for m in images.methods] == [
        "ListImages",
        "StreamImages",
        "ImageStatus",
        "PullImage",
        "RemoveImage",
        "ImageFsInfo",
    ]
    streaming = sorted(m.name for m in runtime.methods if m.server_streaming)
    assert streaming == [
        "GetContainerEvents",
        "StreamContainerStats",
        "StreamContainers",
        "StreamPodSandboxMetrics",
        "StreamPodSandboxStats",
        "StreamPodSandboxes",
    ]
    events = runtime.methods_by_name["GetContainerEvents"]
    assert (events.input_type.name, events.output_type.name) == (
        "GetEventsRequest",
        "ContainerEventResponse",
    )


def test_enum_values_match_the_published_cri() -> None:
    assert api.ContainerState.Value("CONTAINER_UNKNOWN") == 3
    assert api.Signal.Value("SIGTERM") == 23
    assert api.Signal.Value("SIGRTMAX") == 65
    assert api.NamespaceMode.Value("TARGET") == 3
    assert api.CgroupDriver.Value("CGROUPFS") == 1
    assert api.SecurityProfile.ProfileType.Value("Localhost") == 2

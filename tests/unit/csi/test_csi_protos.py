"""The committed CSI and plugin registration stubs are current and speak the published wire
format (the bytes grpc-go's generated code of the CSI spec v1.9.0 and of
k8s.io/kubelet's pluginregistration/v1 produce for the same messages)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from csi_protos.csi.v1 import csi_pb2 as csi
from csi_protos.csi.v1 import csi_pb2_grpc as csi_grpc
from csi_protos.pluginregistration.v1 import api_pb2 as reg
from csi_protos.pluginregistration.v1 import api_pb2_grpc as reg_grpc

REPO = Path(__file__).resolve().parents[3]
STUBS = {
    "csi/v1": ("csi_pb2.py", "csi_pb2_grpc.py", "csi_pb2.pyi"),
    "pluginregistration/v1": ("api_pb2.py", "api_pb2_grpc.py", "api_pb2.pyi"),
}


def test_committed_stubs_equal_a_fresh_generation(tmp_path: Path) -> None:
    subprocess.run(
        ["sh", str(REPO / "csi_protos" / "generate.sh"), str(tmp_path)],
        check=True,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
    )
    for directory, names in STUBS.items():
        for name in names:
            fresh = (tmp_path / "csi_protos" / directory / name).read_text()
            committed = (REPO / "csi_protos" / directory / name).read_text()
            assert committed == fresh, f"{directory}/{name} is stale: run csi_protos/generate.sh"


def test_rpc_paths_are_the_specs() -> None:
    assert csi.DESCRIPTOR.package == "csi.v1"
    assert reg.DESCRIPTOR.package == "pluginregistration"
    node = csi.DESCRIPTOR.services_by_name["Node"]
    assert [m.name for m in node.methods] == [
        "NodeStageVolume",
        "NodeUnstageVolume",
        "NodePublishVolume",
        "NodeUnpublishVolume",
        "NodeGetVolumeStats",
        "NodeExpandVolume",
        "NodeGetCapabilities",
        "NodeGetInfo",
    ]
    assert hasattr(csi_grpc, "NodeStub") and hasattr(reg_grpc, "RegistrationStub")


@pytest.mark.parametrize(
    ("message", "encoded"),
    [
        pytest.param(
            csi.NodeUnpublishVolumeRequest(volume_id="v", target_path="/t"),
            b"\x0a\x01v\x12\x02/t",
            id="NodeUnpublishVolumeRequest",
        ),
        pytest.param(
            csi.NodePublishVolumeRequest(
                volume_id="v",
                target_path="/t",
                readonly=True,
                volume_capability=csi.VolumeCapability(
                    mount=csi.VolumeCapability.MountVolume(fs_type="ext4"),
                    access_mode=csi.VolumeCapability.AccessMode(
                        mode=csi.VolumeCapability.AccessMode.SINGLE_NODE_WRITER
                    ),
                ),
            ),
            # 1: "v"; 4: "/t"; 5: {2: {1: "ext4"}, 3: {1: 1}}; 6: true
            b"\x0a\x01v\x22\x02/t\x2a\x0c\x12\x06\x0a\x04ext4\x1a\x02\x08\x01\x30\x01",
            id="NodePublishVolumeRequest",
        ),
        pytest.param(
            csi.NodeGetInfoResponse(
                node_id="n1",
                max_volumes_per_node=3,
                accessible_topology=csi.Topology(segments={"zone": "a"}),
            ),
            b"\x0a\x02n1\x10\x03\x1a\x0b\x0a\x09\x0a\x04zone\x12\x01a",
            id="NodeGetInfoResponse",
        ),
        pytest.param(
            csi.NodeExpandVolumeRequest(
                volume_id="v", capacity_range=csi.CapacityRange(required_bytes=1024)
            ),
            b"\x0a\x01v\x1a\x03\x08\x80\x08",
            id="NodeExpandVolumeRequest",
        ),
        pytest.param(
            reg.PluginInfo(type="CSIPlugin", name="d", endpoint="/s", supported_versions=["1.0.0"]),
            b"\x0a\x09CSIPlugin\x12\x01d\x1a\x02/s\x22\x051.0.0",
            id="PluginInfo",
        ),
        pytest.param(
            reg.RegistrationStatus(plugin_registered=False, error="no"),
            b"\x12\x02no",
            id="RegistrationStatus",
        ),
    ],
)
def test_messages_encode_to_the_published_bytes(message: object, encoded: bytes) -> None:
    assert message.SerializeToString(deterministic=True) == encoded  # type: ignore[attr-defined]

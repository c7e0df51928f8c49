"""What the node asks of and hears from a CSI driver, as frozen dataclasses (the protobuf
messages stay inside ``client.py``)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class AccessMode(enum.IntEnum):
    """``VolumeCapability.AccessMode.Mode`` of the CSI spec."""

    UNKNOWN = 0
    SINGLE_NODE_WRITER = 1
    SINGLE_NODE_READER_ONLY = 2
    MULTI_NODE_READER_ONLY = 3
    MULTI_NODE_SINGLE_WRITER = 4
    MULTI_NODE_MULTI_WRITER = 5
    SINGLE_NODE_SINGLE_WRITER = 6
    SINGLE_NODE_MULTI_WRITER = 7


@dataclass(frozen=True, slots=True)
class PluginInfo:
    """A registering plugin's ``GetInfo``."""

    type: str
    name: str
    endpoint: str
    supported_versions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: str
    max_volumes_per_node: int
    topology: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class NodeCapabilities:
    stage_unstage: bool = False
    get_volume_stats: bool = False
    expand_volume: bool = False
    volume_condition: bool = False
    single_node_multi_writer: bool = False
    volume_mount_group: bool = False


@dataclass(frozen=True, slots=True)
class Capability:
    """A ``VolumeCapability``: mount (``fs_type``, flags, mount group) or block."""

    access_mode: AccessMode
    block: bool = False
    fs_type: str = ""
    mount_flags: tuple[str, ...] = ()
    volume_mount_group: str = ""


@dataclass(frozen=True, slots=True)
class StageRequest:
    volume_id: str
    staging_target_path: str
    capability: Capability
    publish_context: Mapping[str, str] = field(default_factory=dict)
    volume_context: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class PublishRequest:
    volume_id: str
    target_path: str
    capability: Capability
    read_only: bool = False
    staging_target_path: str = ""
    publish_context: Mapping[str, str] = field(default_factory=dict)
    volume_context: Mapping[str, str] = field(default_factory=dict)
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)


@dataclass(frozen=True, slots=True)
class VolumeStats:
    """``NodeGetVolumeStats``: bytes and inodes (None where the driver did not say)."""

    capacity_bytes: int | None = None
    available_bytes: int | None = None
    used_bytes: int | None = None
    inodes: int | None = None
    inodes_free: int | None = None
    inodes_used: int | None = None
    abnormal: bool = False
    message: str = ""

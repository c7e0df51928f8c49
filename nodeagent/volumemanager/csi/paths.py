"""Where the kubelet's CSI plugin keeps a volume, and what it writes beside it. Pure.

- staged (``NodeStageVolume``), once per volume on the node:
  ``<rootDir>/plugins/kubernetes.io/csi/<driver>/<sha256(volumeHandle)>/globalmount``, with
  ``vol_data.json`` (``volumeHandle``, ``driverName``) beside ``globalmount``;
- published (``NodePublishVolume``), per pod:
  ``<rootDir>/pods/<uid>/volumes/kubernetes.io~csi/<specName>/mount`` (``specName`` the PV's
  name, or the pod's volume name for an inline volume, ``/`` escaped as ``~``), with
  ``vol_data.json`` (``specVolID``, ``volumeHandle``, ``driverName``, ``nodeName``,
  ``volumeLifecycleMode``, ``attachmentID``) beside ``mount``;
- a raw block volume (``volumeMode: Block``), under
  ``<rootDir>/plugins/kubernetes.io/csi/volumeDevices/``: ``<specName>/data/vol_data.json``
  (written first), staged at ``staging/<specName>`` (a directory), published per pod at
  ``publish/<specName>/<podUID>`` (a file the driver makes the device), and the pod's link to
  that file ``<rootDir>/pods/<uid>/volumeDevices/kubernetes.io~csi/<specName>``, which the
  runtime resolves when it creates a container with the device (the kubelet's ``csi_block.go``);
- the VolumeAttachment of a volume on a node: ``csi-<sha256(handle + driver + node)>``;
- an inline volume's handle: ``csi-<sha256(podUID + volumeName)>``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Final

PLUGIN_NAME: Final = "kubernetes.io/csi"
POD_PLUGIN_DIR: Final = "kubernetes.io~csi"
GLOBAL_MOUNT: Final = "globalmount"
MOUNT: Final = "mount"
VOL_DATA: Final = "vol_data.json"
DEVICES: Final = "volumeDevices"
STAGING: Final = "staging"
PUBLISH: Final = "publish"
DATA: Final = "data"
PERSISTENT: Final = "Persistent"
EPHEMERAL: Final = "Ephemeral"

# vol_data.json keys, as the kubelet's volDataKey
SPEC_VOL_ID: Final = "specVolID"
VOLUME_HANDLE: Final = "volumeHandle"
DRIVER_NAME: Final = "driverName"
NODE_NAME: Final = "nodeName"
LIFECYCLE_MODE: Final = "volumeLifecycleMode"
ATTACHMENT_ID: Final = "attachmentID"


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def escape(name: str) -> str:
    """``utilstrings.EscapeQualifiedName``."""
    return name.replace("/", "~")


def plugin_dir(root_dir: str | Path) -> Path:
    return Path(root_dir) / "plugins" / PLUGIN_NAME


def staging_dir(root_dir: str | Path, driver: str, handle: str) -> Path:
    """The directory holding ``globalmount`` and its ``vol_data.json``."""
    return plugin_dir(root_dir) / driver / _sha(handle)


def global_mount_path(root_dir: str | Path, driver: str, handle: str) -> Path:
    return staging_dir(root_dir, driver, handle) / GLOBAL_MOUNT


def pod_volume_dir(root_dir: str | Path, uid: str, spec_name: str) -> Path:
    return Path(root_dir) / "pods" / uid / "volumes" / POD_PLUGIN_DIR / escape(spec_name)


def target_path(root_dir: str | Path, uid: str, spec_name: str) -> Path:
    return pod_volume_dir(root_dir, uid, spec_name) / MOUNT


def device_dir(root_dir: str | Path) -> Path:
    """Where the raw block volumes' records, staging and publish paths are."""
    return plugin_dir(root_dir) / DEVICES


def block_volume_dir(root_dir: str | Path, spec_name: str) -> Path:
    """Holds ``data/vol_data.json`` of a raw block volume."""
    return device_dir(root_dir) / escape(spec_name)


def block_data_file(root_dir: str | Path, spec_name: str) -> Path:
    return block_volume_dir(root_dir, spec_name) / DATA / VOL_DATA


def block_staging_path(root_dir: str | Path, spec_name: str) -> Path:
    return device_dir(root_dir) / STAGING / escape(spec_name)


def block_publish_dir(root_dir: str | Path, spec_name: str) -> Path:
    return device_dir(root_dir) / PUBLISH / escape(spec_name)


def block_publish_path(root_dir: str | Path, spec_name: str, uid: str) -> Path:
    return block_publish_dir(root_dir, spec_name) / uid


def pod_device_dir(root_dir: str | Path, uid: str) -> Path:
    return Path(root_dir) / "pods" / uid / DEVICES / POD_PLUGIN_DIR


def pod_device_link(root_dir: str | Path, uid: str, spec_name: str) -> Path:
    return pod_device_dir(root_dir, uid) / escape(spec_name)


def attachment_name(handle: str, driver: str, node_name: str) -> str:
    return "csi-" + _sha(f"{handle}{driver}{node_name}")


def inline_handle(pod_uid: str, volume_name: str) -> str:
    return "csi-" + _sha(f"{pod_uid}{volume_name}")


def vol_data_text(data: Mapping[str, str]) -> str:
    return json.dumps(dict(data), separators=(",", ":"))


def parse_vol_data(text: str) -> dict[str, str]:
    """A ``vol_data.json``; raises ``ValueError`` when it is not an object of strings."""
    data = json.loads(text)
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise ValueError("vol_data.json is not an object of strings")
    return {str(k): v for k, v in data.items()}

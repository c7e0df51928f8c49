"""Online expansion of a CSI volume, seen by the pod that uses it: the real ``nodeagent run``,
containerd, the kernel's mounts, the harness's hostpath driver with the real
external-provisioner and external-resizer (``csidriver.py``).

The driver's StorageClass asks ``csi.storage.k8s.io/fstype: tmpfs``: each volume is then a
tmpfs of the claim's size (a plain directory would show the host file system's size, whatever
the claim says). The pod writes what ``df`` says of its mount every second. The claim grows
while the pod runs: the resizer expands the volume on the controller side, the agent calls
``NodeExpandVolume`` on the published path (the driver grows the file system there, as with a
block device) and marks the claim; the running pod's ``df`` shows the new size, as does the
node's ``/stats/summary`` (``NodeGetVolumeStats``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import agent_node, api_get, configure_kubelet, pods_in, wait_ready
from csidriver import hostpath_driver
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until
from test_persistent_volumes import running_uid
from test_volumes import mounts_below, mounts_inside, no_mounts_left

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("removes_pulled_images")]

# the pod's view of its volume's size, in KiB, replaced atomically every second
SIZER = (
    "while true; do df -Pk /data | awk 'NR==2 {print $2}' > /data/.size "
    "&& mv /data/.size /data/size; sleep 1; done"
)


@pytest.fixture
def root() -> Iterator[Path]:
    """A short root dir (the registrar's socket must fit in ``sun_path``); whatever a failing
    test leaves mounted below it is unmounted."""
    path = Path(tempfile.mkdtemp(prefix="na-root-"))
    with no_mounts_left(path):
        yield path
    shutil.rmtree(path, ignore_errors=True)


def apply(control_plane: ControlPlane, obj: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


def claim(namespace: str, storage_class: str, size: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": size}},
        },
    }


def sizer(namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "sizer", "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", SIZER],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
        },
    }


def claim_of(control_plane: ControlPlane, ns: str) -> dict[str, Any]:
    return api_get(control_plane, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/data") or {}


def read_kib(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def summary_capacity(control_plane: ControlPlane, node: str) -> int | None:
    done = control_plane.kubectl(
        "get", "--raw", f"/api/v1/nodes/{node}/proxy/stats/summary", check=False
    )
    for entry in json.loads(done.stdout or "{}").get("pods", []) if done.returncode == 0 else []:
        if entry["podRef"]["name"] == "sizer":
            for volume in entry.get("volume", []):
                if volume["name"] == "data":
                    return int(volume["capacityBytes"])
    return None


async def test_a_claim_grown_online_is_seen_at_its_new_size_by_the_running_pod(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            ns = node.namespace
            configure_kubelet(node, control_plane)  # /stats/summary through the apiserver
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=ns,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
                binding="Immediate",
                parameters={"csi.storage.k8s.io/fstype": "tmpfs"},
            ) as driver:
                await until(
                    "the driver registered",
                    lambda: (
                        (
                            api_get(control_plane, f"/apis/storage.k8s.io/v1/csinodes/{node.name}")
                            or {}
                        )
                        .get("spec", {})
                        .get("drivers")
                    ),
                    within=30,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                apply(control_plane, claim(ns, driver.storage_class, "64Mi"))
                pv_name = await until(
                    "the claim bound",
                    lambda: claim_of(control_plane, ns).get("spec", {}).get("volumeName"),
                    within=60,
                    explain=driver.logs,
                )
                pv = api_get(control_plane, f"/api/v1/persistentvolumes/{pv_name}")
                assert pv["spec"]["csi"]["fsType"] == "tmpfs"
                volume_dir = driver.data / "volumes" / pv["spec"]["csi"]["volumeHandle"]

                apply(control_plane, sizer(ns, node.name))
                uid = await until(
                    "sizer Running",
                    lambda: running_uid(control_plane, ns, "sizer"),
                    within=120,
                    every=0.5,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                await until(
                    "the pod's df at 64Mi",
                    lambda: read_kib(volume_dir / "size") == 64 * 1024,
                    within=30,
                    explain=lambda: read_kib(volume_dir / "size"),
                )

                control_plane.kubectl(
                    "patch", "pvc", "data", "-n", ns, "--type=merge",
                    "-p", '{"spec":{"resources":{"requests":{"storage":"128Mi"}}}}',
                )  # fmt: skip
                await until(
                    "the running pod's df at 128Mi",
                    lambda: read_kib(volume_dir / "size") == 128 * 1024,
                    within=150,
                    every=1,
                    explain=lambda: (
                        read_kib(volume_dir / "size"),
                        claim_of(control_plane, ns).get("status"),
                        node.log_tail(2000),
                        driver.logs(),
                    ),
                )
                await until(
                    "the claim's status at 128Mi",
                    lambda: (
                        claim_of(control_plane, ns).get("status", {}).get("capacity", {})
                        == {"storage": "128Mi"}
                    ),
                    within=60,
                    explain=lambda: claim_of(control_plane, ns).get("status"),
                )
                assert running_uid(control_plane, ns, "sizer") == uid  # the same pod, online
                await until(
                    "the Summary's capacity at 128Mi",
                    lambda: summary_capacity(control_plane, node.name) == 128 * 1024 * 1024,
                    within=60,
                    every=2,
                    explain=lambda: summary_capacity(control_plane, node.name),
                )
                assert "Traceback" not in node.log_text(), node.log_tail()

                control_plane.kubectl("delete", "pod", "sizer", "-n", ns)
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60)
                await until(
                    "nothing mounted below the root",
                    lambda: not mounts_inside(root),
                    within=30,
                    explain=lambda: mounts_below(root),
                )
                control_plane.kubectl("delete", "pvc", "data", "-n", ns)
                await until(
                    "the volume deleted and its tmpfs unmounted",
                    lambda: (
                        api_get(control_plane, f"/api/v1/persistentvolumes/{pv_name}") is None
                        and not mounts_below(driver.dir)
                    ),
                    within=60,
                    explain=lambda: (mounts_below(driver.dir), driver.logs()),
                )

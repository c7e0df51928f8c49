"""PersistentVolumes on the real control plane and the real ``nodeagent run`` process, with
containerd and the kernel: the PV controller binds the claims, the scheduler places the pods
(the local PV's node affinity pins them to the agent's node), the agent mounts what the claim
is bound to, with the node's own credentials (the Node authorizer lets it read only the claims
and volumes of its pods).

- A StatefulSet with a claim template on a ``local`` PV (``WaitForFirstConsumer``): its pod
  writes, is deleted and recreated and reads what the first one wrote; scaled to 0 and back to
  1 it reads it again; every bind mount is gone once the pods are.
- A pod on a ``hostPath`` PV through a read-only claim: it reads the host's file and cannot
  write it.
- A local PV of ``volumeMode: Block`` on a loop device: the container reads and writes it as
  ``/dev/xvda`` (``volumeDevices``), nothing is mounted, and the pod's link to the device goes
  with the pod.
- A ``ReadWriteOncePod`` claim in use: a second pod placed on the node by ``nodeName`` (which
  bypasses the scheduler's check) waits in ``ContainerCreating`` with the kubelet's
  ``FailedMount`` Event until the first pod is gone, then runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, pods_in, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until
from test_volumes import mounts_below, mounts_inside, no_mounts_left

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("removes_pulled_images")]

WRITER = (
    '[ -f /data/first ] || echo "$POD_UID" > /data/first; '
    'echo "$POD_UID saw $(cat /data/first)" >> /data/log; sleep 3600'
)


def apply(control_plane: ControlPlane, obj: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


@contextlib.contextmanager
def cluster_objects(control_plane: ControlPlane, *objs: dict[str, Any]) -> Iterator[None]:
    """Create cluster-scoped ``objs`` (PVs, StorageClasses); delete them at the end."""
    try:
        for obj in objs:
            apply(control_plane, obj)
        yield
    finally:
        for obj in reversed(objs):
            control_plane.kubectl(
                "delete",
                obj["kind"].lower(),
                obj["metadata"]["name"],
                "--ignore-not-found",
                "--wait=false",
                check=False,
            )


def local_pv(name: str, path: Path, node: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": storage_class,
            "local": {"path": str(path)},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [node],
                                }
                            ]
                        }
                    ]
                }
            },
        },
    }


def statefulset(name: str, namespace: str, storage_class: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "app",
                            "image": BUSYBOX_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sh", "-c", WRITER],
                            "env": [
                                {
                                    "name": "POD_UID",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}},
                                }
                            ],
                            "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                        }
                    ],
                },
            },
            "volumeClaimTemplates": [
                {
                    "metadata": {"name": "data"},
                    "spec": {
                        "accessModes": ["ReadWriteOnce"],
                        "storageClassName": storage_class,
                        "resources": {"requests": {"storage": "1Gi"}},
                    },
                }
            ],
        },
    }


def bound_claim(namespace: str, pv_name: str, mode: str) -> dict[str, Any]:
    """The claim ``data`` of ``namespace``, bound to ``pv_name`` by name (no StorageClass)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": namespace},
        "spec": {
            "accessModes": [mode],
            "storageClassName": "",
            "volumeName": pv_name,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def running_uid(control_plane: ControlPlane, namespace: str, name: str) -> str | None:
    for p in pods_in(control_plane, namespace):
        if p["metadata"]["name"] == name and (p.get("status") or {}).get("phase") == "Running":
            return str(p["metadata"]["uid"])
    return None


def log_lines(disk: Path) -> list[str]:
    log = disk / "log"
    return log.read_text().splitlines() if log.exists() else []


async def started(node: AgentNode, control_plane: ControlPlane, disk: Path, count: int) -> str:
    """Wait for the ``count``-th start of ``web-0``; its uid."""
    uid = await until(
        "web-0 Running",
        lambda: running_uid(control_plane, node.namespace, "web-0"),
        within=90,
        every=0.5,
        explain=node.log_tail,
    )
    await until(f"{count} starts logged", lambda: len(log_lines(disk)) >= count, within=30)
    return str(uid)


async def test_statefulset_on_a_local_pv_keeps_its_data_across_pods_and_scaling(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
            sc = f"local-{node.namespace}"
            storage_class = {
                "apiVersion": "storage.k8s.io/v1",
                "kind": "StorageClass",
                "metadata": {"name": sc},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer",
            }
            pv = local_pv(f"pv-{node.namespace}", disk, node.name, sc)
            with cluster_objects(control_plane, storage_class, pv):
                node.start()
                await wait_ready(control_plane, node, status="True", within=90)
                apply(control_plane, statefulset("web", node.namespace, sc, replicas=1))
                first = await started(node, control_plane, disk, 1)
                assert log_lines(disk) == [f"{first} saw {first}"]
                pod_dir = tmp_path / "root" / "pods" / first
                target = pod_dir / "volumes" / "kubernetes.io~local-volume" / pv["metadata"]["name"]
                assert mounts_below(pod_dir) == [str(target.resolve())] or str(
                    target.resolve()
                ) in mounts_below(pod_dir)

                control_plane.kubectl("delete", "pod", "web-0", "-n", node.namespace)
                second = await started(node, control_plane, disk, 2)
                assert second != first
                assert log_lines(disk)[1] == f"{second} saw {first}"
                await until(
                    "the first pod's mounts gone", lambda: not mounts_below(pod_dir), within=30
                )

                control_plane.kubectl(
                    "scale", "statefulset", "web", "--replicas=0", "-n", node.namespace
                )
                await until(
                    "no pods",
                    lambda: not pods_in(control_plane, node.namespace),
                    within=60,
                    every=0.5,
                )
                control_plane.kubectl(
                    "scale", "statefulset", "web", "--replicas=1", "-n", node.namespace
                )
                third = await started(node, control_plane, disk, 3)
                assert log_lines(disk)[2] == f"{third} saw {first}"
                assert "Traceback" not in node.log_text(), node.log_tail()
                control_plane.kubectl("delete", "statefulset", "web", "-n", node.namespace)
                await until(
                    "no pods",
                    lambda: not pods_in(control_plane, node.namespace),
                    within=60,
                    every=0.5,
                )
                await until(
                    "no mounts under the root dir",
                    lambda: not mounts_inside(tmp_path / "root"),
                    within=30,
                )


async def test_read_only_claim_on_a_host_path_pv(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "greeting").write_text("hello from the host\n")
    script = "cat /data/greeting; echo x > /data/new && echo wrote || echo refused; sleep 3600"
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
            pv = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"pv-{node.namespace}"},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "claimRef": {"namespace": node.namespace, "name": "data"},
                    "hostPath": {"path": str(host), "type": "Directory"},
                },
            }
            claim = bound_claim(node.namespace, pv["metadata"]["name"], "ReadWriteOnce")
            with cluster_objects(control_plane, pv):
                node.start()
                await wait_ready(control_plane, node, status="True", within=90)
                apply(control_plane, claim)
                apply(
                    control_plane,
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "reader", "namespace": node.namespace},
                        "spec": {
                            "nodeName": node.name,
                            "terminationGracePeriodSeconds": 1,
                            "volumes": [
                                {
                                    "name": "data",
                                    "persistentVolumeClaim": {
                                        "claimName": "data",
                                        "readOnly": True,
                                    },
                                }
                            ],
                            "containers": [
                                {
                                    "name": "app",
                                    "image": BUSYBOX_IMAGE,
                                    "imagePullPolicy": "IfNotPresent",
                                    "command": ["sh", "-c", script],
                                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                                }
                            ],
                        },
                    },
                )
                uid = await until(
                    "reader Running",
                    lambda: running_uid(control_plane, node.namespace, "reader"),
                    within=90,
                    every=0.5,
                    explain=node.log_tail,
                )
                logs = tmp_path / "pods" / f"{node.namespace}_reader_{uid}" / "app" / "0.log"
                await until(
                    "the reader's output",
                    lambda: logs.exists() and "refused" in logs.read_text(),
                    within=30,
                    explain=lambda: logs.read_text() if logs.exists() else "no log",
                )
                assert "hello from the host" in logs.read_text()
                assert not (host / "new").exists()


def claim_pod(name: str, namespace: str, claim: str, node: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            **({"nodeName": node} if node else {}),
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", f"echo {name} >> /data/log; sleep 3600"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }


def failed_mounts(control_plane: ControlPlane, namespace: str, pod: str) -> list[str]:
    listed = api_get(control_plane, f"/api/v1/namespaces/{namespace}/events") or {}
    return [
        e.get("message", "")
        for e in listed.get("items", [])
        if e["involvedObject"]["name"] == pod and e.get("reason") == "FailedMount"
    ]


def phase(control_plane: ControlPlane, namespace: str, name: str) -> str:
    for p in pods_in(control_plane, namespace):
        if p["metadata"]["name"] == name:
            return str((p.get("status") or {}).get("phase", ""))
    return ""


async def test_a_read_write_once_pod_claim_in_use_keeps_a_second_pod_waiting_until_it_is_free(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
            ns = node.namespace
            pv = local_pv(f"pv-{ns}", disk, node.name, "")
            pv["spec"]["accessModes"] = ["ReadWriteOncePod"]
            pv["spec"]["claimRef"] = {"namespace": ns, "name": "data"}
            pvc = bound_claim(ns, pv["metadata"]["name"], "ReadWriteOncePod")
            with cluster_objects(control_plane, pv):
                node.start()
                await wait_ready(control_plane, node, status="True", within=90)
                apply(control_plane, pvc)
                apply(control_plane, claim_pod("first", ns, "data"))
                await until(
                    "first Running",
                    lambda: phase(control_plane, ns, "first") == "Running",
                    within=90,
                    explain=node.log_tail,
                )

                apply(control_plane, claim_pod("second", ns, "data", node=node.name))

                expected = (
                    f'MountVolume.SetUp failed for volume "{pv["metadata"]["name"]}" : volume '
                    "uses the ReadWriteOncePod access mode and is already in use by another pod"
                )
                await until(
                    "the second pod's FailedMount Event",
                    lambda: expected in failed_mounts(control_plane, ns, "second"),
                    within=60,
                    explain=node.log_tail,
                )
                assert phase(control_plane, ns, "second") == "Pending"
                assert (disk / "log").read_text().split() == ["first"]

                control_plane.kubectl("delete", "pod", "first", "-n", ns)
                await until(
                    "second Running",
                    lambda: phase(control_plane, ns, "second") == "Running",
                    within=120,
                    explain=node.log_tail,
                )
                await until(
                    "the second pod's line",
                    lambda: (disk / "log").read_text().split() == ["first", "second"],
                    within=30,
                )
                control_plane.kubectl(
                    "delete", "pod", "second", "-n", ns, "--grace-period=1", check=False
                )
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60, every=0.5)


@contextlib.contextmanager
def loop_device(backing: Path, *, first: bytes, size: int = 8 << 20) -> Iterator[str]:
    """A loop device over a file of ``size`` bytes that start with ``first``; detached at
    the end."""
    with backing.open("wb") as f:
        f.write(first)
        f.truncate(size)
    done = subprocess.run(
        ["losetup", "--find", "--show", str(backing)], capture_output=True, text=True, check=True
    )
    device = done.stdout.strip()
    try:
        yield device
    finally:
        subprocess.run(["losetup", "--detach", device], capture_output=True, check=False)


def read_at(device: str, offset: int, size: int) -> bytes:
    with open(device, "rb") as f:
        f.seek(offset)
        return f.read(size)


# One write of the whole line into the pipe (dd's conv=sync pads every read it gets to a block).
BLOCK_READER = (
    'line="pod saw $(head -c 8 /dev/xvda)"; '
    'printf %s "$line" | dd of=/dev/xvda bs=512 seek=1 conv=notrunc,sync; '
    "sleep 3600"
)


async def test_a_local_block_pv_is_a_device_in_the_container_and_its_link_goes_with_the_pod(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    with loop_device(tmp_path / "disk.img", first=b"host-123") as device:
        with no_mounts_left(tmp_path):
            async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
                ns = node.namespace
                pv = local_pv(f"pv-{ns}", Path(device), node.name, "")
                pv["spec"]["volumeMode"] = "Block"
                pv["spec"]["claimRef"] = {"namespace": ns, "name": "data"}
                claim = bound_claim(ns, pv["metadata"]["name"], "ReadWriteOnce")
                claim["spec"]["volumeMode"] = "Block"
                reader = claim_pod("reader", ns, "data")
                (app,) = reader["spec"]["containers"]
                app["command"] = ["sh", "-c", BLOCK_READER]
                app["volumeDevices"] = [app.pop("volumeMounts")[0] | {"devicePath": "/dev/xvda"}]
                del app["volumeDevices"][0]["mountPath"]
                with cluster_objects(control_plane, pv):
                    node.start()
                    await wait_ready(control_plane, node, status="True", within=90)
                    apply(control_plane, claim)
                    apply(control_plane, reader)
                    await until(
                        "reader Running",
                        lambda: phase(control_plane, ns, "reader") == "Running",
                        within=120,
                        explain=node.log_tail,
                    )
                    await until(
                        "the pod's line on the device",
                        lambda: read_at(device, 512, 16) == b"pod saw host-123",
                        within=30,
                        explain=lambda: read_at(device, 0, 1024),
                    )
                    uid = next(p["metadata"]["uid"] for p in pods_in(control_plane, ns))
                    link = (
                        tmp_path / "root" / "pods" / uid / "volumeDevices"
                        / "kubernetes.io~local-volume" / pv["metadata"]["name"]
                    )  # fmt: skip
                    assert os.readlink(link) == device
                    pod_dir = tmp_path / "root" / "pods" / uid
                    assert not [m for m in mounts_below(pod_dir) if "local-volume" in m]

                    control_plane.kubectl("delete", "pod", "reader", "-n", ns)
                    await until(
                        "no pods", lambda: not pods_in(control_plane, ns), within=60, every=0.5
                    )
                    await until("the pod's link gone", lambda: not os.path.lexists(link), within=30)
        assert read_at(device, 0, 8) == b"host-123"

"""CSI volumes on the real control plane with the real ``nodeagent run`` process, containerd,
the kernel's mounts and a real CSI driver (the harness's hostpath driver, its registrar, the
external-provisioner and external-resizer: ``csidriver.py``).

- the driver registers through ``<rootDir>/plugins_registry``: the CSINode lists it with the
  node's ID and topology key, the Node has the topology label;
- a StatefulSet with a claim template on the driver's StorageClass: the provisioner makes the
  volume on this node (by the CSINode's topology), the agent stages and publishes it, the pod
  writes; deleted and recreated, it reads what the first wrote; scaled to 0 and back to 1, too;
- the claim expanded online: the resizer grows the volume, the agent runs NodeExpandVolume and
  marks the claim's status (the hostpath driver's volume is a directory: its size is the host
  file system's, so the pod's ``df`` does not change; test_csi_expansion.py shows the pod
  seeing the new size on a tmpfs volume); ``/stats/summary`` lists the volume
  (``NodeGetVolumeStats``) under the pod's volume name with its ``pvcRef``, and ``/metrics``
  has its ``kubelet_volume_stats_*`` series;
- an inline CSI volume published with fsGroup applied (``fsGroupPolicy: File``); a generic
  ephemeral volume: the claim the controller makes for the pod is provisioned, staged and
  published, and goes with the pod;
- a driver that needs attach (``attachRequired``, the external-attacher): the attach/detach
  controller's VolumeAttachment must be attached before staging; the node lists the volume in
  ``status.volumesInUse`` while it is mounted, and no longer once the pod is gone;
- the agent killed with SIGKILL while NodeStageVolume, or NodePublishVolume, hangs in the
  driver: once it is started again no mount is left of what was deleted meanwhile, the pod that
  stays starts, and after the last pod goes nothing is mounted or staged.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, configure_kubelet, pods_in, wait_ready
from csidriver import Driver, hostpath_driver
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import until
from test_persistent_volumes import running_uid, statefulset
from test_volumes import mounts_below, mounts_inside, no_mounts_left

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("removes_pulled_images")]


@pytest.fixture
def root() -> Iterator[Path]:
    """The agent's root dir, short: a registration socket in ``<root>/plugins_registry`` must
    fit in ``sun_path`` (the node-driver-registrar listens there), as under the kubelet's
    ``/var/lib/kubelet``. Whatever a failing test leaves mounted below it is unmounted."""
    path = Path(tempfile.mkdtemp(prefix="na-root-"))
    with no_mounts_left(path):
        yield path
    shutil.rmtree(path, ignore_errors=True)


CSI_DIR = "kubernetes.io~csi"


def apply(control_plane: ControlPlane, obj: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


def kubectl_raw(control_plane: ControlPlane, path: str) -> str:
    done = control_plane.kubectl("get", "--raw", path, check=False)
    return done.stdout if done.returncode == 0 else ""


def claim_of(control_plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    return api_get(control_plane, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}") or {}


def driver_data(driver: Driver) -> list[Path]:
    return [p for p in driver.data.rglob("log") if p.is_file()]


def log_lines(driver: Driver) -> list[str]:
    found = driver_data(driver)
    return found[0].read_text().splitlines() if found else []


async def web_started(
    node: AgentNode, control_plane: ControlPlane, driver: Driver, count: int
) -> str:
    uid = await until(
        "web-0 Running",
        lambda: running_uid(control_plane, node.namespace, "web-0"),
        within=120,
        every=0.5,
        explain=lambda: (node.log_tail(), driver.logs()),
    )
    await until(f"{count} starts logged", lambda: len(log_lines(driver)) >= count, within=30)
    return str(uid)


async def usage_reported(
    control_plane: ControlPlane, node: AgentNode, pod: str, claim_name: str
) -> None:
    """``pod``'s claim in ``/stats/summary`` (through the apiserver's node proxy) with its
    ``pvcRef`` and usage, and its ``kubelet_volume_stats_*`` series on ``/metrics``."""

    def summary_volume() -> dict[str, Any] | None:
        raw = kubectl_raw(control_plane, f"/api/v1/nodes/{node.name}/proxy/stats/summary")
        for entry in json.loads(raw or "{}").get("pods", []):
            if entry["podRef"]["name"] == pod:
                for volume in entry.get("volume", []):
                    if volume["name"] == "data":
                        return dict(volume)
        return None

    volume = await until(f"{pod}'s data volume in the Summary", summary_volume, within=60)
    assert volume["pvcRef"] == {"name": claim_name, "namespace": node.namespace}
    assert volume["capacityBytes"] > 0 and "usedBytes" in volume
    series = (
        f'kubelet_volume_stats_capacity_bytes{{namespace="{node.namespace}",'
        f'persistentvolumeclaim="{claim_name}"}}'
    )
    await until(
        "the claim's kubelet_volume_stats_* series",
        lambda: series in kubectl_raw(control_plane, f"/api/v1/nodes/{node.name}/proxy/metrics"),
        within=60,
        every=2,
    )


async def test_a_statefulset_keeps_its_data_on_a_csi_volume_and_it_grows_online(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            configure_kubelet(node, control_plane)  # /stats/summary through the apiserver
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=node.namespace,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
            ) as driver:
                csinode = await until(
                    "the driver on the CSINode",
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
                [entry] = csinode
                assert (entry["name"], entry["nodeID"]) == (driver.name, node.name)
                assert len(entry["topologyKeys"]) == 1
                labels = api_get(control_plane, f"/api/v1/nodes/{node.name}")["metadata"]["labels"]
                assert labels[entry["topologyKeys"][0]] == node.name

                apply(control_plane, statefulset("web", node.namespace, driver.storage_class, 1))
                first = await web_started(node, control_plane, driver, 1)
                assert log_lines(driver) == [f"{first} saw {first}"]
                pod_dir = root / "pods" / first
                claim = claim_of(control_plane, node.namespace, "data-web-0")
                pv = claim["spec"]["volumeName"]
                target = pod_dir / "volumes" / CSI_DIR / pv / "mount"
                assert str(target) in mounts_below(pod_dir)
                assert json.loads((target.parent / "vol_data.json").read_text())["driverName"] == (
                    driver.name
                )
                staged = list((root / "plugins" / "kubernetes.io" / "csi" / driver.name).iterdir())
                assert len(staged) == 1 and (staged[0] / "globalmount").is_dir()

                control_plane.kubectl("delete", "pod", "web-0", "-n", node.namespace)
                second = await web_started(node, control_plane, driver, 2)
                assert log_lines(driver)[1] == f"{second} saw {first}"
                await until(
                    "the first pod's mounts gone", lambda: not mounts_below(pod_dir), within=30
                )

                ns = ("-n", node.namespace)
                control_plane.kubectl("scale", "statefulset", "web", "--replicas=0", *ns)
                await until(
                    "no pods", lambda: not pods_in(control_plane, node.namespace), within=60
                )
                await until(
                    "the volume unstaged",
                    lambda: not mounts_inside(root),
                    within=30,
                    explain=lambda: mounts_inside(root),
                )
                control_plane.kubectl("scale", "statefulset", "web", "--replicas=1", *ns)
                third = await web_started(node, control_plane, driver, 3)
                assert log_lines(driver)[2] == f"{third} saw {first}"

                # online expansion: 1Gi -> 2Gi while web-0 runs
                control_plane.kubectl(
                    "patch",
                    "pvc",
                    "data-web-0",
                    *ns,
                    "--type=merge",
                    "-p",
                    '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}',
                )
                await until(
                    "the claim's status at 2Gi",
                    lambda: (
                        claim_of(control_plane, node.namespace, "data-web-0")
                        .get("status", {})
                        .get("capacity", {})
                        .get("storage")
                        == "2Gi"
                    ),
                    within=150,
                    every=1,
                    explain=lambda: (
                        claim_of(control_plane, node.namespace, "data-web-0").get("status"),
                        node.log_tail(2000),
                        driver.logs(),
                    ),
                )
                status = claim_of(control_plane, node.namespace, "data-web-0")["status"]
                assert "storage" not in (status.get("allocatedResourceStatuses") or {})

                await usage_reported(control_plane, node, "web-0", "data-web-0")
                assert "Traceback" not in node.log_text(), node.log_tail()

                control_plane.kubectl("delete", "statefulset", "web", *ns)
                await until(
                    "no pods", lambda: not pods_in(control_plane, node.namespace), within=60
                )
                await until("nothing mounted", lambda: not mounts_inside(root), within=30)


async def registered(control_plane: ControlPlane, node: AgentNode, driver: Driver) -> list[Any]:
    found: list[Any] = await until(
        "the driver on the CSINode",
        lambda: (
            (api_get(control_plane, f"/apis/storage.k8s.io/v1/csinodes/{node.name}") or {})
            .get("spec", {})
            .get("drivers")
        ),
        within=30,
        explain=lambda: (node.log_tail(), driver.logs()),
    )
    return found


def inline_pod(name: str, namespace: str, node: str, driver: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"fsGroup": 4321},
            "volumes": [
                {"name": "scratch", "csi": {"driver": driver, "volumeAttributes": {"size": "8Mi"}}}
            ],
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": [
                        "sh",
                        "-c",
                        "echo hi > /scratch/f && stat -c 'group %g' /scratch && sleep 3600",
                    ],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                }
            ],
        },
    }


async def test_an_inline_csi_volume_after_registration_and_a_kill_mid_publish(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            ns = node.namespace
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=ns,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
                sidecars=(),
            ) as driver:
                [entry] = await registered(control_plane, node, driver)
                assert (entry["name"], entry["nodeID"]) == (driver.name, node.name)
                [key] = entry["topologyKeys"]
                meta = api_get(control_plane, f"/api/v1/nodes/{node.name}")["metadata"]
                assert meta["labels"][key] == node.name
                node_ids = json.loads(meta["annotations"]["csi.volume.kubernetes.io/nodeid"])
                assert node_ids == {driver.name: node.name}

                apply(control_plane, inline_pod("inline", ns, node.name, driver.name))
                uid = await until(
                    "inline Running",
                    lambda: running_uid(control_plane, ns, "inline"),
                    within=90,
                    every=0.5,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                target = root / "pods" / uid / "volumes" / CSI_DIR / "scratch" / "mount"
                assert str(target) in mounts_below(root / "pods" / uid)
                logs = tmp_path / "pods" / f"{ns}_inline_{uid}" / "app" / "0.log"
                await until(
                    "the app's output",
                    lambda: logs.exists() and "group" in logs.read_text(),
                    within=30,
                )
                assert "group 4321" in logs.read_text()  # fsGroupPolicy: File

                # killed while NodePublishVolume hangs in the frozen driver; the pod is deleted
                driver.freeze()
                apply(control_plane, inline_pod("stuck", ns, node.name, driver.name))
                stuck = next(
                    p for p in pods_in(control_plane, ns) if p["metadata"]["name"] == "stuck"
                )
                stuck_dir = root / "pods" / stuck["metadata"]["uid"]
                await until(
                    "NodePublishVolume under way",
                    (stuck_dir / "volumes" / CSI_DIR / "scratch" / "vol_data.json").exists,
                    within=60,
                    every=0.2,
                    explain=node.log_tail,
                )
                node.kill()
                control_plane.kubectl(
                    "delete", "pod", "stuck", "-n", ns, "--grace-period=0", "--force"
                )
                driver.thaw()  # it may finish the publish the agent gave up on
                node.start()
                await until(
                    "the stuck pod's directory and mounts gone",
                    lambda: not stuck_dir.exists(),
                    within=60,
                    every=0.5,
                    explain=lambda: (mounts_below(root), node.log_tail()),
                )
                assert running_uid(control_plane, ns, "inline") == uid
                control_plane.kubectl("delete", "pod", "inline", "-n", ns)
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60)
                await until(
                    "nothing mounted",
                    lambda: not mounts_inside(root),
                    within=30,
                    explain=lambda: mounts_inside(root),
                )
                assert "Traceback" not in node.log_text(), node.log_tail()


def claim(namespace: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def user(name: str, namespace: str, node: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", "echo $HOSTNAME >> /data/seen; sleep 3600"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
        },
    }


async def test_agent_killed_mid_stage_and_mid_publish_leaves_no_mount_after_restart(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            ns = node.namespace
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=ns,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
                sidecars=("csi-provisioner",),
                binding="Immediate",
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
                )
                apply(control_plane, claim(ns, driver.storage_class))
                await until(
                    "the claim bound",
                    lambda: (
                        claim_of(control_plane, ns, "data").get("status", {}).get("phase")
                        == "Bound"
                    ),
                    within=60,
                    explain=driver.logs,
                )
                staging = root / "plugins" / "kubernetes.io" / "csi" / driver.name

                # 1. killed while NodeStageVolume hangs in the (frozen) driver
                driver.freeze()
                apply(control_plane, user("first", ns, node.name))
                await until(
                    "NodeStageVolume under way",
                    lambda: any(staging.glob("*/vol_data.json")) if staging.exists() else False,
                    within=120,
                    every=0.2,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                node.kill()
                driver.thaw()
                node.start()
                await until(
                    "first Running after the restart",
                    lambda: running_uid(control_plane, ns, "first"),
                    within=120,
                    every=0.5,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )

                # 2. killed while NodePublishVolume of a second pod on the same volume hangs
                driver.freeze()
                apply(control_plane, user("second", ns, node.name))
                second = next(
                    p for p in pods_in(control_plane, ns) if p["metadata"]["name"] == "second"
                )
                second_dir = root / "pods" / second["metadata"]["uid"] / "volumes" / CSI_DIR
                await until(
                    "NodePublishVolume under way",
                    lambda: (
                        any(second_dir.glob("*/vol_data.json")) if second_dir.exists() else False
                    ),
                    within=60,
                    every=0.2,
                    explain=node.log_tail,
                )
                node.kill()
                control_plane.kubectl(
                    "delete", "pod", "second", "-n", ns, "--grace-period=0", "--force"
                )
                driver.thaw()  # the driver may finish the publish the agent gave up on
                node.start()
                await until(
                    "the second pod's directory and mounts gone",
                    lambda: not (root / "pods" / second["metadata"]["uid"]).exists(),
                    within=60,
                    every=0.5,
                    explain=lambda: (mounts_below(root), node.log_tail()),
                )
                assert running_uid(control_plane, ns, "first")

                control_plane.kubectl("delete", "pod", "first", "-n", ns)
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60)
                await until(
                    "nothing mounted or staged",
                    lambda: not mounts_inside(root) and not any(staging.glob("*")),
                    within=30,
                    explain=lambda: (mounts_below(root), list(staging.glob("*"))),
                )
                assert "Traceback" not in node.log_text(), node.log_tail()


async def test_a_generic_ephemeral_volume_is_provisioned_for_its_pod_and_goes_with_it(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            ns = node.namespace
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=ns,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
                sidecars=("csi-provisioner",),
            ) as driver:
                await registered(control_plane, node, driver)
                pod = user("scratchy", ns, node.name)
                pod["spec"].pop("nodeName")  # WaitForFirstConsumer: the scheduler binds it
                pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node.name}
                pod["spec"]["volumes"] = [
                    {
                        "name": "data",
                        "ephemeral": {
                            "volumeClaimTemplate": {
                                "spec": {
                                    "accessModes": ["ReadWriteOnce"],
                                    "storageClassName": driver.storage_class,
                                    "resources": {"requests": {"storage": "1Gi"}},
                                }
                            }
                        },
                    }
                ]
                apply(control_plane, pod)
                uid = await until(
                    "scratchy Running",
                    lambda: running_uid(control_plane, ns, "scratchy"),
                    within=120,
                    every=0.5,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                made = claim_of(control_plane, ns, "scratchy-data")
                assert made["metadata"]["ownerReferences"][0]["uid"] == uid
                pv = made["spec"]["volumeName"]
                target = root / "pods" / uid / "volumes" / CSI_DIR / pv / "mount"
                assert str(target) in mounts_below(root)
                control_plane.kubectl("delete", "pod", "scratchy", "-n", ns)
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60)
                await until(
                    "nothing mounted",
                    lambda: not mounts_inside(root),
                    within=30,
                    explain=lambda: mounts_inside(root),
                )


async def test_a_driver_that_needs_attach_is_mounted_once_its_volume_attachment_is(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path, root: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
            ns = node.namespace
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            with hostpath_driver(
                control_plane,
                node=node.name,
                namespace=ns,
                root_dir=root,
                log_dir=tmp_path / "csi-logs",
                sidecars=("csi-provisioner", "csi-attacher"),
                binding="Immediate",
                attach=True,
            ) as driver:
                await registered(control_plane, node, driver)
                apply(control_plane, claim(ns, driver.storage_class))
                apply(control_plane, user("attached", ns, node.name))
                await until(
                    "attached Running",
                    lambda: running_uid(control_plane, ns, "attached"),
                    within=120,
                    every=0.5,
                    explain=lambda: (node.log_tail(), driver.logs()),
                )
                pv = claim_of(control_plane, ns, "data")["spec"]["volumeName"]
                handle = api_get(control_plane, f"/api/v1/persistentvolumes/{pv}")["spec"]["csi"][
                    "volumeHandle"
                ]
                attachments = api_get(control_plane, "/apis/storage.k8s.io/v1/volumeattachments")
                mine = [
                    va
                    for va in attachments["items"]
                    if va["spec"]["source"].get("persistentVolumeName") == pv
                ]
                assert [va["status"]["attached"] for va in mine] == [True]
                unique = f"kubernetes.io/csi/{driver.name}^{handle}"
                await until(
                    "the volume in the node's volumesInUse",
                    lambda: (
                        unique
                        in (
                            api_get(control_plane, f"/api/v1/nodes/{node.name}")["status"].get(
                                "volumesInUse"
                            )
                            or []
                        )
                    ),
                    within=30,
                )
                control_plane.kubectl("delete", "pod", "attached", "-n", ns)
                await until("no pods", lambda: not pods_in(control_plane, ns), within=60)
                await until(
                    "nothing mounted and the volume no longer in use",
                    lambda: (
                        not mounts_inside(root)
                        and unique
                        not in (
                            api_get(control_plane, f"/api/v1/nodes/{node.name}")["status"].get(
                                "volumesInUse"
                            )
                            or []
                        )
                    ),
                    within=60,
                    explain=lambda: mounts_inside(root),
                )

"""The CSI hostpath driver deployed as ``make up`` deploys it (``harness.csi_hostpath``: a pod
of the plugin, its registrar and liveness probe, the real external-attacher, -provisioner and
-resizer, the ``CSIDriver`` with ``attachRequired`` and the default StorageClass), on a real
``nodeagent run`` node with containerd and the kernel's mounts.

What a user of ``make up``'s cluster does: a StatefulSet whose claim template names no
StorageClass. The default class's driver provisions the volume on this node, the attacher
attaches it, the agent stages and publishes it into the pod (the plugin's own container
mounts it, with ``Bidirectional`` propagation of the root dir); the pod writes, is deleted and
recreated, and the new pod reads what the first wrote; scaled to 0 (the volume unstaged and
detached) and back to 1, it reads it again; the claim is expanded online. Once the
StatefulSet and its claims are deleted, nothing is left mounted below the root dir but the
plugin's own container volumes, and the provisioner deletes the volume.

The same StatefulSet with a claim of ``volumeMode: Block``: the driver makes a loop device, the
container sees it as ``/dev/xvda`` (``volumeDevices``) and writes to it; its successor reads
what the first wrote; nothing is mounted in the pod; once the app is gone the agent has
unpublished and unstaged it and removed its links and records.

The agent killed (SIGKILL) in the middle of a NodePublishVolume, with the driver in its pod on
the same node: once the agent is back, the driver's containers are the same, the plugin is
registered again, and nothing of the abandoned publish is left mounted. (A kill in the middle
of NodeStageVolume is test_csi_volumes' test, with a driver on the host whose stage needs no
attach: here the attacher calls the same frozen plugin first.)
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import AgentNode, agent_node, api_get, pods_in, wait_ready
from harness import csi_hostpath as driver_objects
from harness.controlplane import ControlPlane
from harness.fixtures_csi import CSIHostpath, Deployed
from harness.fixtures_runtime import RuntimeEnv
from podnode import until
from test_csi_volumes import user
from test_persistent_volumes import running_uid, statefulset
from test_pod_api_access import container_pid
from test_volumes import mounts_below, no_mounts_left

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("removes_pulled_images")]

CSI_DIR = "kubernetes.io~csi"


@pytest.fixture
def root() -> Iterator[Path]:
    """A short root dir: the registrar's socket in ``<root>/plugins_registry`` must fit in
    ``sun_path``. Whatever a failing test leaves mounted below it is unmounted."""
    path = Path(tempfile.mkdtemp(prefix="na-root-"))
    with no_mounts_left(path):
        yield path
    shutil.rmtree(path, ignore_errors=True)


def apply(control_plane: ControlPlane, obj: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


def default_class_statefulset(namespace: str) -> dict[str, Any]:
    """``web`` with a claim template that names no StorageClass (the default one applies)."""
    obj = statefulset("web", namespace, "unused", 1)
    del obj["spec"]["volumeClaimTemplates"][0]["spec"]["storageClassName"]
    return obj


def claim_of(control_plane: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    return api_get(control_plane, f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}") or {}


def log_lines(data_dir: Path) -> list[str]:
    found = [p for p in data_dir.rglob("log") if p.is_file()]
    return found[0].read_text().splitlines() if found else []


def app_mounts(root: Path, plugin_uid: str) -> list[str]:
    """Mounts below the root dir other than the root's own and the plugin pod's volumes."""
    base = str(root.resolve())
    plugin_pod = str((root / "pods" / plugin_uid).resolve())
    return [
        p
        for p in mounts_below(root)
        if p not in (base, plugin_pod) and not p.startswith(plugin_pod + "/")
    ]


def attachments(control_plane: ControlPlane, pv: str) -> list[dict[str, Any]]:
    listing = api_get(control_plane, "/apis/storage.k8s.io/v1/volumeattachments") or {}
    return [
        a for a in listing.get("items", []) if a["spec"]["source"].get("persistentVolumeName") == pv
    ]


def volumes_of_default_class(control_plane: ControlPlane) -> list[str]:
    listing = api_get(control_plane, "/api/v1/persistentvolumes") or {}
    return [
        pv["metadata"]["name"]
        for pv in listing.get("items", [])
        if pv["spec"].get("storageClassName") == driver_objects.STORAGE_CLASS
    ]


async def web_started(
    node: AgentNode, control_plane: ControlPlane, driver: CSIHostpath, d: Deployed, count: int
) -> str:
    uid = await until(
        "web-0 Running",
        lambda: running_uid(control_plane, node.namespace, "web-0"),
        within=180,
        every=0.5,
        explain=lambda: (node.log_tail(2000), driver.explain(d)),
    )
    await until(f"{count} starts logged", lambda: len(log_lines(d.data_dir)) >= count, within=30)
    return str(uid)


def delete_app(control_plane: ControlPlane, ns: str, *pods: str) -> None:
    """The StatefulSet ``web``, the given pods and every claim, without waiting."""
    kubectl = control_plane.kubectl
    kubectl("delete", "statefulset", "web", "-n", ns, "--wait=false", check=False)
    for pod in pods:
        kubectl("delete", "pod", pod, "-n", ns, "--ignore-not-found", "--wait=false", check=False)
    kubectl("delete", "pvc", "--all", "-n", ns, "--wait=false", check=False)


async def app_gone(
    control_plane: ControlPlane,
    csi_hostpath: CSIHostpath,
    deployed: Deployed,
    plugin_uid: str,
    pv: str,
) -> None:
    """Once the app and its claim were deleted while the driver still runs: the agent has
    unpublished and unstaged, the attacher detached, the provisioner deleted the volume."""
    ns, root = deployed.namespace, deployed.root_dir
    await until(
        "only the driver's pod left",
        lambda: [p["metadata"]["name"] for p in pods_in(control_plane, ns)] == [deployed.pod],
        within=90,
    )
    await until(
        "nothing of the app mounted or staged",
        lambda: not app_mounts(root, plugin_uid),
        within=60,
        explain=lambda: mounts_below(root),
    )
    await until(
        "the volume deleted by the provisioner",
        lambda: not volumes_of_default_class(control_plane),
        within=90,
        explain=lambda: csi_hostpath.explain(deployed),
    )
    assert not attachments(control_plane, pv)


async def driver_on(
    control_plane: ControlPlane, node: AgentNode, csi_hostpath: CSIHostpath
) -> tuple[Deployed, str]:
    """Start the node, wait for it Ready, deploy make up's driver on it; the deployment and
    the driver pod's uid."""
    node.start()
    await wait_ready(control_plane, node, status="True", within=90)
    deployed = await csi_hostpath.deploy(node)
    plugin_uid = running_uid(control_plane, node.namespace, deployed.pod)
    assert plugin_uid is not None
    return deployed, plugin_uid


async def test_make_ups_driver_keeps_a_statefulsets_data_and_grows_its_claim_online(
    control_plane: ControlPlane,
    containerd: RuntimeEnv,
    csi_hostpath: CSIHostpath,
    tmp_path: Path,
    root: Path,
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
        ns = ("-n", node.namespace)
        deployed, plugin_uid = await driver_on(control_plane, node, csi_hostpath)
        try:
            apply(control_plane, default_class_statefulset(node.namespace))
            first = await web_started(node, control_plane, csi_hostpath, deployed, 1)
            assert log_lines(deployed.data_dir) == [f"{first} saw {first}"]

            claim = claim_of(control_plane, node.namespace, "data-web-0")
            assert claim["spec"]["storageClassName"] == driver_objects.STORAGE_CLASS
            pv = claim["spec"]["volumeName"]
            volume = api_get(control_plane, f"/api/v1/persistentvolumes/{pv}")
            assert volume["spec"]["csi"]["driver"] == driver_objects.DRIVER
            [attachment] = attachments(control_plane, pv)
            assert attachment["spec"]["nodeName"] == node.name
            assert attachment["status"]["attached"] is True
            target = root / "pods" / first / "volumes" / CSI_DIR / pv / "mount"
            assert str(target) in mounts_below(root)

            control_plane.kubectl("delete", "pod", "web-0", *ns)
            second = await web_started(node, control_plane, csi_hostpath, deployed, 2)
            assert second != first
            assert log_lines(deployed.data_dir)[1] == f"{second} saw {first}"
            await until(
                "the first pod's mounts gone",
                lambda: not mounts_below(root / "pods" / first),
                within=30,
            )

            control_plane.kubectl("scale", "statefulset", "web", "--replicas=0", *ns)
            await until(
                "web-0 gone, its volume unstaged and detached",
                lambda: (
                    not running_uid(control_plane, node.namespace, "web-0")
                    and not app_mounts(root, plugin_uid)
                    and not attachments(control_plane, pv)
                ),
                within=120,
                every=1,
                explain=lambda: (mounts_below(root), attachments(control_plane, pv)),
            )
            control_plane.kubectl("scale", "statefulset", "web", "--replicas=1", *ns)
            third = await web_started(node, control_plane, csi_hostpath, deployed, 3)
            assert log_lines(deployed.data_dir)[2] == f"{third} saw {first}"

            control_plane.kubectl(
                "patch", "pvc", "data-web-0", *ns, "--type=merge",
                "-p", '{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}',
            )  # fmt: skip
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
                    csi_hostpath.explain(deployed),
                ),
            )
            assert running_uid(control_plane, node.namespace, "web-0") == third
            assert "Traceback" not in node.log_text(), node.log_tail()
        finally:
            delete_app(control_plane, node.namespace)
        await app_gone(control_plane, csi_hostpath, deployed, plugin_uid, pv)


def containers_of(control_plane: ControlPlane, ns: str, name: str) -> dict[str, tuple[str, int]]:
    """Each container of the pod: (container ID, restart count)."""
    pod = api_get(control_plane, f"/api/v1/namespaces/{ns}/pods/{name}") or {}
    return {
        s["name"]: (s.get("containerID", ""), s.get("restartCount", 0))
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    }


def claim_user(name: str, namespace: str, node: str, claim: str) -> dict[str, Any]:
    """test_csi_volumes' bare pod on ``node``, mounting ``claim``."""
    pod = user(name, namespace, node)
    pod["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] = claim
    return pod


async def test_agent_killed_mid_publish_beside_make_ups_driver_leaves_no_mount_after_restart(
    control_plane: ControlPlane,
    containerd: RuntimeEnv,
    csi_hostpath: CSIHostpath,
    tmp_path: Path,
    root: Path,
) -> None:
    """The driver runs in a pod on the node it serves: the agent is killed (SIGKILL) while
    NodePublishVolume of a second user of web-0's volume hangs in the plugin (SIGSTOP), the
    second pod is force-deleted while no agent runs, and the agent starts again. Then the
    driver's pod keeps its containers (no restart), the agent registers the plugin again
    through its registrar's socket, removes the second pod's directory and whatever the thawed
    plugin mounted there, and web-0 keeps running on the volume; deleting the app unpublishes,
    unstages and detaches it as before."""
    async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
        ns = node.namespace
        deployed, plugin_uid = await driver_on(control_plane, node, csi_hostpath)
        driver_containers = containers_of(control_plane, ns, deployed.pod)
        plugin_id = driver_containers["hostpath"][0].removeprefix("containerd://")
        plugin_pid = await container_pid(containerd.endpoint, plugin_id)
        try:
            apply(control_plane, default_class_statefulset(ns))
            web = await web_started(node, control_plane, csi_hostpath, deployed, 1)
            pv = claim_of(control_plane, ns, "data-web-0")["spec"]["volumeName"]

            os.kill(plugin_pid, signal.SIGSTOP)  # every CSI call hangs from here
            try:
                apply(control_plane, claim_user("second", ns, node.name, "data-web-0"))
                second = await until(
                    "the second pod created",
                    lambda: next(
                        (
                            p
                            for p in pods_in(control_plane, ns)
                            if p["metadata"]["name"] == "second"
                        ),
                        None,
                    ),
                    within=10,
                )
                second_dir = root / "pods" / second["metadata"]["uid"]
                volume_dir = second_dir / "volumes" / CSI_DIR / pv
                await until(
                    "NodePublishVolume under way",
                    (volume_dir / "vol_data.json").exists,
                    within=60,
                    every=0.2,
                    explain=node.log_tail,
                )
                node.kill()
                control_plane.kubectl(
                    "delete", "pod", "second", "-n", ns, "--grace-period=0", "--force"
                )
            finally:
                os.kill(plugin_pid, signal.SIGCONT)  # it may finish the publish nobody wants
            node.start()
            await until(
                "the second pod's directory and mounts gone",
                lambda: not second_dir.exists(),
                within=90,
                every=0.5,
                explain=lambda: (mounts_below(root), node.log_tail(2000)),
            )
            assert running_uid(control_plane, ns, "web-0") == web
            assert containers_of(control_plane, ns, deployed.pod) == driver_containers
            [staged] = list(
                (root / "plugins" / "kubernetes.io" / "csi" / driver_objects.DRIVER).glob(
                    "*/globalmount"
                )
            )
            published = root / "pods" / web / "volumes" / CSI_DIR / pv / "mount"
            volume_mounts = [
                m for m in app_mounts(root, plugin_uid) if "kubernetes.io~csi" in m or "/csi/" in m
            ]  # web-0's service-account token is a mount of its own
            assert sorted(volume_mounts) == sorted([str(staged), str(published)])
            assert "Traceback" not in node.log_text(), node.log_tail()
        finally:
            delete_app(control_plane, ns, "second")
        await app_gone(control_plane, csi_hostpath, deployed, plugin_uid, pv)


# What the block volume held, then this pod's line in its first 512 bytes (one write of the
# whole line into the pipe: dd's conv=sync pads every read it gets to a block).
BLOCK_WRITER = (
    "prev=$(head -c 512 /dev/xvda | tr -d '\\000'); "
    'line="$POD_UID saw ${prev:-nothing}"; '
    'printf %s "$line" | dd of=/dev/xvda bs=512 conv=notrunc,sync 2>/dev/null; '
    "sleep 3600"
)


def block_statefulset(namespace: str) -> dict[str, Any]:
    """``web`` with a Block claim of the default class, mapped at ``/dev/xvda``."""
    obj = default_class_statefulset(namespace)
    (app,) = obj["spec"]["template"]["spec"]["containers"]
    app["command"] = ["sh", "-c", BLOCK_WRITER]
    del app["volumeMounts"]
    app["volumeDevices"] = [{"name": "data", "devicePath": "/dev/xvda"}]
    template = obj["spec"]["volumeClaimTemplates"][0]["spec"]
    template["volumeMode"] = "Block"
    template["resources"]["requests"]["storage"] = "64Mi"
    return obj


def device_line(device: Path) -> str:
    """The text in the first 512 bytes of the block device published at ``device`` (read
    from the node, as root), "" while it cannot be read."""
    try:
        with device.open("rb") as f:
            return f.read(512).rstrip(b"\0").decode(errors="replace")
    except OSError:
        return ""


async def test_make_ups_driver_maps_a_block_claim_that_keeps_its_data(
    control_plane: ControlPlane,
    containerd: RuntimeEnv,
    csi_hostpath: CSIHostpath,
    tmp_path: Path,
    root: Path,
) -> None:
    async with agent_node(control_plane, tmp_path, containerd.endpoint, root_dir=root) as node:
        ns = node.namespace
        deployed, plugin_uid = await driver_on(control_plane, node, csi_hostpath)
        devices = root / "plugins" / "kubernetes.io" / "csi" / "volumeDevices"
        try:
            apply(control_plane, block_statefulset(ns))
            first = await until(
                "web-0 Running",
                lambda: running_uid(control_plane, ns, "web-0"),
                within=180,
                every=0.5,
                explain=lambda: (node.log_tail(2000), csi_hostpath.explain(deployed)),
            )
            pv = claim_of(control_plane, ns, "data-web-0")["spec"]["volumeName"]
            link = root / "pods" / str(first) / "volumeDevices" / CSI_DIR / pv
            published = devices / "publish" / pv / str(first)
            assert os.readlink(link) == str(published)
            line = await until(
                "web-0's line on the device", lambda: device_line(published), within=30
            )
            assert line == f"{first} saw nothing"
            assert (devices / "staging" / pv).is_dir()
            pod_dir = str((root / "pods" / str(first)).resolve())
            in_pod = [m for m in app_mounts(root, plugin_uid) if m.startswith(pod_dir)]
            assert not [m for m in in_pod if CSI_DIR in m], in_pod  # mapped, not mounted

            control_plane.kubectl("delete", "pod", "web-0", "-n", ns)
            second = await until(
                "web-0 Running again",
                lambda: (uid := running_uid(control_plane, ns, "web-0")) != first and uid,
                within=180,
                every=0.5,
                explain=lambda: (node.log_tail(2000), csi_hostpath.explain(deployed)),
            )
            line = await until(
                "the new web-0's line on the device",
                lambda: (
                    (got := device_line(devices / "publish" / pv / str(second))).startswith(
                        str(second)
                    )
                    and got
                ),
                within=30,
            )
            assert line == f"{second} saw {first} saw nothing"
            await until("the first pod's link gone", lambda: not os.path.lexists(link), within=30)
            assert "Traceback" not in node.log_text(), node.log_tail()
        finally:
            delete_app(control_plane, ns)
        await app_gone(control_plane, csi_hostpath, deployed, plugin_uid, pv)
        left = {p.relative_to(devices) for p in devices.rglob("*")} if devices.exists() else set()
        assert left <= {Path("staging"), Path("publish")}, left

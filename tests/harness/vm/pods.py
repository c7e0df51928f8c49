"""Running pods in the guest: images the test provides, and the guest joined as a Ready node.

The guest reaches no registry (its network only forwards the apiserver), so every image a pod
uses comes from the host: the harness builds busybox and pause locally (``harness.images``), and
:func:`load_images` copies each tarball in and imports it into the guest containerd's ``k8s.io``
namespace, the one the CRI plugin serves. The pause image is also tagged as the guest
containerd's ``sandbox_image`` (Debian's containerd 1.6 has ``registry.k8s.io/pause:3.6``), since
that is the name containerd itself asks for when it starts a sandbox.

Pods then use ``BUSYBOX_IMAGE`` (``localhost/busybox:latest``) with ``imagePullPolicy: Never``
(or ``IfNotPresent``): a pull would go nowhere.

:func:`join_node` joins the guest's agent to the host's control plane with `nodeagent join`
(:mod:`harness.vm.join`) and waits until the Node is Ready; :func:`wait_pod` polls a pod
from the host's apiserver, as a user would with ``kubectl get pod -w``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from harness.controlplane import ControlPlane
from harness.images import BUSYBOX_IMAGE, PAUSE_IMAGE, BuiltImage, build_images
from harness.vm.guest import GUEST_DIR, provision
from harness.vm.join import join_guest, joined, route_apiserver
from harness.vm.machine import Machine
from harness.vm.rootfs import HOSTNAME

NODE = HOSTNAME
IMAGES_DIR = f"{GUEST_DIR}/images"
CTR = ("ctr", "--namespace", "k8s.io")
# What Debian 12's containerd asks for when `sandbox_image` is not configured.
DEFAULT_SANDBOX_IMAGE = "registry.k8s.io/pause:3.6"

__all__ = [
    "BUSYBOX_IMAGE",
    "NODE",
    "PAUSE_IMAGE",
    "guest_images",
    "join_node",
    "load_images",
    "node_ready",
    "pod_manifest",
    "sandbox_image",
    "wait_pod",
]


def sandbox_image(vm: Machine) -> str:
    """The pause image the guest's containerd starts sandboxes from (its ``sandbox_image``)."""
    out = vm.check("containerd config dump", timeout=60)
    for line in out.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key.strip() == "sandbox_image":
            return value.strip().strip('"')
    return DEFAULT_SANDBOX_IMAGE


def guest_images(vm: Machine) -> set[str]:
    """Image names in the guest containerd's ``k8s.io`` namespace."""
    out = vm.check([*CTR, "images", "list", "--quiet"], timeout=60)
    return {line.strip() for line in out.splitlines() if line.strip()}


def load_images(vm: Machine, images: Mapping[str, BuiltImage] | None = None) -> dict[str, str]:
    """Import the locally built images (default: every recipe) into the guest's containerd.

    Idempotent: an image whose every name is already in the guest is not copied again. Returns
    recipe -> the name pods should use. Each tarball is imported with ``--all-platforms`` off and
    unpacked for the CRI's snapshotter (``overlayfs``), so the first container starts at once.
    """
    built = dict(images) if images is not None else build_images()
    have = guest_images(vm)
    sandbox = sandbox_image(vm)
    names: dict[str, str] = {}
    for recipe, image in built.items():
        wanted = set(image.names) | ({sandbox} if recipe == "pause" else set())
        names[recipe] = image.name
        if wanted <= have:
            continue
        target = f"{IMAGES_DIR}/{recipe}.tar"
        vm.put(target, image.tarball.read_bytes())
        vm.check([*CTR, "images", "import", "--snapshotter", "overlayfs", target], timeout=180)
        for extra in sorted(wanted - set(image.names)):
            vm.check([*CTR, "images", "tag", "--force", image.name, extra], timeout=60)
        vm.check(["rm", "-f", target])
    missing = {n for image in built.values() for n in image.names} - guest_images(vm)
    if missing:
        raise AssertionError(f"images not in the guest's containerd after import: {missing}")
    return names


def _get(control_plane: ControlPlane, *args: str) -> dict[str, Any] | None:
    done = control_plane.kubectl("get", *args, "-o", "json", check=False)
    return json.loads(done.stdout) if done.returncode == 0 else None


def node_ready(control_plane: ControlPlane, node: str = NODE) -> bool:
    obj = _get(control_plane, "node", node)
    if obj is None:
        return False
    conditions = obj.get("status", {}).get("conditions", [])
    return {c["type"]: c["status"] for c in conditions}.get("Ready") == "True"


def _same_settings(vm: Machine, extra: Iterable[str]) -> bool:
    """The extra provisioning arguments are in effect already."""
    defaults = vm.run("cat /etc/default/nodeagent").stdout
    return all(arg in defaults for arg in extra)


def join_node(
    vm: Machine,
    deb: Path,
    control_plane: ControlPlane,
    *provision_args: str,
    node: str = NODE,
    ready_timeout: float = 90,
) -> str:
    """The guest's agent joined to ``control_plane`` as ``node`` and Ready, images loaded.

    The node joins with `nodeagent join` and the printed join command (``harness.vm.join``).
    ``provision_args`` go to ``provision.sh`` as they are (``--config FILE``, ``--extra-args``):
    a node that has joined already keeps its identity and is only re-provisioned with them,
    as an operator changes a joined node's settings; when the guest already runs that way and
    the Node is Ready nothing is redone, so a module of tests pays for the join once. Returns
    the node name.
    """
    load_images(vm)
    route_apiserver(vm, control_plane)  # gone after a guest reboot
    extra = [a for a in provision_args if not a.startswith("--")]
    is_joined = joined(vm) and node_ready(control_plane, node)
    if not (is_joined and _same_settings(vm, extra)):
        vm.check("rm -f /etc/systemd/system/nodeagent.service.d/test-*.conf")
        if is_joined:
            provision(vm, deb, *provision_args)
        else:
            join_guest(vm, deb, control_plane, *provision_args, node=node)
    deadline = time.monotonic() + ready_timeout
    while not node_ready(control_plane, node):
        if time.monotonic() > deadline:
            journal = vm.run("journalctl -u nodeagent --no-pager -n 30").stdout
            raise AssertionError(
                f"node {node} not Ready {ready_timeout:.0f}s after provisioning:\n{journal}"
            )
        time.sleep(1)
    return node


def pod_manifest(
    name: str,
    *,
    command: list[str] | None = None,
    node: str = NODE,
    namespace: str = "default",
    resources: Mapping[str, Any] | None = None,
    restart_policy: str = "Never",
    grace: int = 5,
    spec: Mapping[str, Any] | None = None,
    container: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A busybox pod bound to the guest's node, using the imported image (never pulled)."""
    app: dict[str, Any] = {
        "name": "app",
        "image": BUSYBOX_IMAGE,
        "imagePullPolicy": "Never",
        "command": command or ["sleep", "3600"],
    }
    if resources is not None:
        app["resources"] = dict(resources)
    app.update(container or {})
    pod_spec: dict[str, Any] = {
        "nodeName": node,
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace,
        "automountServiceAccountToken": False,
        "containers": [app],
    }
    pod_spec.update(spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": pod_spec,
    }


def wait_pod(
    control_plane: ControlPlane,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    namespace: str = "default",
    timeout: float = 90,
    what: str = "",
) -> dict[str, Any]:
    """Poll the pod from the host's apiserver until ``predicate(pod)`` holds; return the pod."""
    deadline = time.monotonic() + timeout
    pod: dict[str, Any] | None = None
    while True:
        pod = _get(control_plane, "-n", namespace, "pod", name)
        if pod is not None and predicate(pod):
            return pod
        if time.monotonic() > deadline:
            status = json.dumps((pod or {}).get("status"), indent=1)[-3000:]
            raise AssertionError(f"pod {namespace}/{name}: timed out waiting for {what}: {status}")
        time.sleep(1)

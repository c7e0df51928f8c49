"""Node-pressure eviction on the guest's node (2 GiB RAM), seen from the host's apiserver.

The module runs the guest's agent with eviction settings that make pressure quick to reach:
``memory.available<600Mi``, ``nodefs.available`` just below what is free when the module
starts, a 30 s ``evictionPressureTransitionPeriod`` and a 1 s ``imageMinimumGCAge``; the
packaged configuration is put back afterwards.

- memory: a BestEffort pod grows by 40 MB a second towards 1.2 GB; a higher-priority pod
  also runs. The hog is evicted with the kubelet's status (Failed, ``Evicted``, its message,
  ``DisruptionTarget`` ``TerminationByKubelet``) and ``Evicted`` Event; the Node's
  MemoryPressure turns True (``KubeletHasInsufficientMemory``) and back False after the
  transition period; the high-priority pod keeps running.
- disk: an unused image is in the guest's containerd; a pod writes past the nodefs threshold.
  The image is removed first (node-level reclaim), then the writer is evicted and the Node shows
  DiskPressure.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from harness.controlplane import ControlPlane
from harness.images.oci import Entry, ImageConfig, pack, write_layout
from harness.vm import Machine
from harness.vm.pods import guest_images, join_node, pod_manifest, wait_pod

pytestmark = pytest.mark.system

Mi = 2**20
CONFIG = "/etc/nodeagent/config.yaml"
SAVED = "/root/config.yaml.before-eviction-test"
TEST_CONFIG = "/root/config.yaml.eviction-test"
FILLER = "localhost/evict-filler:1"
HIGH = "evict-test-high"
TRANSITION_S = 30
# 40 MB more every second, each in a variable of its own: one string grown to 900 MB would
# double in a single realloc and swamp the guest faster than any agent can react
GROW = (
    "i=0; while [ $i -lt 30 ]; do "
    "eval \"v$i=\\$(head -c 40000000 /dev/zero | tr '\\\\0' h)\"; "
    "i=$((i+1)); sleep 1; done; sleep 3600"
)


def _apply(control_plane: ControlPlane, manifest: dict[str, Any]) -> None:
    control_plane.kubectl("apply", "-f", "-", input=yaml.safe_dump(manifest))


def _get(control_plane: ControlPlane, *args: str) -> dict[str, Any]:
    out = control_plane.kubectl("get", *args, "-o", "json").stdout
    result: dict[str, Any] = json.loads(out)
    return result


def _condition(control_plane: ControlPlane, node: str, kind: str) -> dict[str, Any]:
    conditions = _get(control_plane, "node", node)["status"]["conditions"]
    return next(c for c in conditions if c["type"] == kind)


def _wait(what: str, check: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(2)


def _free_bytes(vm: Machine) -> int:
    return int(vm.check("df -B1 --output=avail /var/lib/nodeagent | tail -1").strip())


def _filler_image(vm: Machine, tmp: Path) -> None:
    """A small image no pod uses, imported into the guest's containerd."""
    layout = tmp / "filler"
    write_layout(
        layout,
        entries=[Entry("filler", "file", mode=0o644, data=os.urandom(2 * Mi))],
        config=ImageConfig(cmd=("/filler",)),
        names=[FILLER],
    )
    tarball = tmp / "filler.tar"
    pack(layout, tarball)
    vm.put("/root/filler.tar", tarball.read_bytes())
    vm.check("ctr -n k8s.io images import --snapshotter overlayfs /root/filler.tar", timeout=180)
    vm.check("rm -f /root/filler.tar")


@pytest.fixture(scope="module")
def eviction_node(
    vm: Machine,
    nodeagent_deb: Path,
    control_plane: ControlPlane,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Any]]:
    node = join_node(vm, nodeagent_deb, control_plane)
    vm.check(f"cp {CONFIG} {SAVED}")
    config = yaml.safe_load(vm.check(f"cat {CONFIG}")) or {}
    free = _free_bytes(vm)
    nodefs = free - 300 * Mi
    kubelet = config.setdefault("kubelet", {})
    kubelet["evictionHard"] = {"memory.available": "600Mi", "nodefs.available": str(nodefs)}
    kubelet["evictionPressureTransitionPeriod"] = f"{TRANSITION_S}s"
    kubelet["imageMinimumGCAge"] = "1s"
    vm.put(TEST_CONFIG, yaml.safe_dump(config).encode())
    _filler_image(vm, tmp_path_factory.mktemp("filler"))
    _apply(
        control_plane,
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": HIGH},
            "value": 1_000_000,
        },
    )
    join_node(vm, nodeagent_deb, control_plane, "--config", TEST_CONFIG)
    try:
        yield {"node": node, "free": free, "nodefs_threshold": nodefs}
    finally:
        control_plane.kubectl(
            "delete", "pods", "--all", "-n", "default", "--grace-period=0", "--force",
            "--wait=false", check=False,
        )  # fmt: skip
        control_plane.kubectl("delete", "priorityclass", HIGH, check=False)
        vm.run(f"ctr -n k8s.io images rm {FILLER}")
        join_node(vm, nodeagent_deb, control_plane, "--config", SAVED)
        vm.run(f"rm -f {SAVED} {TEST_CONFIG}")


def _seconds(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _phase(pod: dict[str, Any]) -> str:
    return str(pod.get("status", {}).get("phase", ""))


def test_memory_pressure_evicts_the_hog_and_spares_the_high_priority_pod(
    vm: Machine, control_plane: ControlPlane, eviction_node: dict[str, Any]
) -> None:
    node = eviction_node["node"]
    word = secrets.token_hex(3)
    vip, hog = f"vip-{word}", f"hog-{word}"
    _apply(
        control_plane,
        pod_manifest(
            vip,
            command=["sh", "-c", 'x=$(head -c 30000000 /dev/zero | tr "\\0" v); sleep 3600'],
            spec={"priorityClassName": HIGH},
        ),
    )
    wait_pod(control_plane, vip, lambda p: _phase(p) == "Running", what="Running", timeout=180)
    assert _condition(control_plane, node, "MemoryPressure")["status"] == "False"
    _apply(
        control_plane,
        pod_manifest(
            hog,
            command=["sh", "-c", GROW],
        ),
    )
    pod = wait_pod(control_plane, hog, lambda p: _phase(p) == "Failed", what="evicted", timeout=300)
    status = pod["status"]
    assert status["reason"] == "Evicted", status
    message = status["message"]
    assert message.startswith(
        "The node was low on resource: memory. Threshold quantity: 600Mi, available: "
    ), message
    assert "Container app was using " in message
    assert message.endswith(", request is 0, has larger consumption of memory. "), message
    disruption = next(c for c in status["conditions"] if c["type"] == "DisruptionTarget")
    assert (disruption["status"], disruption["reason"]) == ("True", "TerminationByKubelet")
    assert disruption["message"] == message

    events = _get(
        control_plane,
        "events",
        "-n",
        "default",
        "--field-selector",
        f"involvedObject.name={hog},reason=Evicted",
    )["items"]
    assert [e["message"] for e in events] == [message], events
    assert events[0]["type"] == "Warning"

    pressure = _wait(
        "MemoryPressure True",
        lambda: (c := _condition(control_plane, node, "MemoryPressure"))["status"] == "True" and c,
        timeout=30,
    )
    assert pressure["reason"] == "KubeletHasInsufficientMemory"
    assert pressure["message"] == "kubelet has insufficient memory available"
    relieved = _wait(
        "MemoryPressure back to False",
        lambda: (c := _condition(control_plane, node, "MemoryPressure"))["status"] == "False" and c,
        timeout=TRANSITION_S + 90,
    )
    assert relieved["reason"] == "KubeletHasSufficientMemory"
    held = _seconds(relieved["lastTransitionTime"]) - _seconds(pressure["lastTransitionTime"])
    # held for the transition period after the last low reading (a few seconds of slack: the
    # True status went out while the guest was short of memory)
    assert held >= TRANSITION_S - 5, (pressure, relieved)
    assert _phase(_get(control_plane, "pod", vip)) == "Running"


def test_disk_pressure_removes_an_unused_image_then_evicts(
    vm: Machine, control_plane: ControlPlane, eviction_node: dict[str, Any]
) -> None:
    node = eviction_node["node"]
    assert FILLER in guest_images(vm)
    since = vm.check("date +%s").strip()
    writer = f"writer-{secrets.token_hex(3)}"
    _apply(
        control_plane,
        pod_manifest(
            writer,
            command=["sh", "-c", "dd if=/dev/zero of=/fill bs=1M count=600; sleep 3600"],
        ),
    )
    pod = wait_pod(
        control_plane, writer, lambda p: _phase(p) == "Failed", what="evicted", timeout=400
    )
    status = pod["status"]
    assert status["reason"] == "Evicted", status
    assert status["message"].startswith(
        "The node was low on resource: ephemeral-storage. Threshold quantity: "
    ), status["message"]
    assert FILLER not in guest_images(vm)
    journal = vm.check(f"journalctl -u nodeagent --no-pager -o cat --since @{since}")
    removed = journal.find("Removing image to free bytes")
    evicting = journal.find("Evicting pod")
    assert 0 <= removed < evicting, journal[-3000:]
    pressure = _wait(
        "DiskPressure True",
        lambda: (c := _condition(control_plane, node, "DiskPressure"))["status"] == "True" and c,
        timeout=30,
    )
    assert pressure["reason"] == "KubeletHasDiskPressure"
    # the writer's container is gone after eviction, so the space comes back (GC removes it)
    control_plane.kubectl("delete", "pod", writer, "--wait=true", "--timeout=120s")

"""Pod volumes on the real containerd and the real kernel, seen from inside busybox containers.

The pod managers run as ``agent.build`` wires them (``podnode.running_node``) with the
in-memory API: an emptyDir shared by two containers, ``medium: Memory`` as a sized tmpfs, a
hostPath file, ``fsGroup`` ownership, a subPath escape refused with the kubelet's message, a
pod waiting on a claim that does not exist (no Event, as the kubelet) and an unsupported
source (its ``FailedMount`` Event); after the pod is deleted its directory and
every mount are gone, and a directory a stopped agent left behind is cleaned up when the agent
starts again — also for the real ``nodeagent run`` process killed with SIGKILL mid-setup on
the real control plane.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agentproc import agent_node, api_get, pods_in, wait_ready
from harness.controlplane import ControlPlane
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import Node, phase, running_node, status_of, until

from nodeagent.apiserver import CONFIGMAPS, PODS, SECRETS
from nodeagent.clock import RealClock
from nodeagent.events import ObjectReference
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container
from nodeagent.volumemanager.mounter import parse_mountinfo

pytestmark = pytest.mark.integration

CRI_LINE = re.compile(r"^\S+ (stdout|stderr) [FP] (.*)$")


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str, str]] = []

    def record_for(self, ref: ObjectReference, type: str, reason: str, message: str) -> None:
        self.seen.append((ref.name, type, reason, message))


def mounts_below(path: Path) -> list[str]:
    base = str(path.resolve())
    points = parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    return [p for p in points if p == base or p.startswith(base + "/")]


def mounts_inside(root: Path) -> list[str]:
    """The mounts below the agent's root dir, the root's own one aside (the agent makes the
    root a shared mount of its own when it is not, as the kubelet does)."""
    base = str(root.resolve())
    return [p for p in mounts_below(root) if p != base]


@contextlib.contextmanager
def no_mounts_left(path: Path) -> Iterator[None]:
    """Whatever a failing test leaves mounted below ``path`` is unmounted at the end."""
    try:
        yield
    finally:
        for point in reversed(mounts_below(path)):
            subprocess.run(["umount", "-l", point], check=False)


def log_lines(node: Node, uid: str, pod: str, name: str) -> list[str]:
    path = Path(node.settings.pod_logs_dir) / f"default_{pod}_{uid}" / name / "0.log"
    if not path.exists():
        return []
    return [m.group(2) for line in path.read_text().splitlines() if (m := CRI_LINE.match(line))]


def delete(node: Node, name: str) -> None:
    def mark(obj: dict[str, Any]) -> None:  # what `kubectl delete pod` does
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = 1

    node.server.modify(PODS, name, mark, "default")


async def test_empty_dir_memory_host_path_and_fs_group_inside_the_containers(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    host_file = tmp_path / "host" / "greeting"
    host_file.parent.mkdir()
    host_file.write_text("hello from the host\n")
    reader = (
        "while [ ! -f /shared/msg ]; do sleep 0.1; done; cat /shared/msg; "
        "grep ' /mem ' /proc/mounts; cat /host/greeting; "
        "stat -c 'group %g' /shared; stat -c 'memgroup %g' /mem; cat /sub/note; sleep 3600"
    )
    writer = (
        "mkdir -p /shared/sub; echo via subPath > /shared/sub/note; "
        "echo written by writer > /shared/msg; sleep 3600"
    )
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path) as node:
            uid = node.create(
                "vols",
                grace=1,
                securityContext={"fsGroup": 2345},
                volumes=[
                    {"name": "shared", "emptyDir": {}},
                    {"name": "mem", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}},
                    {
                        "name": "host",
                        "hostPath": {"path": str(host_file.parent), "type": "Directory"},
                    },
                ],
                containers=[
                    container(
                        "writer",
                        image=BUSYBOX_IMAGE,
                        command=["sh", "-c", writer],
                        volumeMounts=[{"name": "shared", "mountPath": "/shared"}],
                    ),
                    container(
                        "reader",
                        image=BUSYBOX_IMAGE,
                        command=["sh", "-c", reader],
                        volumeMounts=[
                            {"name": "shared", "mountPath": "/shared"},
                            {"name": "mem", "mountPath": "/mem"},
                            {"name": "host", "mountPath": "/host", "readOnly": True},
                            {"name": "shared", "mountPath": "/sub", "subPath": "sub"},
                        ],
                    ),
                ],
            )
            await until("Running", lambda: phase(node.pod("vols")) == "Running", within=30)
            lines = await until(
                "the reader's output",
                lambda: (got := log_lines(node, uid, "vols", "reader")) and len(got) >= 6 and got,
                within=15,
            )
            assert lines[0] == "written by writer"
            fields = lines[1].split()
            assert fields[1:3] == ["/mem", "tmpfs"], lines[1]
            assert "size=16384k" in fields[3], lines[1]
            assert lines[2] == "hello from the host"
            assert lines[3:5] == ["group 2345", "memgroup 2345"]
            assert lines[5] == "via subPath"

            pod_dir = Path(node.settings.root_dir) / "pods" / uid
            assert (pod_dir / "volumes" / "kubernetes.io~empty-dir" / "shared" / "msg").exists()
            subpaths = pod_dir / "volume-subpaths" / "shared" / "reader"
            assert mounts_below(pod_dir) == [  # the Memory emptyDir's tmpfs, the subPath bind
                str((pod_dir / "volumes" / "kubernetes.io~empty-dir" / "mem").resolve()),
                str((subpaths / "3").resolve()),
            ]

            delete(node, "vols")
            await until("the pod deleted", lambda: node.pod("vols") is None, within=20)
            await until("the pod directory removed", lambda: not pod_dir.exists(), within=10)
            assert mounts_below(pod_dir) == []
            assert host_file.read_text() == "hello from the host\n"  # a hostPath is never removed


async def test_config_map_on_disk_and_secret_on_tmpfs_read_only_in_the_container(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    script = (
        "cat /etc/cfg/greeting; echo; cat /etc/secret/token; echo; "
        "grep -c ' /etc/secret tmpfs ro,' /proc/mounts; grep -c ' /etc/cfg ' /proc/mounts; "
        "touch /etc/cfg/x 2>/dev/null || echo read-only; sleep 3600"
    )
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path) as node:
            node.server.seed(
                CONFIGMAPS,
                {"metadata": {"name": "cfg", "namespace": "default"}, "data": {"greeting": "hi"}},
            )
            node.server.seed(
                SECRETS,
                {
                    "metadata": {"name": "sec", "namespace": "default"},
                    "data": {"token": "czNjcjN0"},
                },
            )
            uid = node.create(
                "content",
                grace=1,
                volumes=[
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "sec", "secret": {"secretName": "sec"}},
                ],
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sh", "-c", script],
                        volumeMounts=[
                            {"name": "cfg", "mountPath": "/etc/cfg"},
                            {"name": "sec", "mountPath": "/etc/secret"},
                        ],
                    )
                ],
            )
            lines = await until(
                "the app's output",
                lambda: (got := log_lines(node, uid, "content", "app")) and len(got) >= 5 and got,
                within=30,
            )
            assert lines[:5] == ["hi", "s3cr3t", "1", "1", "read-only"]
            pod_dir = Path(node.settings.root_dir) / "pods" / uid
            secret_dir = pod_dir / "volumes" / "kubernetes.io~secret" / "sec"
            assert mounts_below(pod_dir) == [str(secret_dir.resolve())]  # configMap on disk
            delete(node, "content")
            await until("the pod directory removed", lambda: not pod_dir.exists(), within=20)
            assert mounts_below(pod_dir) == []


async def test_sub_path_escape_is_refused_with_the_kubelet_message(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path) as node:
            uid = node.create(
                "escape",
                grace=1,
                volumes=[{"name": "vol", "emptyDir": {}}],
                initContainers=[
                    container(
                        "plant",
                        image=BUSYBOX_IMAGE,
                        command=["sh", "-c", "ln -s / /vol/escape && mkdir /vol/inside"],
                        volumeMounts=[{"name": "vol", "mountPath": "/vol"}],
                    )
                ],
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        volumeMounts=[
                            {"name": "vol", "mountPath": "/inside", "subPath": "inside"},
                            {"name": "vol", "mountPath": "/root-of-host", "subPath": "escape"},
                        ],
                    ),
                ],
            )

            def refused() -> dict[str, Any] | None:
                waiting = status_of(node.pod("escape"), "app").get("state", {}).get("waiting", {})
                return waiting if waiting.get("reason") == "CreateContainerConfigError" else None

            waiting = await until("CreateContainerConfigError", refused, within=30)
            assert waiting["message"] == (
                'failed to prepare subPath for volumeMount "vol" of container "app"'
            )
            pod_dir = Path(node.settings.root_dir) / "pods" / uid
            assert mounts_below(pod_dir) == [  # the subPath that stayed inside
                str((pod_dir / "volume-subpaths" / "vol" / "app" / "0").resolve())
            ]
            delete(node, "escape")
            await until("the pod directory removed", lambda: not pod_dir.exists(), within=20)
            assert mounts_below(pod_dir) == []


async def test_unbound_claims_and_unsupported_sources_keep_the_pod_in_container_creating(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    events = Events()
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path, events=events) as node:
            uid = node.create(
                "claim",
                volumes=[
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "share", "nfs": {"server": "nfs.example", "path": "/"}},
                ],
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        volumeMounts=[{"name": "data", "mountPath": "/data"}],
                    )
                ],
            )
            message = (
                'MountVolume.SetUp failed for volume "share" : volume source "nfs" is not '
                "supported on this node"
            )
            await until(
                "the FailedMount Event",
                lambda: ("claim", "Warning", "FailedMount", message) in events.seen,
                within=20,
            )
            app = await until("app waiting", lambda: status_of(node.pod("claim"), "app"), within=10)
            assert app["state"]["waiting"]["reason"] == "ContainerCreating"
            assert phase(node.pod("claim")) == "Pending"
            assert await node.runtime_sandboxes(uid) == []
            # a claim that does not exist yet: the kubelet logs it and posts no Event
            assert not any("data" in seen[3] for seen in events.seen), events.seen


async def test_pod_directory_left_by_a_stopped_agent_is_cleaned_when_it_starts_again(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    server = FakeApiServer(clock=RealClock())
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path, server) as first:
            uid = first.create(
                "left",
                grace=1,
                volumes=[{"name": "mem", "emptyDir": {"medium": "Memory"}}],
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        volumeMounts=[{"name": "mem", "mountPath": "/mem"}],
                    )
                ],
            )
            await until("Running", lambda: phase(first.pod("left")) == "Running", within=30)
            pod_dir = Path(first.settings.root_dir) / "pods" / uid
        # the agent is gone (its pods' sandboxes too), its pod directory and tmpfs stay behind
        assert len(mounts_below(pod_dir)) == 1
        server.remove(PODS, "left", "default")  # deleted while the agent was down
        async with running_node(containerd, tmp_path, server):
            await until(
                "the orphaned pod directory removed", lambda: not pod_dir.exists(), within=20
            )
            assert mounts_below(pod_dir) == []


async def test_agent_killed_mid_setup_leaves_nothing_once_it_restarts(
    control_plane: ControlPlane, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    with no_mounts_left(tmp_path):
        async with agent_node(control_plane, tmp_path, containerd.endpoint) as node:
            node.start()
            await wait_ready(control_plane, node, status="True", within=90)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "stuck", "namespace": node.namespace},
                "spec": {
                    "nodeName": node.name,
                    "terminationGracePeriodSeconds": 1,
                    "volumes": [
                        {"name": "mem", "emptyDir": {"medium": "Memory"}},
                        {"name": "cfg", "configMap": {"name": "missing"}},
                    ],
                    "containers": [
                        {
                            "name": "app",
                            "image": BUSYBOX_IMAGE,
                            "imagePullPolicy": "IfNotPresent",
                            "command": ["sleep", "3600"],
                            "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}],
                        }
                    ],
                },
            }
            control_plane.kubectl("create", "-f", "-", input=json.dumps(pod))
            [created] = pods_in(control_plane, node.namespace)
            uid = created["metadata"]["uid"]
            pod_dir = tmp_path / "root" / "pods" / uid
            message = 'MountVolume.SetUp failed for volume "cfg" : configmap "missing" not found'

            def failed_mount() -> bool:
                events = api_get(control_plane, f"/api/v1/namespaces/{node.namespace}/events")
                return any(
                    e.get("reason") == "FailedMount" and e.get("message") == message
                    for e in (events or {}).get("items", [])
                )

            await until("the FailedMount Event", failed_mount, within=30)
            # the Memory emptyDir and the service-account token volume are on tmpfs
            assert len(mounts_below(pod_dir)) == 2, mounts_below(pod_dir)
            [stuck] = pods_in(control_plane, node.namespace)
            app = status_of(stuck, "app")
            assert app["state"]["waiting"]["reason"] == "ContainerCreating"

            node.kill()
            control_plane.kubectl(
                "delete", "pod", "stuck", "-n", node.namespace, "--grace-period=0", "--force"
            )
            node.start()
            await until(
                "the pod directory removed", lambda: not pod_dir.exists(), within=30, every=0.5
            )
            assert mounts_inside(tmp_path / "root") == []
            assert "Traceback" not in node.log_text(), node.log_tail()


async def test_host_to_container_propagation_shows_a_later_host_mount_inside(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    script = "until [ -f /prop/inner/hello ]; do sleep 0.1; done; cat /prop/inner/hello; sleep 3600"
    with no_mounts_left(tmp_path):
        async with running_node(containerd, tmp_path) as node:
            uid = node.create(
                "prop",
                grace=1,
                volumes=[{"name": "prop", "emptyDir": {}}],
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sh", "-c", script],
                        volumeMounts=[
                            {
                                "name": "prop",
                                "mountPath": "/prop",
                                "mountPropagation": "HostToContainer",
                            }
                        ],
                    )
                ],
            )
            await until("Running", lambda: phase(node.pod("prop")) == "Running", within=30)
            pod_dir = Path(node.settings.root_dir) / "pods" / uid
            inner = pod_dir / "volumes" / "kubernetes.io~empty-dir" / "prop" / "inner"
            inner.mkdir()
            await asyncio.to_thread(
                subprocess.run, ["mount", "-t", "tmpfs", "tmpfs", str(inner)], check=True
            )
            (inner / "hello").write_text("mounted on the host after the start\n")
            lines = await until(
                "the app's output", lambda: log_lines(node, uid, "prop", "app"), within=15
            )
            assert lines == ["mounted on the host after the start"]  # only through propagation
            delete(node, "prop")
            await until("the pod directory removed", lambda: not pod_dir.exists(), within=20)
            assert mounts_below(pod_dir) == []

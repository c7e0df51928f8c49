"""Bad input on the real containerd never takes the node down.

1. ``nodeagent run`` as a process in standalone mode (no kubeconfig: the kubelet's standalone
   mode), its ``staticPodPath`` holding a malformed manifest (``annotations`` that is a list,
   which used to stop the daemon with "'list' object is not a mapping") beside a good one: the
   good pod's container runs in containerd, the daemon stays alive, and its log names the bad
   file and the field.
2. ``runAsNonRoot: true`` without ``runAsUser`` on the local busybox image (which runs as root):
   the container waits with the kubelet's ``CreateContainerConfigError`` and message, with a
   ``Failed`` event, and is never created; a good pod on the same node runs. (Pod managers
   wired as the daemon wires them, with the in-memory API of ``podnode``.)
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from agentproc import agent_process
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import phase, running_node, status_of, until

from nodeagent.apiserver import EVENTS
from nodeagent.clock import RealClock
from nodeagent.events import EventRecorder
from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_NAME, POD_NAMESPACE
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

NAMESPACE = "default"


def static_manifest(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, **meta},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "app",
                    "image": BUSYBOX_IMAGE,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["sh", "-c", 'trap "exit 0" TERM; while true; do sleep 1; done'],
                }
            ],
        },
    }


async def static_containers(endpoint: str, full_name: str) -> list[cri.Container]:
    async with CriClient.open(endpoint) as client:
        flt = cri.ContainerFilter(label_selector={POD_NAME: full_name, POD_NAMESPACE: NAMESPACE})
        return await client.list_containers(flt)


async def remove_static_pods(endpoint: str, full_names: list[str]) -> None:
    async with CriClient.open(endpoint) as client:
        for full_name in full_names:
            selector = {POD_NAME: full_name, POD_NAMESPACE: NAMESPACE}
            for sandbox in await client.list_pod_sandbox(
                cri.PodSandboxFilter(label_selector=selector)
            ):
                with contextlib.suppress(Exception):
                    await client.stop_pod_sandbox(sandbox.id)
                    await client.remove_pod_sandbox(sandbox.id)


def _tail(log: Path, chars: int = 4000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else ""


async def test_a_malformed_static_pod_manifest_is_logged_and_the_good_one_beside_it_runs(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    node = f"it-bad-{secrets.token_hex(3)}"
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "bad.yaml").write_text(
        yaml.safe_dump(static_manifest("bad", annotations=["not", "a", "map"]))
    )
    (manifests / "good.yaml").write_text(yaml.safe_dump(static_manifest("good")))
    config = tmp_path / "config.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "nodeagent.io/v1alpha1",
                "kind": "NodeAgentConfiguration",
                "node": {"hostnameOverride": node, "rootDir": str(tmp_path / "root")},
                "kubelet": {
                    "containerRuntimeEndpoint": containerd.endpoint,
                    "staticPodPath": str(manifests),
                    "fileCheckFrequency": "1s",
                    "cgroupRoot": f"/{node}",
                    "podLogsDir": str(tmp_path / "pods"),
                    "resolvConf": "",
                    "failCgroupV1": False,
                    "failSwapOn": False,
                },
                "proxy": {"enabled": False},
            }
        )
    )
    log = tmp_path / "nodeagent.log"
    good, bad = f"good-{node}", f"bad-{node}"
    try:
        async with agent_process(config, log) as proc:

            async def good_running() -> bool:
                assert proc.returncode is None, f"the agent exited:\n{_tail(log)}"
                found = await static_containers(containerd.endpoint, good)
                return any(c.state == cri.CONTAINER_RUNNING for c in found)

            started = time.monotonic()
            await until(
                "the good static pod's container running",
                good_running,
                within=60,
                every=0.25,
                explain=lambda: _tail(log),
            )
            print(f"good pod running {time.monotonic() - started:.1f}s after start")
            await asyncio.sleep(3)  # three more re-scans of the directory
            assert proc.returncode is None, _tail(log)
            assert await static_containers(containerd.endpoint, bad) == []
            text = log.read_text(errors="replace")
            [line] = [ln for ln in text.splitlines() if "Invalid static pod manifest" in ln]
            assert str(manifests / "bad.yaml") in line
            assert "metadata.annotations" in line
            assert "Manager crashed" not in text
            proc.send_signal(signal.SIGTERM)
            code = await asyncio.wait_for(proc.wait(), 20)
    finally:
        await remove_static_pods(containerd.endpoint, [good, bad])
    assert code == 0, _tail(log)


async def test_run_as_non_root_on_a_root_image_waits_with_create_container_config_error(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    server = FakeApiServer(clock=RealClock())
    recorder = EventRecorder(api=server, clock=RealClock(), node_name="it-node")
    task = asyncio.create_task(recorder.run(), name="events")
    try:
        async with running_node(containerd, tmp_path, server, events=recorder) as node:
            uid = node.create(
                "non-root",
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        securityContext={"runAsNonRoot": True},
                    )
                ],
            )
            node.create(
                "good",
                containers=[container("app", image=BUSYBOX_IMAGE, command=["sleep", "3600"])],
            )

            def waiting() -> dict[str, Any]:
                state = status_of(node.pod("non-root")).get("state", {})
                return dict(state.get("waiting") or {})

            await until(
                "the non-root pod waiting and the good one running",
                lambda: (
                    phase(node.pod("good")) == "Running"
                    and waiting().get("reason") == "CreateContainerConfigError"
                ),
                within=40,
                every=0.1,
                explain=lambda: (phase(node.pod("good")), waiting()),
            )
            message = (
                "container has runAsNonRoot and image will run as root "
                f'(pod: "non-root_default({uid})", container: app)'
            )
            assert waiting() == {"reason": "CreateContainerConfigError", "message": message}
            assert phase(node.pod("non-root")) == "Pending"
            assert await node.runtime_containers(uid) == []
            await asyncio.sleep(0.5)  # the recorder posts in the background
            events = [
                (e["type"], e["reason"], e["message"])
                for e in server.objects(EVENTS)
                if e["involvedObject"]["name"] == "non-root"
            ]
            assert ("Warning", "Failed", f"Error: {message}") in events
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

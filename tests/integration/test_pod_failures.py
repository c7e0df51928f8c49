"""Bad pod specs on the real containerd, reported as the kubelet reports them: the waiting
reason in the container status and the Events, while a good pod on the same node runs.

The pod managers are wired as ``nodeagent.pods.managers`` wires them for ``agent.build``, with the
node's ``EventRecorder`` as their event sink, against the private containerd of the
``containerd`` fixture (containerd 1.6 + runc here); the API is the in-memory
``FakeApiServer`` on the real clock (``podnode``).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import NODE, Node, phase, running_node, status_of, until

from nodeagent.apiserver import EVENTS
from nodeagent.clock import RealClock
from nodeagent.events import EventRecorder
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

APP = "spec.containers{app}"
NO_SUCH_BINARY = "/no/such/binary"


@contextlib.asynccontextmanager
async def node_with_events(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Node]:
    """``test_pods.running_node`` whose pod managers post their Events through a running
    ``EventRecorder`` (``agent.build`` passes the node's)."""
    server = FakeApiServer(clock=RealClock())
    recorder = EventRecorder(api=server, clock=RealClock(), node_name=NODE)
    task = asyncio.create_task(recorder.run(), name="events")
    try:
        async with running_node(containerd, tmp_path, server, events=recorder) as node:
            yield node
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def events_of(node: Node, pod: str) -> list[dict[str, Any]]:
    found = [e for e in node.server.objects(EVENTS) if e["involvedObject"]["name"] == pod]
    return sorted(found, key=lambda e: e["metadata"]["name"])


def summary(node: Node, pod: str) -> list[tuple[str, str, str, str]]:
    """(fieldPath, type, reason, message) of ``pod``'s events, oldest first."""
    return [
        (
            e["involvedObject"].get("fieldPath", ""),
            e["type"],
            e["reason"],
            e["message"],
        )
        for e in events_of(node, pod)
    ]


def waiting(node: Node, pod: str) -> dict[str, Any]:
    return dict(status_of(node.pod(pod)).get("state", {}).get("waiting") or {})


async def test_bad_pod_specs_show_the_kubelets_reasons_and_events_while_a_good_pod_runs(
    containerd: RuntimeEnv, tmp_path: Path
) -> None:
    missing_image = f"{containerd.registry.host}/does-not-exist:1"
    config_ref = {"configMapKeyRef": {"name": "settings", "key": "mode"}}
    async with node_with_events(containerd, tmp_path) as node:
        started = time.monotonic()
        uids = {
            "bad-env": node.create(
                "bad-env",
                containers=[
                    container(
                        "app",
                        image=BUSYBOX_IMAGE,
                        command=["sleep", "3600"],
                        env=[{"name": "MODE", "valueFrom": config_ref}],
                    )
                ],
            ),
            "bad-image": node.create(
                "bad-image", containers=[container("app", image=missing_image)]
            ),
            "bad-command": node.create(
                "bad-command",
                containers=[container("app", image=BUSYBOX_IMAGE, command=[NO_SUCH_BINARY])],
            ),
            "good": node.create(
                "good",
                containers=[container("app", image=BUSYBOX_IMAGE, command=["sleep", "3600"])],
            ),
        }
        seen: dict[str, set[str]] = {name: set() for name in uids}

        def observe() -> None:
            for name in uids:
                if reason := waiting(node, name).get("reason"):
                    seen[name].add(reason)

        def settled() -> bool:
            observe()
            return (
                phase(node.pod("good")) == "Running"
                and waiting(node, "bad-env").get("reason") == "CreateContainerConfigError"
                and waiting(node, "bad-image").get("reason") == "ImagePullBackOff"
                and waiting(node, "bad-command").get("reason") == "CrashLoopBackOff"
                and any(e[2] == "BackOff" for e in summary(node, "bad-command"))
            )

        await until(
            "the good pod Running and the bad ones waiting with the kubelet's reasons",
            settled,
            within=40,
            every=0.05,
            explain=lambda: {n: (phase(node.pod(n)), waiting(node, n)) for n in uids},
        )
        print(f"all four pods settled {time.monotonic() - started:.1f}s after creation")

        # The good pod runs beside them, with the kubelet's start events (the 1.36 kubelet's
        # Pulled message: its pull records (KubeletEnsureSecretPulledImages) let this pod use
        # the image already on the node).
        assert summary(node, "good") == [
            (
                APP,
                "Normal",
                "Pulled",
                f'Container image "{BUSYBOX_IMAGE}" already present on machine and can be '
                "accessed by the pod",
            ),
            (APP, "Normal", "Created", "Container created"),
            (APP, "Normal", "Started", "Container started"),
        ]
        assert status_of(node.pod("good"))["ready"] is True

        # A missing ConfigMap: CreateContainerConfigError, the pod stays Pending.
        assert waiting(node, "bad-env") == {
            "reason": "CreateContainerConfigError",
            "message": 'configmap "settings" not found',
        }
        assert phase(node.pod("bad-env")) == "Pending"
        assert (APP, "Warning", "Failed", 'Error: configmap "settings" not found') in summary(
            node, "bad-env"
        )
        assert await node.runtime_containers(uids["bad-env"]) == []

        # A missing image: ErrImagePull, then ImagePullBackOff.
        assert "ErrImagePull" in seen["bad-image"]
        # As the kubelet 1.36 says it: the back-off, then the pull's error.
        backoff = waiting(node, "bad-image")
        assert backoff.get("reason") == "ImagePullBackOff" and re.fullmatch(
            rf'Back-off pulling image "{re.escape(missing_image)}": ErrImagePull: rpc error: '
            rf"code = NotFound desc = failed to pull and unpack image "
            rf'"{re.escape(missing_image)}": .*not found',
            backoff.get("message", ""),
        ), backoff
        image_events = summary(node, "bad-image")
        assert image_events[0] == (APP, "Normal", "Pulling", f'Pulling image "{missing_image}"')
        fieldpath, type_, reason, message = image_events[1]
        assert (fieldpath, type_, reason) == (APP, "Warning", "Failed")
        assert re.fullmatch(
            rf'Failed to pull image "{re.escape(missing_image)}": rpc error: code = NotFound '
            rf'desc = failed to pull and unpack image "{re.escape(missing_image)}": .*not found',
            message,
        ), message
        assert image_events[2:] == [
            (APP, "Warning", "Failed", "Error: ErrImagePull"),
            (APP, "Normal", "BackOff", f'Back-off pulling image "{missing_image}"'),
            (APP, "Warning", "Failed", "Error: ImagePullBackOff"),
        ]

        # A command that does not exist: runc fails the start; containerd reports the
        # container exited with StartError / 128; the kubelet shows RunContainerError, then
        # CrashLoopBackOff once the restart back-off holds it.
        assert "RunContainerError" in seen["bad-command"]
        app = status_of(node.pod("bad-command"))
        terminated = app["lastState"]["terminated"]
        assert (terminated["reason"], terminated["exitCode"]) == ("StartError", 128)
        assert NO_SUCH_BINARY in terminated["message"]
        uid = uids["bad-command"]
        assert re.fullmatch(
            rf"back-off 10s restarting failed container=app pod=bad-command_default\({uid}\)",
            app["state"]["waiting"]["message"],
        )
        assert phase(node.pod("bad-command")) == "Running"
        failed = [e for e in summary(node, "bad-command") if e[2] == "Failed"]
        assert failed and failed[0][:3] == (APP, "Warning", "Failed")
        assert failed[0][3].startswith("Error: failed to create containerd task: ")
        assert NO_SUCH_BINARY in failed[0][3]
        assert not failed[0][3].startswith("Error: rpc error")
        back_off = (
            APP,
            "Warning",
            "BackOff",
            f"Back-off restarting failed container app in pod bad-command_default({uid})",
        )
        assert back_off in summary(node, "bad-command")
        created = [e for e in events_of(node, "bad-command") if e["reason"] == "Created"]
        assert [e["count"] for e in created] == [2]  # the first start and the one restart

        # Every event is the kubelet's, about the pod, in the pod's namespace.
        for event in node.server.objects(EVENTS):
            assert event["metadata"]["namespace"] == "default"
            assert event["source"] == {"component": "kubelet", "host": NODE}
            involved = event["involvedObject"]
            assert (involved["kind"], involved["apiVersion"]) == ("Pod", "v1")
            assert involved["uid"] == uids[involved["name"]]

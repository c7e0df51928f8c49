"""Lifecycle hooks, termination messages and sidecar containers on the real containerd.

The pod managers are wired as ``nodeagent.pods.managers`` wires them for ``agent.build``, with
the node's ``EventRecorder`` as their event sink, against the private containerd of the
``containerd`` fixture; the API is the in-memory ``FakeApiServer`` on the real clock
(``podnode``). What is asserted is what a user sees: the container's own log (a preStop hook
writes into it through ``/proc/1/fd/1``), the pod's status, its Events and, for the stop
order, the times the runtime reports the containers finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import secrets
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from harness.cgroups import remove_cgroup_tree
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import NODE, Node, phase, running_node, status_of, until
from test_pods import cluster_node, remove_namespace_pods

from nodeagent.apiserver import EVENTS, PODS
from nodeagent.clock import RealClock
from nodeagent.events import EventRecorder
from nodeagent.kuberuntime import CriClient
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.labels import POD_UID
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration

CRI_LINE = re.compile(r"^\S+ (stdout|stderr) [FP] (.*)$")
LOOP = "while true; do sleep 0.1; done"
POLITE = f"trap 'exit 0' TERM; {LOOP}"  # sh as pid 1 ignores SIGTERM without a trap


@pytest.fixture
async def node(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Node]:
    server = FakeApiServer(clock=RealClock())
    recorder = EventRecorder(api=server, clock=RealClock(), node_name=NODE)
    task = asyncio.create_task(recorder.run(), name="events")
    try:
        async with running_node(containerd, tmp_path, server, events=recorder) as running:
            yield running
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def events(node: Node, pod: str) -> list[tuple[str, str, str, str]]:
    """(fieldPath, type, reason, message) of ``pod``'s events, oldest first."""
    found = [e for e in node.server.objects(EVENTS) if e["involvedObject"]["name"] == pod]
    found.sort(key=lambda e: e["metadata"]["name"])
    return [
        (e["involvedObject"].get("fieldPath", ""), e["type"], e["reason"], e["message"])
        for e in found
    ]


def log_lines(node: Node, pod: str, uid: str, name: str, restart: int = 0) -> list[str]:
    path = Path(node.settings.pod_logs_dir) / f"default_{pod}_{uid}" / name / f"{restart}.log"
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [m.group(2) for line in text.splitlines() if (m := CRI_LINE.match(line))]


def delete(node: Node, pod: str, grace: int) -> None:
    """What ``kubectl delete pod`` does: the API marks the pod with its grace period."""

    def mark(obj: dict[str, Any]) -> None:
        obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        obj["metadata"]["deletionGracePeriodSeconds"] = grace

    node.server.modify(PODS, pod, mark, "default")


def init_status(pod: dict[str, Any] | None, name: str) -> dict[str, Any]:
    statuses = (pod or {}).get("status", {}).get("initContainerStatuses") or []
    return next((s for s in statuses if s["name"] == name), {})


async def test_pre_stop_exec_runs_before_sigterm(node: Node) -> None:
    script = f"trap 'echo got TERM; sleep 1; exit 0' TERM; echo started; {LOOP}"
    hook = {"exec": {"command": ["sh", "-c", "echo pre-stop ran > /proc/1/fd/1"]}}
    uid = node.create(
        "prestop",
        grace=20,
        containers=[
            container(
                "app",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", script],
                lifecycle={"preStop": hook},
            )
        ],
    )
    await until("Running", lambda: phase(node.pod("prestop")) == "Running", within=60)
    await until("started", lambda: log_lines(node, "prestop", uid, "app"), within=10)

    delete(node, "prestop", 20)
    lines = await until(
        "the TERM trap's line",
        lambda: (got := log_lines(node, "prestop", uid, "app")) and "got TERM" in got and got,
        within=15,
        every=0.05,
    )
    assert lines == ["started", "pre-stop ran", "got TERM"]
    await until("the pod deleted from the API", lambda: node.pod("prestop") is None, within=20)
    assert ("spec.containers{app}", "Normal", "Killing", "Stopping container app") in events(
        node, "prestop"
    )


async def test_sleep_pre_stop_delays_the_stop_within_the_grace_period(node: Node) -> None:
    script = f"trap 'exit 0' TERM; {LOOP}"
    node.create(
        "sleeper",
        grace=30,
        containers=[
            container(
                "app",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", script],
                lifecycle={"preStop": {"sleep": {"seconds": 3}}},
            )
        ],
    )
    await until("Running", lambda: phase(node.pod("sleeper")) == "Running", within=60)
    started = time.monotonic()
    delete(node, "sleeper", 30)
    await until("the pod deleted from the API", lambda: node.pod("sleeper") is None, within=20)
    elapsed = time.monotonic() - started
    assert 3 <= elapsed < 8, elapsed


async def test_post_start_runs_inside_the_container_after_it_starts(node: Node) -> None:
    script = (
        "trap 'exit 0' TERM; echo started; "
        "while [ ! -f /tmp/hooked ]; do sleep 0.1; done; echo saw $(cat /tmp/hooked); " + LOOP
    )
    hook = {"exec": {"command": ["sh", "-c", "echo post-start > /tmp/hooked"]}}
    uid = node.create(
        "poststart-ok",
        grace=5,
        containers=[
            container(
                "app",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", script],
                lifecycle={"postStart": hook},
            )
        ],
    )
    lines = await until(
        "the hook's file seen",
        lambda: (got := log_lines(node, "poststart-ok", uid, "app")) and len(got) == 2 and got,
        within=60,
    )
    assert lines == ["started", "saw post-start"]
    await until("Running", lambda: phase(node.pod("poststart-ok")) == "Running", within=10)
    assert status_of(node.pod("poststart-ok"))["restartCount"] == 0


async def test_failed_post_start_kills_the_container_with_the_event_and_restarts_it(
    node: Node,
) -> None:
    hook = {"exec": {"command": ["sh", "-c", "echo oops; exit 3"]}}
    node.create(
        "poststart",
        containers=[
            container(
                "app",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", POLITE],
                lifecycle={"postStart": hook},
            )
        ],
    )

    def restarted() -> dict[str, Any] | None:
        app = status_of(node.pod("poststart"))
        return app if app.get("restartCount", 0) >= 1 and "waiting" in app["state"] else None

    app = await until("a restart after the failed hook", restarted, within=60)
    assert app["state"]["waiting"]["reason"] in ("PostStartHookError", "CrashLoopBackOff")
    assert "terminated" in app["lastState"]
    seen = events(node, "poststart")
    assert ("spec.containers{app}", "Warning", "FailedPostStartHook", "PostStartHook failed") in (
        seen
    )
    assert ("spec.containers{app}", "Normal", "Killing", "FailedPostStartHook") in seen


async def test_post_start_runs_and_the_hook_message_reaches_the_status(node: Node) -> None:
    """A failing http hook on a port nobody listens on: the waiting message is the kubelet's."""
    hook = {"httpGet": {"path": "/hook", "port": 8089}}
    uid = node.create(
        "httphook",
        containers=[
            container(
                "app",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", POLITE],
                lifecycle={"postStart": hook},
            )
        ],
    )
    pod = await until(
        "the hook's failure",
        lambda: (
            (p := node.pod("httphook"))
            and status_of(p).get("state", {}).get("waiting", {}).get("reason")
            == "PostStartHookError"
            and p
        ),
        within=60,
        every=0.02,
    )
    message = status_of(pod)["state"]["waiting"]["message"]
    assert message.startswith(
        f'HTTP lifecycle hook (/hook) for Container "app" in Pod "httphook_default({uid})" '
        'failed - error: Get "http://'
    ), message
    assert ":8089/hook" in message and "connection refused" in message, message


async def test_termination_message_and_fallback_to_logs_reach_the_status(node: Node) -> None:
    node.create(
        "messages",
        restart_policy="Never",
        containers=[
            container(
                "file",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", "printf 'all done' > /dev/termination-log; exit 2"],
            ),
            container(
                "custom",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", "printf 'custom path' > /tmp/msg"],
                terminationMessagePath="/tmp/msg",
            ),
            container(
                "logs",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", "echo first; echo last words; exit 1"],
                terminationMessagePolicy="FallbackToLogsOnError",
            ),
        ],
    )
    pod = await until(
        "Failed",
        lambda: phase(node.pod("messages")) == "Failed" and node.pod("messages"),
        within=60,
    )
    file = status_of(pod, "file")["state"]["terminated"]
    assert (file["exitCode"], file["message"]) == (2, "all done")
    assert status_of(pod, "custom")["state"]["terminated"]["message"] == "custom path"
    logs = status_of(pod, "logs")["state"]["terminated"]
    assert (logs["exitCode"], logs["message"]) == (1, "first\nlast words\n")


async def _finished_times(endpoint: str, uid: str, into: dict[str, int]) -> None:
    """Record when each of the pod's containers finished, as the runtime reports it."""
    async with CriClient.open(endpoint) as client:
        while True:
            flt = cri.ContainerFilter(label_selector={POD_UID: uid})
            for listed in await client.list_containers(flt):
                with contextlib.suppress(Exception):
                    status = (await client.container_status(listed.id)).status
                    if status.finished_at:
                        into.setdefault(status.metadata.name, status.finished_at)
            await asyncio.sleep(0.05)


async def test_sidecars_start_in_order_and_stop_after_the_app_in_reverse_order(
    node: Node,
) -> None:
    def traps(name: str, linger: float) -> list[str]:
        return ["sh", "-c", f"trap 'sleep {linger}; exit 0' TERM; echo {name}; {LOOP}"]

    uid = node.create(
        "sidecars",
        grace=20,
        init_containers=[
            container(
                "proxy", image=BUSYBOX_IMAGE, command=traps("proxy", 0), restartPolicy="Always"
            ),
            container("setup", image=BUSYBOX_IMAGE, command=["sh", "-c", "echo setup"]),
            container(
                "agent", image=BUSYBOX_IMAGE, command=traps("agent", 1), restartPolicy="Always"
            ),
        ],
        containers=[container("app", image=BUSYBOX_IMAGE, command=traps("app", 0))],
    )
    pod = await until(
        "Running and Ready",
        lambda: (
            (p := node.pod("sidecars"))
            and phase(p) == "Running"
            and any(
                c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"]
            )
            and p
        ),
        within=60,
    )
    proxy = init_status(pod, "proxy")
    assert (proxy["ready"], proxy["started"], "running" in proxy["state"]) == (True, True, True)
    setup = init_status(pod, "setup")["state"]["terminated"]
    assert setup["exitCode"] == 0
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["Initialized"] == "True"

    listed = await node.runtime_containers(uid)
    order = [c.metadata.name for c in sorted(listed, key=lambda c: c.created_at)]
    assert order == ["proxy", "setup", "agent", "app"]

    finished: dict[str, int] = {}
    watcher = asyncio.create_task(_finished_times(node.endpoint, uid, finished))
    try:
        delete(node, "sidecars", 20)
        await until("all stopped", lambda: {"app", "agent", "proxy"} <= set(finished), within=20)
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    assert finished["app"] < finished["agent"] < finished["proxy"], finished
    await until("the pod deleted from the API", lambda: node.pod("sidecars") is None, within=20)


async def test_sidecar_is_restarted_and_the_pod_succeeds_with_its_app(node: Node) -> None:
    node.create(
        "job",
        restart_policy="Never",
        init_containers=[
            container(
                "flaky",
                image=BUSYBOX_IMAGE,
                command=["sh", "-c", "sleep 1; exit 1"],
                restartPolicy="Always",
            )
        ],
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", "sleep 6"])],
    )
    restarted = await until(
        "the sidecar restarted",
        lambda: (
            (p := node.pod("job")) and init_status(p, "flaky").get("restartCount", 0) >= 1 and p
        ),
        within=60,
        explain=lambda: (node.pod("job") or {}).get("status"),
    )
    assert phase(restarted) in ("Running", "Pending")
    pod = await until(
        "Succeeded", lambda: phase(node.pod("job")) == "Succeeded" and node.pod("job"), within=60
    )
    assert status_of(pod)["state"]["terminated"]["exitCode"] == 0
    assert "running" not in init_status(pod, "flaky")["state"]


# --- the real control plane -------------------------------------------------------------------


async def test_sidecar_job_and_termination_message_in_kubectl_get_pod(
    control_plane: Any, containerd: RuntimeEnv, tmp_path: Path
) -> None:
    """What ``kubectl get pod -o yaml`` shows on a real kube-apiserver: the sidecar in
    ``initContainerStatuses``, the app's termination message, the pod Succeeded."""
    suffix = secrets.token_hex(3)
    name, namespace = f"it-hooks-{suffix}", f"it-hooks-{suffix}"
    kubectl = control_plane.kubectl

    def get(*args: str) -> Any:
        done = kubectl("get", "-o", "json", *args, check=False)
        return json.loads(done.stdout) if done.returncode == 0 else None

    kubectl("create", "namespace", namespace)
    try:
        async with cluster_node(control_plane, containerd, tmp_path, name):
            await until(
                "the node Ready",
                lambda: any(
                    c["type"] == "Ready" and c["status"] == "True"
                    for c in (get("node", name) or {}).get("status", {}).get("conditions", [])
                ),
                within=90,
                every=1,
            )
            control_plane.apply(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": "job", "namespace": namespace},
                    "spec": {
                        "nodeName": name,
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 5,
                        "initContainers": [
                            container(
                                "proxy",
                                image=BUSYBOX_IMAGE,
                                command=["sh", "-c", POLITE],
                                restartPolicy="Always",
                                lifecycle={"preStop": {"exec": {"command": ["true"]}}},
                            )
                        ],
                        "containers": [
                            container(
                                "app",
                                image=BUSYBOX_IMAGE,
                                command=["sh", "-c", "sleep 2; printf done > /dev/termination-log"],
                                lifecycle={"postStart": {"exec": {"command": ["true"]}}},
                            )
                        ],
                    },
                }
            )
            pod = await until(
                "Succeeded",
                lambda: (
                    (p := get("pod", "job", "-n", namespace))
                    and p["status"].get("phase") == "Succeeded"
                    and p
                ),
                within=60,
                every=0.5,
                explain=lambda: (get("pod", "job", "-n", namespace) or {}).get("status"),
            )
            app = pod["status"]["containerStatuses"][0]["state"]["terminated"]
            assert (app["exitCode"], app["message"]) == (0, "done")
            [proxy] = pod["status"]["initContainerStatuses"]
            assert proxy["name"] == "proxy" and "terminated" in proxy["state"]
            kubectl("delete", "pod", "job", "-n", namespace, "--wait=false")
            await until(
                "the pod deleted",
                lambda: get("pod", "job", "-n", namespace) is None,
                within=60,
                every=1,
            )
    finally:
        kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        kubectl("delete", "node", name, "--ignore-not-found", check=False)
        kubectl("delete", "lease", name, "-n", "kube-node-lease", "--ignore-not-found", check=False)
        await remove_namespace_pods(containerd.endpoint, namespace)
        assert remove_cgroup_tree(name) == []

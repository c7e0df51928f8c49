"""Node shutdown through the pod workers: the kill path, the kubelet's status and admission."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest
from pod_stack import NODE, make_runtime, running_stack, until

from nodeagent.apiserver import PODS
from nodeagent.nodeshutdown.manager import NodeShutdownManager
from nodeagent.nodeshutdown.policy import ShutdownGroup, disrupted_status
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.fake_logind import FakeLogind
from nodeagent.testing.pods import pod_object

pytestmark = pytest.mark.looptime


def seed(server: FakeApiServer, name: str, **kw: Any) -> str:
    body = pod_object(name, node=NODE, **kw)
    del body["metadata"]["uid"]
    return str(server.seed(PODS, body)["metadata"]["uid"])


def phase(pod: dict[str, Any] | None) -> str:
    return str((pod or {}).get("status", {}).get("phase", ""))


async def test_shutdown_kills_pods_through_their_workers_with_the_kubelets_status(
    tmp_path: Path,
) -> None:
    server = FakeApiServer()
    runtime = make_runtime(server)
    logind = FakeLogind(inhibit_delay_max_s=60.0)
    holder: list[NodeShutdownManager] = []
    async with running_stack(
        server,
        runtime,
        shutting_down=lambda: holder[0].shutdown_in_progress(),  # noqa: PLW0108 - built below
    ) as stack:
        assert stack.workers is not None and stack.podsync is not None
        workers, podsync = stack.workers, stack.podsync

        async def kill(pod: Any, grace: int, mutate: Any) -> None:
            podsync.override_status(pod.uid, mutate)
            await workers.kill(pod.uid, grace)

        manager = NodeShutdownManager(
            logind=logind,
            groups=(ShutdownGroup(0, 10), ShutdownGroup(1000, 4)),
            clock=server.clock,
            state_dir=tmp_path,
            active_pods=workers.active_pods,
            kill_pod=kill,
            status_pending=stack.status.pending,
            dropin_dir=tmp_path / "dropin",
        )
        holder.append(manager)
        task = asyncio.create_task(manager.run())
        try:
            seed(server, "low", grace=3)
            seed(server, "high", priority=1000, grace=30)
            await until(lambda: phase(stack.pod("low")) == phase(stack.pod("high")) == "Running")
            await until(lambda: manager.holds_lock)
            logind.prepare_for_shutdown(True)
            await until(lambda: not logind.held_locks())

            for name in ("low", "high"):
                status = (stack.pod(name) or {})["status"]
                assert status["phase"] == "Failed"
                assert status["reason"] == "Terminated"
                assert status["message"] == (
                    "Pod was terminated in response to imminent node shutdown."
                )
                [disruption] = [c for c in status["conditions"] if c["type"] == "DisruptionTarget"]
                assert (disruption["status"], disruption["reason"]) == (
                    "True",
                    "TerminationByKubelet",
                )
            # StopContainer got each pod's effective grace: its own 3 s, the group's 4 s
            graces = sorted(runtime.grace_periods.values())
            assert graces == [3, 4]

            # a pod arriving now is refused
            seed(server, "late")
            await until(lambda: phase(stack.pod("late")) == "Failed")
            late = (stack.pod("late") or {})["status"]
            assert late["reason"] == "NodeShutdown"
            assert late["message"] == (
                "Pod was rejected: Pod was rejected as the node is shutting down."
            )
            assert [c.name for c in await stack.running("app")] == []
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            logind.cleanup()


def test_status_mutation_is_applied_to_every_later_status() -> None:
    mutate = functools.partial(disrupted_status, now="t", succeeded=False)
    assert mutate({"phase": "Succeeded"})["phase"] == "Failed"

"""The pod status manager's retries after an outage: backed off (0.5 s doubling to 10 s), and
sent at once when another call of the agent gets the apiserver's answer again."""

from __future__ import annotations

import asyncio

import pytest

from nodeagent.apiserver import PODS
from nodeagent.podspec import decode_pod
from nodeagent.status import manager as status_manager
from nodeagent.status.manager import PlainDeleter, StatusManager
from nodeagent.testing.fake_apiserver import FakeApiServer
from nodeagent.testing.pods import pod_object


def patches(server: FakeApiServer) -> list[float]:
    return [c.at for c in server.calls if c.verb == "patch" and c.resource == "pods"]


@pytest.mark.parametrize("wired", [True, False])
async def test_a_status_waiting_out_its_back_off_is_sent_when_the_apiserver_answers_again(
    monkeypatch: pytest.MonkeyPatch, wired: bool
) -> None:
    monkeypatch.setattr(status_manager, "RETRY_INITIAL", 5.0)
    server = FakeApiServer()
    body = server.seed(PODS, pod_object("web"))
    status = StatusManager(
        api=server,
        deleter=PlainDeleter(api=server),
        answered_again=server.answered_again if wired else None,
    )
    server.set_down(True)
    status.set_status(decode_pod(body), {"phase": "Running"})
    task = asyncio.create_task(status.run())
    try:
        await asyncio.sleep(0.2)  # the first PATCH failed: the next try is due in 5 s
        server.set_down(False)
        await server.get(PODS, "web", namespace="default")  # another call's answer
        answered = asyncio.get_running_loop().time()
        await asyncio.sleep(0.5)
        retries = [t for t in patches(server) if t >= answered]
        if wired:
            assert len(retries) == 1 and retries[0] - answered < 0.2
            stored = server.stored(PODS, "web", "default") or {}
            assert stored["status"]["phase"] == "Running"
        else:  # the control: without the answer it sleeps its back-off out
            assert retries == []
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

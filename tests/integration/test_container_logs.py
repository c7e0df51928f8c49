"""``/containerLogs`` on the real containerd: busybox containers write, the handler reads
over HTTP what ``kubectl logs`` would show (plain, tail, since, timestamps, limitBytes, stream,
follow, previous) and the rotation manager keeps a busy container's log within its files.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from harness.fixtures_runtime import RuntimeEnv
from harness.images import BUSYBOX_IMAGE
from podnode import Node, phase, running_node, status_of, until

from nodeagent.clock import RealClock
from nodeagent.containerlogs.http import LOGS, routes
from nodeagent.containerlogs.rotation import RotationManager, RotationPolicy
from nodeagent.containerlogs.service import ContainerLogs
from nodeagent.testing.pods import container

pytestmark = pytest.mark.integration


class Logs:
    def __init__(self, node: Node, base: str, session: aiohttp.ClientSession) -> None:
        self.node = node
        self.base = base
        self.session = session

    async def get(self, pod: str, name: str = "app", **query: str) -> tuple[int, str]:
        url = f"{self.base}/containerLogs/default/{pod}/{name}"
        async with self.session.get(url, params=query) as r:
            return r.status, await r.text()

    def stream(self, pod: str, name: str = "app", **query: str) -> Any:
        return self.session.get(f"{self.base}/containerLogs/default/{pod}/{name}", params=query)


@pytest.fixture
async def logs(containerd: RuntimeEnv, tmp_path: Path) -> AsyncIterator[Logs]:
    async with running_node(containerd, tmp_path) as node:
        app = web.Application()
        app.add_routes(routes)
        app[LOGS] = ContainerLogs(
            runtime=node.managers.connection, pods=node.managers.pod, clock=RealClock()
        )
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as session:
                yield Logs(node, str(server.make_url("")).rstrip("/"), session)
        finally:
            await server.close()


def running(logs: Logs, pod: str) -> Any:
    return lambda: phase(logs.node.pod(pod)) == "Running"


async def test_plain_tail_since_timestamps_limit_and_stream(logs: Logs) -> None:
    script = "for i in 1 2 3 4 5; do echo out $i; echo err $i >&2; done; sleep 3600"
    logs.node.create(
        "writer", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])]
    )
    await until("Running", running(logs, "writer"), within=30)

    async def all_written() -> bool:
        return (await logs.get("writer"))[1].count("\n") == 10

    await until("ten lines", all_written, within=10)
    status, text = await logs.get("writer")
    assert status == 200
    lines = text.splitlines()
    assert [x for x in lines if x.startswith("out")] == [f"out {i}" for i in range(1, 6)]
    assert [x for x in lines if x.startswith("err")] == [f"err {i}" for i in range(1, 6)]
    assert (await logs.get("writer", tailLines="2"))[1].splitlines() == lines[-2:]
    assert (await logs.get("writer", stream="Stdout"))[1] == "".join(
        f"out {i}\n" for i in range(1, 6)
    )
    assert (await logs.get("writer", stream="Stderr"))[1].startswith("err 1\nerr 2\n")
    assert (await logs.get("writer", limitBytes="7"))[1] == text[:7]
    stamped = (await logs.get("writer", timestamps="true"))[1].splitlines()
    assert [s.split(" ", 1)[1] for s in stamped] == lines
    first = dt.datetime.fromisoformat(stamped[0].split(" ")[0][:26] + "+00:00")
    assert abs(first - dt.datetime.now(dt.UTC)) < dt.timedelta(seconds=60)
    assert len(stamped[0].split(" ")[0]) == len("2026-11-25T04:00:00.000000000Z")
    # sinceTime after the last line: nothing; sinceSeconds=60: everything
    later = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert await logs.get("writer", sinceTime=later) == (200, "")
    assert (await logs.get("writer", sinceSeconds="60"))[1] == text
    # the kubelet's errors
    assert await logs.get("writer", name="nope") == (
        404,
        'container "nope" not found in pod "writer"\n',
    )
    assert await logs.get("writer", previous="true") == (
        400,
        'previous terminated container "app" in pod "writer" not found\n',
    )
    status, text = await logs.get("writer", tailLines="x")
    assert (status, text) == (400, "tailLines: Invalid value: 'x': must be an integer\n")


async def test_follow_delivers_each_line_within_a_second_and_ends_with_the_container(
    logs: Logs,
) -> None:
    script = "i=0; while [ $i -lt 8 ]; do echo tick $i; i=$((i+1)); sleep 0.5; done"
    logs.node.create(
        "ticker",
        restart_policy="Never",
        containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])],
    )
    await until("Running", running(logs, "ticker"), within=30)
    latencies = []
    got = []
    started = time.monotonic()
    async with logs.stream("ticker", follow="true", timestamps="true") as r:
        assert r.status == 200
        async for raw in r.content:
            received = time.time()
            stamp, line = raw.decode().rstrip("\n").split(" ", 1)
            written = dt.datetime.fromisoformat(stamp[:26] + "+00:00").timestamp()
            latencies.append(received - written)
            got.append(line)
    # the stream ended by itself once the container exited
    assert got == [f"tick {i}" for i in range(8)]
    assert time.monotonic() - started < 15
    live = latencies[1:]  # the first line may predate the request
    assert max(live) < 1.0, latencies
    print(f"follow latency: max {max(live) * 1000:.1f} ms, mean {sum(live) / len(live) * 1000:.1f}")


async def test_previous_reads_the_instance_before_a_restart(logs: Logs) -> None:
    script = "echo started at $(cat /proc/uptime); sleep 1; exit 3"
    logs.node.create(
        "flappy", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])]
    )

    def restarted() -> Any:
        app = status_of(logs.node.pod("flappy"))
        return app if app.get("restartCount", 0) >= 1 and app.get("lastState") else None

    app = await until("a restart", restarted, within=40)
    status, previous = await logs.get("flappy", previous="true")
    assert status == 200
    assert previous.startswith("started at ")
    assert previous.count("\n") == 1
    # the previous instance is the one lastState names
    last_id = app["lastState"]["terminated"]["containerID"]
    assert last_id != app.get("containerID")
    # the current instance (running, or exited and waiting in back-off) has its own line
    status, current = await logs.get("flappy")
    assert status == 200
    assert current.startswith("started at ") and current != previous


async def test_a_100mb_writer_is_rotated_at_10mib_keeping_5_files(logs: Logs) -> None:
    # 1,000,000 numbered lines of 100 bytes, ~3 MB/s: rotations every few checks
    script = (
        "awk 'BEGIN { for (i = 1; i <= 1000000; i++) {"
        ' printf "%08d %090s\\n", i, "x"; if (i % 30000 == 0) system("sleep 1") } }\';'
        " sleep 3600"
    )
    uid = logs.node.create(
        "chatty", containers=[container("app", image=BUSYBOX_IMAGE, command=["sh", "-c", script])]
    )
    await until("Running", running(logs, "chatty"), within=30)
    policy = RotationPolicy(max_size=10 * 2**20, max_files=5, interval=3.0)
    manager = RotationManager(
        runtime=logs.node.managers.connection, clock=RealClock(), policy=policy
    )
    task = asyncio.create_task(manager.run())
    try:

        async def last_line() -> bool:
            status, text = await logs.get("chatty", tailLines="1")
            return status == 200 and text.startswith("01000000 ")

        await until("the millionth line", last_line, within=120, every=1)
        # one more check so the final size is below the limit or rotated
        await asyncio.sleep(policy.interval + 1)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    log_dir = Path(logs.node.settings.pod_logs_dir)
    files = await asyncio.to_thread(lambda: sorted(log_dir.rglob("0.log*")))
    names = [p.name for p in files]
    assert manager.rotations >= 4, names
    assert len(files) == 5, names
    assert names[0] == "0.log"
    rotated = names[1:]
    assert all(n.endswith(".gz") for n in rotated[:-2]), names
    assert not rotated[-1].endswith(".gz"), names
    # what is left reads back in order, up to the last line
    status, text = await logs.get("chatty")
    assert status == 200
    lines = text.splitlines()
    # containerd tears the line it is reading at each rotation (the old file ends with its
    # start as a partial record, the new one starts with the rest); the reader joins the two,
    # but the oldest file left may start with the rest of a line whose start was removed
    if not re.match(r"\d{8} ", lines[0]):
        assert re.fullmatch(r" *x", lines[0]), lines[:2]
        lines = lines[1:]
    numbers = [int(line[:8]) for line in lines]
    assert numbers[-1] == 1_000_000
    assert numbers == list(range(numbers[0], 1_000_001))
    assert numbers[0] > 1  # the oldest files were removed
    print(f"rotations: {manager.rotations}; kept {len(numbers)} lines in {names}; pod {uid}")

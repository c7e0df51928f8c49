"""Container log rotation: the kubelet's plan, and the manager on a fake runtime and clock."""

from __future__ import annotations

import datetime as dt
import gzip
from pathlib import Path

import pytest

from nodeagent.clock import FrozenClock
from nodeagent.config import Config
from nodeagent.containerlogs.options import LogOptions
from nodeagent.containerlogs.reader import read_log
from nodeagent.containerlogs.rotation import (
    RotationManager,
    RotationPlan,
    RotationPolicy,
    plan_rotation,
    rotation_policy,
)
from nodeagent.kuberuntime import CriUnknown
from nodeagent.kuberuntime import types as cri
from nodeagent.testing.fake_runtime import FakeRuntime

POLICY = RotationPolicy(max_size=100, max_files=5)
LOG = "/p/app/0.log"


def test_small_log_is_left_alone() -> None:
    assert plan_rotation(LOG, [], size=99, policy=POLICY, now_stamp="x") is None


def test_first_rotation_just_renames() -> None:
    assert plan_rotation(LOG, [], size=100, policy=POLICY, now_stamp="20261125-040000") == (
        RotationPlan(remove=(), compress=(), rotate_to=LOG + ".20261125-040000")
    )


def test_steady_state_keeps_max_files_and_the_newest_rotated_plain() -> None:
    rotated = [
        LOG + ".20261125-040000.gz",
        LOG + ".20261125-040010.gz",
        LOG + ".20261125-040020.gz",
        LOG + ".20261125-040030",
        LOG + ".20261125-040040",
    ]
    plan = plan_rotation(LOG, rotated, size=500, policy=POLICY, now_stamp="20261125-040050")
    assert plan == RotationPlan(
        remove=(LOG + ".20261125-040000.gz", LOG + ".20261125-040010.gz"),
        compress=(LOG + ".20261125-040030",),
        rotate_to=LOG + ".20261125-040050",
    )
    # after it: 2 rotated + compressed one + new rotated + current = 5 files


def test_leftovers_of_an_interrupted_compression_are_removed() -> None:
    rotated = [LOG + ".1", LOG + ".1.gz", LOG + ".2.gz.tmp", LOG + ".2"]
    plan = plan_rotation(LOG, rotated, size=500, policy=POLICY, now_stamp="3")
    assert plan is not None
    assert plan.remove == (LOG + ".1", LOG + ".2.gz.tmp")
    assert plan.compress == ()


def test_two_files_keep_no_rotated_file_before_the_rename() -> None:
    plan = plan_rotation(
        LOG, [LOG + ".1"], size=500, policy=RotationPolicy(max_size=1, max_files=2), now_stamp="2"
    )
    assert plan is not None
    assert plan.remove == (LOG + ".1",)


def test_policy_from_config() -> None:
    policy = rotation_policy(Config())
    assert policy == RotationPolicy(max_size=10 * 2**20, max_files=5, workers=1, interval=10.0)


IMAGE = "localhost:5000/busybox:1.36"


async def start(runtime: FakeRuntime, logdir: Path) -> str:
    runtime.publish(IMAGE)
    await runtime.pull_image(IMAGE)
    sandbox = cri.sandbox_config(name="w", namespace="d", uid="u", log_directory=str(logdir))
    sid = await runtime.run_pod_sandbox(sandbox)
    config = cri.ContainerConfig(
        metadata=cri.ContainerMetadata(name="app"),
        image=cri.ImageSpec(image=IMAGE),
        log_path="app/0.log",
    )
    cid = await runtime.create_container(sid, config, sandbox)
    await runtime.start_container(cid)
    (logdir / "app").mkdir()
    return cid


@pytest.mark.parametrize("workers", [1, 3])
async def test_manager_rotates_compresses_and_keeps_max_files(tmp_path: Path, workers: int) -> None:
    clock = FrozenClock(dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC))
    runtime = FakeRuntime(clock=clock)
    cid = await start(runtime, tmp_path)
    log = tmp_path / "app" / "0.log"
    manager = RotationManager(
        runtime=runtime,
        clock=clock,
        policy=RotationPolicy(max_size=1000, max_files=4, workers=workers),
    )
    written = []
    for round_ in range(6):
        lines = [
            f"2026-11-25T04:00:{round_:02d}Z stdout F round {round_} line {i}\n" for i in range(40)
        ]
        written += [f"round {round_} line {i}\n" for i in range(40)]
        with log.open("a") as f:
            f.write("".join(lines))
        await manager.rotate_all()
        # the fake's ReopenContainerLog records the call; the runtime would recreate the file
        log.touch()
        clock.advance(10)
    assert runtime.reopened == [cid] * 6
    names = sorted(p.name for p in (tmp_path / "app").iterdir())
    assert names == [
        "0.log",
        "0.log.20261125-040030.gz",
        "0.log.20261125-040040",
        "0.log.20261125-040050",
    ]
    with gzip.open(tmp_path / "app" / "0.log.20261125-040030.gz", "rt") as f:
        assert f.readline().endswith("round 3 line 0\n")

    async def exited() -> bool:
        return False

    text = b"".join([c async for c in read_log(str(log), LogOptions(), running=exited)])
    assert text.decode() == "".join(written[3 * 40 :])


async def test_a_failed_reopen_undoes_the_rename(tmp_path: Path) -> None:
    clock = FrozenClock(dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC))
    runtime = FakeRuntime(clock=clock)
    cid = await start(runtime, tmp_path)
    log = tmp_path / "app" / "0.log"
    log.write_text("x" * 2000)
    runtime.inject_error("ReopenContainerLog", CriUnknown("boom", rpc="ReopenContainerLog"))
    manager = RotationManager(
        runtime=runtime, clock=clock, policy=RotationPolicy(max_size=1000, max_files=4)
    )
    await manager.rotate_all()  # logged, not raised
    assert sorted(p.name for p in (tmp_path / "app").iterdir()) == ["0.log"]
    assert manager.rotations == 0
    assert await manager.rotate(cid)


async def test_each_running_containers_log_path_is_asked_of_the_runtime_once(
    tmp_path: Path,
) -> None:
    clock = FrozenClock(dt.datetime(2026, 11, 25, 4, 0, 0, tzinfo=dt.UTC))
    runtime = FakeRuntime(clock=clock)
    cid = await start(runtime, tmp_path)
    log = tmp_path / "app" / "0.log"
    manager = RotationManager(
        runtime=runtime, clock=clock, policy=RotationPolicy(max_size=1000, max_files=4)
    )
    for _ in range(3):
        log.write_text("x" * 10)
        await manager.rotate_all()
    assert runtime.calls.count("ContainerStatus") == 1
    assert runtime.calls.count("ListContainers") == 3
    # still rotated from the remembered path once the log is due
    log.write_text("x" * 2000)
    await manager.rotate_all()
    assert runtime.reopened == [cid]
    assert runtime.calls.count("ContainerStatus") == 1

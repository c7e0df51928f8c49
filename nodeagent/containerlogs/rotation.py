"""Container log rotation: the kubelet's container log manager.

Every ``containerLogMonitorInterval`` the manager lists the running containers and reads each
one's log path, from CRI ``ContainerStatus`` the first time it sees the container and from its
own memory after that (a container's log path is fixed at its creation; the kubelet asks on every
pass, some 1,500 calls a minute on a node of 250 pods); a log of ``containerLogMaxSize`` or more
is rotated (at most ``containerLogMaxWorkers`` at once), in the kubelet's order
(:func:`plan_rotation` is the policy, :class:`RotationManager` the effects):

1. remove leftovers: ``*.tmp`` from an interrupted compression, and a plain rotated file whose
   ``.gz`` exists;
2. remove the oldest rotated files beyond ``containerLogMaxFiles - 2`` (the current file and the
   one about to be rotated make up the rest);
3. gzip every rotated file but the newest (``<f>.gz.tmp``, renamed to ``<f>.gz``, then ``<f>``
   removed), so a reader that has the newest open keeps reading plain text;
4. rename ``<log>`` to ``<log>.<YYYYMMDD-HHMMSS>`` and call CRI ``ReopenContainerLog``: the
   runtime creates a new ``<log>``. If that fails, the rename is undone.

A log file that has disappeared gets a ``ReopenContainerLog`` (the runtime recreates it), as in
the kubelet. Compression and file system calls run in ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import gzip
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from nodeagent import quantity
from nodeagent.clock import Clock
from nodeagent.config import Config
from nodeagent.kuberuntime import CriError, CriNotFound, RuntimeService
from nodeagent.kuberuntime import types as cri
from nodeagent.log import Logger, get_logger

TIMESTAMP_FORMAT: Final = "%Y%m%d-%H%M%S"
TMP_SUFFIX: Final = ".tmp"
GZ_SUFFIX: Final = ".gz"


@dataclass(frozen=True, slots=True)
class RotationPolicy:
    max_size: int
    max_files: int
    workers: int = 1
    interval: float = 10.0


@dataclass(frozen=True, slots=True)
class RotationPlan:
    remove: tuple[str, ...]
    compress: tuple[str, ...]
    rotate_to: str


def plan_rotation(
    log: str, rotated: Sequence[str], *, size: int, policy: RotationPolicy, now_stamp: str
) -> RotationPlan | None:
    """What to do with ``log`` of ``size`` bytes whose rotated files (``<log>.*``) are
    ``rotated``; None while it is smaller than ``max_size``."""
    if size < policy.max_size:
        return None
    names = set(rotated)
    leftovers = [
        n
        for n in names
        if n.endswith(TMP_SUFFIX) or (not n.endswith(GZ_SUFFIX) and n + GZ_SUFFIX in names)
    ]
    live = sorted(names - set(leftovers))
    keep = max(policy.max_files - 2, 0)
    excess = live[: max(len(live) - keep, 0)]
    kept = live[len(excess) :]
    compress = [n for n in kept[:-1] if not n.endswith(GZ_SUFFIX)]
    return RotationPlan(
        remove=tuple(sorted(leftovers) + excess),
        compress=tuple(compress),
        rotate_to=f"{log}.{now_stamp}",
    )


def _compress(path: str) -> None:
    tmp = path + GZ_SUFFIX + TMP_SUFFIX
    with open(path, "rb") as src, gzip.open(tmp, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    os.rename(tmp, path + GZ_SUFFIX)
    os.unlink(path)


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _size(path: str) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


class RotationManager:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        clock: Clock,
        policy: RotationPolicy,
        log: Logger | None = None,
    ) -> None:
        self._runtime = runtime
        self._clock = clock
        self._policy = policy
        self._log = log or get_logger("containerlogs")
        self.rotations = 0
        # container id -> its log path ("" if it has none), for the containers last listed
        self._log_paths: dict[str, str] = {}

    @property
    def name(self) -> str:
        return "containerlogs"

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self._policy.interval)
            try:
                await self.rotate_all()
            except CriError as e:
                self._log.error("Failed to rotate container logs", error=str(e))

    async def rotate_all(self) -> None:
        """One pass over the running containers."""
        running = cri.ContainerFilter(state=cri.ContainerStateValue(state=cri.CONTAINER_RUNNING))
        containers = await self._runtime.list_containers(running)
        listed = {c.id for c in containers}
        self._log_paths = {k: v for k, v in self._log_paths.items() if k in listed}
        slots = asyncio.Semaphore(self._policy.workers)

        async def one(container_id: str) -> None:
            async with slots:
                try:
                    await self.rotate(container_id)
                except (CriError, OSError) as e:
                    self._log.error(
                        "Failed to rotate log for container",
                        container_id=container_id,
                        error=str(e),
                    )

        async with asyncio.TaskGroup() as tg:
            for c in containers:
                tg.create_task(one(c.id))

    async def rotate(self, container_id: str) -> bool:
        """Rotate one container's log if it is due; True when it was rotated."""
        path = await self._log_path(container_id)
        if not path:
            return False
        size = await asyncio.to_thread(_size, path)
        if size is None:
            # the runtime lost its file (a failed rotation): have it reopen one
            await self._runtime.reopen_container_log(container_id)
            size = await asyncio.to_thread(_size, path)
            if size is None:
                return False
        rotated = await asyncio.to_thread(glob.glob, glob.escape(path) + ".*")
        plan = plan_rotation(
            path,
            rotated,
            size=size,
            policy=self._policy,
            now_stamp=self._clock.now().strftime(TIMESTAMP_FORMAT),
        )
        if plan is None:
            return False
        for name in plan.remove:
            await asyncio.to_thread(_remove, name)
        for name in plan.compress:
            await asyncio.to_thread(_compress, name)
        await asyncio.to_thread(os.rename, path, plan.rotate_to)
        try:
            await self._runtime.reopen_container_log(container_id)
        except CriError:
            await asyncio.to_thread(os.rename, plan.rotate_to, path)
            raise
        self.rotations += 1
        self._log.v(2).info(
            "Rotated container log", container_id=container_id, path=path, size=size
        )
        return True

    async def _log_path(self, container_id: str) -> str | None:
        """The container's log path: asked of the runtime once, then remembered until the
        container is no longer listed running. None when the runtime no longer knows it."""
        path = self._log_paths.get(container_id)
        if path is None:
            try:
                status = (await self._runtime.container_status(container_id)).status
            except CriNotFound:
                return None
            path = self._log_paths[container_id] = status.log_path
        return path


def rotation_policy(config: Config) -> RotationPolicy:
    k = config.kubelet
    return RotationPolicy(
        max_size=quantity.value(k.container_log_max_size),
        max_files=k.container_log_max_files,
        workers=k.container_log_max_workers,
        interval=k.container_log_monitor_interval.seconds,
    )

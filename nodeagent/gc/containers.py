"""Container GC: every minute, remove dead containers, dead sandboxes and the logs of pods
that are gone, as the kubelet's ``containerGC.GarbageCollect`` does.

One run: list containers, remove those :func:`policy.containers_to_remove` picks (a container
in unknown state is stopped first; its log files and ``/var/log/containers`` symlink go with
it); list again and remove the sandboxes :func:`policy.sandboxes_to_remove` picks (stopped
first); remove the log directories of pods that are gone; remove dangling
``/var/log/containers`` symlinks of containers that are no longer running. Removal failures
are logged and skipped; a failed listing fails the run, which is logged and recorded as a
``ContainerGCFailed`` Node event.

Only sandboxes and containers carrying the kubelet's ``io.kubernetes.pod.uid`` label are
touched: what this agent did not create is not its garbage.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

from nodeagent.clock import Clock
from nodeagent.events import EventSink
from nodeagent.gc.files import GcFiles, LocalFiles
from nodeagent.gc.podstate import PodsView
from nodeagent.gc.policy import (
    CONTAINER_GC_PERIOD,
    ContainerGCPolicy,
    DeadContainer,
    RuntimeContainer,
    Sandbox,
    container_id_of_log_symlink,
    containers_to_remove,
    evictable_containers,
    log_dirs_to_remove,
    sandboxes_to_remove,
)
from nodeagent.kuberuntime import labels
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError, CriNotFound
from nodeagent.kuberuntime.podfiles import legacy_log_symlink
from nodeagent.kuberuntime.service import RuntimeService
from nodeagent.log import Logger, get_logger

CONTAINER_GC_FAILED: Final = "ContainerGCFailed"
MIN_GRACE_PERIOD: Final = 2  # minimumGracePeriodInSeconds


@dataclass
class ContainerGCResult:
    containers: list[str] = field(default_factory=list)
    sandboxes: list[str] = field(default_factory=list)
    log_dirs: list[str] = field(default_factory=list)
    symlinks: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.containers or self.sandboxes or self.log_dirs or self.symlinks)


def runtime_container(c: cri.Container) -> RuntimeContainer:
    return RuntimeContainer(
        id=c.id,
        pod_uid=c.labels[labels.POD_UID],
        name=c.metadata.name or c.labels.get(labels.CONTAINER_NAME, ""),
        sandbox_id=c.pod_sandbox_id,
        created_at=c.created_at,
        running=c.state == cri.CONTAINER_RUNNING,
        unknown=c.state == cri.CONTAINER_UNKNOWN,
    )


class ContainerGC:
    def __init__(
        self,
        *,
        runtime: RuntimeService,
        pods: PodsView,
        clock: Clock,
        events: EventSink,
        pod_logs_dir: str,
        container_logs_dir: str,
        policy: ContainerGCPolicy = ContainerGCPolicy(),  # noqa: B008 - frozen
        files: GcFiles | None = None,
        period: float = CONTAINER_GC_PERIOD,
        log: Logger | None = None,
    ) -> None:
        self._runtime = runtime
        self._pods = pods
        self._clock = clock
        self._events = events
        self._pod_logs_dir = pod_logs_dir
        self._container_logs_dir = container_logs_dir
        self._policy = policy
        self._files: GcFiles = files or LocalFiles()
        self._period = period
        self._log = log or get_logger("gc.containers")

    @property
    def name(self) -> str:
        return "gc:containers"

    async def run(self) -> None:
        failed = False
        while True:
            try:
                result = await self.garbage_collect()
            except (CriError, OSError) as e:
                self._log.error("Container garbage collection failed", error=str(e))
                text = e.status_text if isinstance(e, CriError) else str(e)
                self._events.record("Warning", CONTAINER_GC_FAILED, text)
                failed = True
            else:
                self._log.v(1 if failed else 4).info("Container garbage collection succeeded")
                failed = False
                if not result.empty:
                    self._log.info(
                        "Garbage collected dead containers",
                        containers=len(result.containers),
                        sandboxes=len(result.sandboxes),
                        pod_log_dirs=len(result.log_dirs),
                    )
            await asyncio.sleep(self._period)

    async def garbage_collect(
        self, *, terminated: Callable[[str], bool] | None = None
    ) -> ContainerGCResult:
        """One pass. ``terminated``: also remove everything of pods that finished but still
        exist (the kubelet's ``evictNonDeletedPods``, what the eviction manager asks for under
        disk pressure: an evicted pod's writable layer is what frees the disk)."""
        result = ContainerGCResult()
        exists = self._pods.pod_exists()
        ready = exists is not None

        def removable(uid: str) -> bool:
            if terminated is not None and terminated(uid):
                return True
            return exists is not None and not exists(uid)

        listed = await self._runtime.list_containers()
        ours = {c.id: c for c in listed if labels.POD_UID in c.labels}
        now_ns = int(self._clock.now().timestamp() * 1e9)
        dead = evictable_containers(
            (runtime_container(c) for c in ours.values()),
            now_ns=now_ns,
            min_age=self._policy.min_age,
        )
        for container in containers_to_remove(dead, policy=self._policy, removable=removable):
            if await self._remove_container(container, ours[container.id]):
                result.containers.append(container.id)

        in_use = {c.pod_sandbox_id for c in await self._runtime.list_containers()}
        sandboxes = [
            Sandbox(
                id=s.id,
                pod_uid=s.metadata.uid or s.labels[labels.POD_UID],
                created_at=s.created_at,
                ready=s.state == cri.SANDBOX_READY,
            )
            for s in await self._runtime.list_pod_sandbox()
            if labels.POD_UID in s.labels
        ]
        for sandbox in sandboxes_to_remove(sandboxes, in_use=in_use, removable=removable):
            if await self._remove_sandbox(sandbox):
                result.sandboxes.append(sandbox.id)

        if ready:
            for name in log_dirs_to_remove(
                await self._files.list_dir(self._pod_logs_dir), removable=removable
            ):
                path = os.path.join(self._pod_logs_dir, name)
                if await self._try(self._files.remove_tree(path), "remove pod log directory", path):
                    result.log_dirs.append(path)
        result.symlinks = await self._remove_dangling_symlinks()
        return result

    async def _try(self, action: Awaitable[None], what: str, path: str) -> bool:
        try:
            await action
        except OSError as e:
            self._log.error(f"Failed to {what}", path=path, error=str(e))
            return False
        self._log.v(2).info(f"Garbage collected: {what}", path=path)
        return True

    async def _remove_container(self, dead: DeadContainer, listed: cri.Container) -> bool:
        log = self._log.bind(
            pod_namespace=listed.labels.get(labels.POD_NAMESPACE, ""),
            pod_name=listed.labels.get(labels.POD_NAME, ""),
            pod_uid=dead.pod_uid,
            container_name=dead.name,
            container_id=dead.id,
        )
        try:
            if dead.unknown:
                grace = labels.grace_period_of(listed.annotations, MIN_GRACE_PERIOD)
                await self._runtime.stop_container(dead.id, max(grace or 0, MIN_GRACE_PERIOD))
            log_path = (await self._runtime.container_status(dead.id)).status.log_path
            if log_path:
                await self._files.remove_container_log(log_path)
            await self._files.unlink(
                legacy_log_symlink(
                    self._container_logs_dir,
                    pod=listed.labels.get(labels.POD_NAME, ""),
                    namespace=listed.labels.get(labels.POD_NAMESPACE, ""),
                    container=dead.name,
                    container_id=dead.id,
                )
            )
            await self._runtime.remove_container(dead.id)
        except CriNotFound:
            return False
        except (CriError, OSError) as e:
            log.error("Failed to remove container", error=str(e))
            return False
        log.v(2).info("Removed dead container")
        return True

    async def _remove_sandbox(self, sandbox: Sandbox) -> bool:
        try:
            # Normally stopped already; stopping first guards against the rare case it is not.
            await self._runtime.stop_pod_sandbox(sandbox.id)
            await self._runtime.remove_pod_sandbox(sandbox.id)
        except CriNotFound:
            return False
        except CriError as e:
            self._log.error("Failed to remove sandbox", sandbox_id=sandbox.id, error=str(e))
            return False
        self._log.v(2).info("Removed dead sandbox", sandbox_id=sandbox.id, pod_uid=sandbox.pod_uid)
        return True

    async def _remove_dangling_symlinks(self) -> list[str]:
        """``/var/log/containers`` links whose log is gone, unless their container still
        runs (its log is being rotated)."""
        removed = []
        for path in await self._files.dangling_links(self._container_logs_dir, ".log"):
            container_id = container_id_of_log_symlink(os.path.basename(path))
            if container_id:
                try:
                    status = (await self._runtime.container_status(container_id)).status
                    if status.state != cri.CONTAINER_EXITED:
                        continue
                except CriError as e:
                    self._log.v(4).info("No status for a dangling log symlink", error=str(e))
            if await self._try(self._files.unlink(path), "remove dangling log symlink", path):
                removed.append(path)
        return removed

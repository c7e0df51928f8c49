"""The allocation manager: which resources each pod runs with, and its resize conditions.

The allocation of a pod is checkpointed in ``<rootDir>/allocated_pods_state`` (JSON, written
atomically) the first time the pod is synced, and again each time a resize is accepted, so a
restarted agent keeps enforcing what it had accepted rather than whatever the spec says now.
Beside it, per pod, what the running containers were last given (*actuated*): a container the
agent starts gets its allocation, one it resizes in place gets it once the runtime accepted the
update.

:meth:`AllocationManager.allocate` is the kubelet's ``handlePodResourcesResize``: it returns the
pod with its allocated resources; when the spec asks for others it runs the resize admission
(:func:`policy.resize_admission`) and either accepts them (new checkpoint, ``PodResizeInProgress``,
``ResizeStarted``) or leaves ``PodResizePending`` with ``Infeasible``/``Deferred`` and the
kubelet's message (``ResizeInfeasible``/``ResizeDeferred`` once per change). The conditions live
in memory, as the kubelet's status manager keeps them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from nodeagent.allocation import policy
from nodeagent.allocation.policy import Allocation, Resources
from nodeagent.atomicfile import write_atomic
from nodeagent.events import DiscardEvents, ObjectEventSink, pod_reference
from nodeagent.kuberuntime.resources import SwapInputs
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod

STATE_FILE: Final = "allocated_pods_state"
DEFERRED_RETRY: Final = 30.0
"""A deferred resize is looked at again this often (the kubelet's ``initialRetryDelay``)."""


@dataclass(slots=True)
class _PodState:
    allocation: Allocation
    actuated: Allocation = field(default_factory=dict)
    generation: int = 0
    saved: bool = True


@dataclass(slots=True)
class _Conditions:
    pending: dict[str, Any] | None = None
    in_progress: dict[str, Any] | None = None


class AllocationManager:
    def __init__(
        self,
        *,
        path: Path | None,
        allocatable: Callable[[], Mapping[str, str] | None],
        active_pods: Callable[[], Sequence[Pod]] = list,
        swap: SwapInputs | None = None,
        events: ObjectEventSink | None = None,
        log: Logger | None = None,
    ) -> None:
        """``path``: the checkpoint (None: in memory only, for tests)."""
        self._path = path
        self._allocatable = allocatable
        self._active_pods = active_pods
        self._swap = swap
        self._events: ObjectEventSink = events or DiscardEvents()
        self._log = log or get_logger("allocation")
        self._pods: dict[str, _PodState] = {}
        self._conditions: dict[str, _Conditions] = {}
        self._loaded = path is None
        self._load_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()

    # --- checkpoint -------------------------------------------------------------------

    async def load(self) -> None:
        """Read the checkpoint once (a missing or unreadable one starts empty, logged)."""
        async with self._load_lock:
            if self._loaded or self._path is None:
                return
            self._loaded = True
            try:
                text = await asyncio.to_thread(self._path.read_text)
            except FileNotFoundError:
                return
            except OSError as e:
                self._log.error(
                    "Cannot read the allocation checkpoint", path=str(self._path), error=str(e)
                )
                return
            try:
                pods = json.loads(text).get("pods", {})
                for uid, entry in pods.items():
                    self._pods[uid] = _PodState(
                        allocation=entry["allocation"],
                        actuated=entry.get("actuated", {}),
                        generation=int(entry.get("generation", 0)),
                    )
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                self._log.error(
                    "Ignoring an unreadable allocation checkpoint",
                    path=str(self._path),
                    error=str(e),
                )
                self._pods.clear()

    async def _save(self) -> None:
        if self._path is None:
            return
        async with self._write_lock:
            body = {
                uid: {
                    "allocation": s.allocation,
                    "actuated": s.actuated,
                    "generation": s.generation,
                }
                for uid, s in self._pods.items()
            }
            text = json.dumps({"pods": body}, sort_keys=True)
            for state in self._pods.values():
                state.saved = True
            try:
                await asyncio.to_thread(write_atomic, self._path, text.encode(), mode=0o600)
            except OSError as e:
                self._log.error(
                    "Cannot write the allocation checkpoint", path=str(self._path), error=str(e)
                )

    # --- reading ----------------------------------------------------------------------

    def allocated(self, pod: Pod) -> Pod:
        """``pod`` with its allocated resources (itself when none is recorded)."""
        state = self._pods.get(pod.uid)
        return policy.allocated_pod(pod, state.allocation if state else None)[0]

    def allocated_pods(self, pods: Sequence[Pod]) -> list[Pod]:
        return [self.allocated(p) for p in pods]

    def allocation(self, uid: str) -> Allocation:
        state = self._pods.get(uid)
        return dict(state.allocation) if state else {}

    def actuated(self, uid: str) -> Allocation:
        state = self._pods.get(uid)
        return dict(state.actuated) if state else {}

    def conditions(self, uid: str) -> list[dict[str, Any]]:
        """``PodResizePending`` and ``PodResizeInProgress`` as the status should carry them."""
        c = self._conditions.get(uid)
        if c is None:
            return []
        return [x for x in (c.pending, c.in_progress) if x is not None]

    def deferred(self, uid: str) -> bool:
        c = self._conditions.get(uid)
        return (
            c is not None and c.pending is not None and c.pending.get("reason") == policy.DEFERRED
        )

    def in_progress(self, uid: str) -> bool:
        c = self._conditions.get(uid)
        return c is not None and c.in_progress is not None

    # --- deciding ---------------------------------------------------------------------

    def admitted(self, pod: Pod) -> None:
        """``pod`` was just admitted with the resources its spec has: they are its allocation
        from now on (the kubelet's ``AddPod`` checkpoints them then), so a resize that
        arrives before its first sync goes through resize admission. The pod's first sync
        writes the checkpoint. A pod the checkpoint already has keeps that allocation."""
        if pod.uid not in self._pods:
            self._pods[pod.uid] = _PodState(
                allocation=policy.allocation_of(pod),
                generation=pod.metadata.generation,
                saved=False,
            )

    async def allocate(self, pod: Pod) -> Pod:
        """The kubelet's ``handlePodResourcesResize``; returns the pod as allocated."""
        await self.load()
        state = self._pods.get(pod.uid)
        if state is None:
            self._pods[pod.uid] = _PodState(
                allocation=policy.allocation_of(pod), generation=pod.metadata.generation
            )
            await self._save()
            return pod
        if not state.saved:
            await self._save()
        allocated, requested = policy.allocated_pod(pod, state.allocation)
        conditions = self._conditions.setdefault(pod.uid, _Conditions())
        if not requested:
            conditions.pending = None
            return pod
        others = [self.allocated(p) for p in self._active_pods() if p.uid != pod.uid]
        decision = policy.resize_admission(
            pod,
            allocated,
            allocatable=self._allocatable() or {},
            others=others,
            swap=self._swap,
        )
        generation = pod.metadata.generation
        if decision.accepted:
            state.allocation = policy.allocation_of(pod)
            state.generation = generation
            await self._save()
            conditions.pending = None
            conditions.in_progress = policy.condition(policy.IN_PROGRESS, generation=generation)
            self._record(
                pod,
                "Normal",
                policy.RESIZE_STARTED,
                policy.event_message("Pod resize started", pod, generation),
            )
            self._log.info(
                "Pod resize accepted",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                generation=generation,
            )
            return pod
        pending = policy.condition(
            policy.PENDING, reason=decision.reason, message=decision.message, generation=generation
        )
        if conditions.pending != pending:
            conditions.pending = pending
            reason = (
                policy.RESIZE_INFEASIBLE
                if decision.reason == policy.INFEASIBLE
                else policy.RESIZE_DEFERRED
            )
            self._record(
                pod,
                "Warning",
                reason,
                policy.event_message(
                    f"Pod resize {decision.reason}", pod, generation, decision.message
                ),
            )
            self._log.info(
                "Pod resize pending",
                pod_namespace=pod.namespace,
                pod_name=pod.name,
                pod_uid=pod.uid,
                reason=decision.reason,
                message=decision.message,
            )
        return allocated

    async def set_actuated(self, uid: str, values: Mapping[str, Resources]) -> None:
        """The running containers ``values`` names now run with those resources."""
        state = self._pods.get(uid)
        if state is None or all(state.actuated.get(k) == v for k, v in values.items()):
            return
        state.actuated.update(values)
        await self._save()

    def resize_failed(self, pod: Pod, error: str) -> None:
        """Applying the accepted resize failed: ``PodResizeInProgress`` with ``Error`` (the
        next sync tries again), ``ResizeError`` once per distinct error."""
        conditions = self._conditions.setdefault(pod.uid, _Conditions())
        generation = self._generation(pod)
        failed = policy.condition(
            policy.IN_PROGRESS, reason=policy.ERROR, message=error, generation=generation
        )
        if conditions.in_progress == failed:
            return
        conditions.in_progress = failed
        self._record(
            pod,
            "Warning",
            policy.RESIZE_ERROR,
            policy.event_message("Pod resize error", pod, generation, error),
        )

    def resize_applying(self, pod: Pod) -> None:
        """A resize is being actuated (after an agent restart the condition is back)."""
        conditions = self._conditions.setdefault(pod.uid, _Conditions())
        if conditions.in_progress is None:
            conditions.in_progress = policy.condition(
                policy.IN_PROGRESS, generation=self._generation(pod)
            )

    def resize_done(self, pod: Pod) -> None:
        """Every running container runs with its allocation: clear ``PodResizeInProgress``
        and record ``ResizeCompleted``."""
        conditions = self._conditions.get(pod.uid)
        if conditions is None or conditions.in_progress is None:
            return
        conditions.in_progress = None
        generation = self._generation(pod)
        self._record(
            pod,
            "Normal",
            policy.RESIZE_COMPLETED,
            policy.event_message("Pod resize completed", pod, generation),
        )
        self._log.info(
            "Pod resize completed",
            pod_namespace=pod.namespace,
            pod_name=pod.name,
            pod_uid=pod.uid,
            generation=generation,
        )

    def _generation(self, pod: Pod) -> int:
        state = self._pods.get(pod.uid)
        return state.generation if state is not None else pod.metadata.generation

    def _record(self, pod: Pod, kind: str, reason: str, message: str) -> None:
        self._events.record_for(pod_reference(pod), kind, reason, message)

    async def remove_pod(self, uid: str) -> None:
        self._conditions.pop(uid, None)
        if self._pods.pop(uid, None) is not None:
            await self._save()

    async def remove_orphans(self, keep: Callable[[str], bool]) -> None:
        gone = [uid for uid in self._pods if not keep(uid)]
        for uid in gone:
            self._pods.pop(uid, None)
            self._conditions.pop(uid, None)
        if gone:
            await self._save()

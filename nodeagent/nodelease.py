"""The node Lease heartbeat: ``kube-node-lease/<node>``, renewed every 10s.

Behaviour (the kubelet's ``component-helpers/apimachinery/lease`` controller):

- ``run()`` repeats :meth:`NodeLeaseController.sync`, sleeping ``renew_interval`` (0.25 x the
  40s duration = 10s) plus up to 4% jitter after each sync finishes.
- ``sync`` first PUTs a copy of the cached Lease with a new renewTime (no GET). If that fails
  after 5 tries it falls back to "ensure": GET, and on 404 create a fresh Lease; any error is
  retried with backoff 200ms, 400ms, ... capped at 7s, one log line per step.
- A 409 Conflict on update refetches the Lease and retries at once. A deleted Lease (404 on
  update) is recreated in the same sync.
- The Lease carries an ownerReference to the Node. Getting the Node is part of building the
  Lease, so no Lease is created or updated before the Node exists.
- Transport failures or timeouts on the second and later tries call ``on_repeated_failure``
  (the agent drops every API connection, ``ApiClient.reset_connections``, so the next try
  dials afresh).

It depends on nothing but the API, so it keeps renewing while other managers are busy and
through a graceful node shutdown; the agent starts it right after the API client, so it is
stopped just before it, after every other manager.
"""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable

from nodeagent.apiserver import (
    LEASES,
    NODES,
    Api,
    ApiError,
    Backoff,
    Conflict,
    NotFound,
    Obj,
    Timeout,
    TransportError,
    jittered,
)
from nodeagent.clock import Clock
from nodeagent.gotext import rfc3339_micro
from nodeagent.log import Logger, get_logger

LEASE_NAMESPACE = "kube-node-lease"
DEFAULT_LEASE_DURATION_SECONDS = 40
RENEW_INTERVAL_FRACTION = 0.25
JITTER_FACTOR = 0.04
MAX_UPDATE_RETRIES = 5
BACKOFF_INITIAL = 0.2
BACKOFF_CAP = 7.0
REQUEST_TIMEOUT = 10.0


class LeaseUpdateFailed(ApiError):
    """Every update try of one sync failed."""


class NodeLeaseController:
    def __init__(
        self,
        *,
        api: Api,
        clock: Clock,
        node_name: str,
        lease_duration_seconds: int = DEFAULT_LEASE_DURATION_SECONDS,
        renew_interval: float | None = None,
        rand: Callable[[], float] = random.random,
        on_repeated_failure: Callable[[], Awaitable[None]] | None = None,
        on_renewed: Callable[[Obj], None] | None = None,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._clock = clock
        self._node = node_name
        self._duration = lease_duration_seconds
        self._renew = renew_interval or lease_duration_seconds * RENEW_INTERVAL_FRACTION
        self._rand = rand
        self._on_repeated_failure = on_repeated_failure
        self._on_renewed = on_renewed
        self._log = (log or get_logger("nodelease")).bind(node=node_name)
        self._latest: Obj | None = None

    @property
    def name(self) -> str:
        return "nodelease"

    @property
    def latest(self) -> Obj | None:
        """The Lease as last written by us (None before the first success)."""
        return copy.deepcopy(self._latest)

    async def run(self) -> None:
        self._log.info(
            "Starting node lease controller",
            renew_interval_s=self._renew,
            lease_duration_s=self._duration,
        )
        while True:
            await self.sync()
            await asyncio.sleep(jittered(self._renew, JITTER_FACTOR, self._rand()))

    async def sync(self) -> None:
        if self._latest is not None:
            try:
                await self._retry_update(self._latest)
                return
            except ApiError as e:
                self._log.info(
                    "Failed to update lease using latest lease, fallback to ensure lease",
                    error=str(e),
                )
        lease, created = await self._backoff_ensure()
        self._latest = lease
        if created:
            self._renewed(lease)
            return
        try:
            await self._retry_update(lease)
        except ApiError as e:
            self._log.error("Will retry updating lease", error=str(e), interval_s=self._renew)

    async def _retry_update(self, base: Obj) -> None:
        for attempt in range(MAX_UPDATE_RETRIES):
            try:
                lease = await self._new_lease(base)
                self._latest = await self._api.replace(
                    LEASES,
                    self._node,
                    lease,
                    namespace=LEASE_NAMESPACE,
                    request_timeout=REQUEST_TIMEOUT,
                )
                self._renewed(self._latest)
                return
            except Conflict as e:
                self._log.info("Lease changed under us; refetching", error=str(e))
                base, _ = await self._backoff_ensure()
                continue
            except ApiError as e:
                self._log.error("Failed to update lease", error=str(e), attempt=attempt + 1)
                if attempt > 0 and isinstance(e, TransportError | Timeout):
                    await self._repeated_failure()
        raise LeaseUpdateFailed(f"failed {MAX_UPDATE_RETRIES} attempts to update lease")

    async def _backoff_ensure(self) -> tuple[Obj, bool]:
        backoff = Backoff(initial=BACKOFF_INITIAL, cap=BACKOFF_CAP)
        while True:
            try:
                return await self._ensure()
            except ApiError as e:
                delay = backoff.next()
                if isinstance(e, ApiError) and e.retry_after:
                    delay = max(delay, e.retry_after)
                self._log.error(
                    "Failed to ensure lease exists, will retry", error=str(e), interval_s=delay
                )
                await asyncio.sleep(delay)

    async def _ensure(self) -> tuple[Obj, bool]:
        try:
            lease = await self._api.get(
                LEASES, self._node, namespace=LEASE_NAMESPACE, request_timeout=REQUEST_TIMEOUT
            )
            return lease, False
        except NotFound:
            pass
        fresh = await self._new_lease(None)
        created = await self._api.create(
            LEASES, fresh, namespace=LEASE_NAMESPACE, request_timeout=REQUEST_TIMEOUT
        )
        self._log.info("Created node lease", lease=f"{LEASE_NAMESPACE}/{self._node}")
        return created, True

    async def _new_lease(self, base: Obj | None) -> Obj:
        if base is None:
            lease: Obj = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self._node, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": self._node},
            }
        else:
            lease = copy.deepcopy(base)
        lease.setdefault("spec", {})
        lease["spec"]["leaseDurationSeconds"] = self._duration
        lease["spec"]["renewTime"] = rfc3339_micro(self._clock.now())
        meta = lease.setdefault("metadata", {})
        if not meta.get("ownerReferences"):
            meta["ownerReferences"] = [await self._node_owner_reference()]
        return lease

    async def _node_owner_reference(self) -> Obj:
        try:
            node = await self._api.get(NODES, self._node, request_timeout=REQUEST_TIMEOUT)
        except ApiError as e:
            self._log.v(2).info("Cannot set the Node as lease owner yet", error=str(e))
            raise
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "name": self._node,
            "uid": node["metadata"]["uid"],
        }

    def _renewed(self, lease: Obj) -> None:
        self._log.v(4).info("Lease renewed", renew_time=lease.get("spec", {}).get("renewTime"))
        if self._on_renewed is not None:
            self._on_renewed(lease)

    async def _repeated_failure(self) -> None:
        if self._on_repeated_failure is not None:
            await self._on_repeated_failure()

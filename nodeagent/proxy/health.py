"""The proxy's health as kube-proxy reports it; pure (the clock is injected).

:class:`ProxyHealth` is kube-proxy's ``ProxyHealthServer`` state: the proxy is healthy unless a
change queued for one IP family has waited longer than ``health_timeout`` (kube-proxy: twice
``syncPeriod``) for a successful sync; it is healthy while starting. The node is *eligible*
unless its Node is being deleted, is gone, or carries the cluster autoscaler's
``ToBeDeletedByClusterAutoscaler`` taint: ``/healthz`` answers 503 then (so load balancers
drain the node), ``/livez`` does not look at the node.

The bodies are kube-proxy's ``ProxyHealth`` as Go's ``json.Marshal`` writes it (compact, keys
in struct order, times RFC 3339 with nanoseconds trimmed)::

    {"lastUpdated":"...","currentTime":"...","nodeEligible":true,"healthy":true,
     "status":{"IPv4":{"lastUpdated":"...","healthy":true}}}

``lastUpdated`` is the latest successful sync of any family, or now when the answer is 200;
``status`` has one entry per family synced at least once (left out before the first);
``/livez`` has no ``nodeEligible``.

:func:`service_health_body` is the per-Service health check (``healthCheckNodePort``): 200
when the Service has ready endpoints on this node and the proxy is healthy, else 503, with the
JSON kube-proxy writes (tab-indented).
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Callable, Mapping
from typing import Any

from nodeagent.proxy.model import IP_FAMILY_NAMES

TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
_ZERO = "0001-01-01T00:00:00Z"


def go_json_time(moment: dt.datetime | None) -> str:
    """A ``time.Time`` as Go's ``MarshalJSON`` writes it (RFC 3339, fraction without trailing
    zeros; ``Z`` for UTC); None is Go's zero time."""
    if moment is None:
        return _ZERO
    u = moment.astimezone(dt.UTC)
    text = u.strftime("%Y-%m-%dT%H:%M:%S")
    if u.microsecond:
        text += f".{u.microsecond:06d}".rstrip("0")
    return text + "Z"


class ProxyHealth:
    def __init__(
        self,
        *,
        now: Callable[[], dt.datetime],
        monotonic: Callable[[], float] = time.monotonic,
        health_timeout: float = 60.0,
    ) -> None:
        self._now = now
        self._monotonic = monotonic
        self.health_timeout = health_timeout
        self._last_updated: dict[str, dt.datetime] = {}
        self._oldest_queued: dict[str, float] = {}
        self.node_eligible = True  # eligible while starting, until the Node says otherwise

    def queued(self, family: str) -> None:
        """A change for ``family`` arrived and waits for a sync."""
        self._oldest_queued.setdefault(family, self._monotonic())

    def updated(self, family: str) -> None:
        """``family``'s rules were synced successfully."""
        self._oldest_queued.pop(family, None)
        self._last_updated[family] = self._now()

    def sync_node(self, node: Mapping[str, Any] | None) -> None:
        """Eligibility from the Node: not deleted, not being deleted, not tainted for deletion
        by the cluster autoscaler."""
        if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
            self.node_eligible = False
            return
        taints = (node.get("spec") or {}).get("taints") or []
        self.node_eligible = not any(t.get("key") == TO_BE_DELETED_TAINT for t in taints)

    def _families(self) -> dict[str, bool]:
        """Healthy per family synced at least once: kube-proxy only judges those."""
        now = self._monotonic()
        return {
            family: (queued := self._oldest_queued.get(family)) is None
            or now - queued < self.health_timeout
            for family in self._last_updated
        }

    def is_healthy(self) -> bool:
        return all(self._families().values())

    def _body(self, eligible: bool | None) -> tuple[int, str]:
        families = self._families()
        healthy = all(families.values())
        ok = healthy and eligible is not False
        now = self._now()
        last = max(self._last_updated.values(), default=None)
        body: dict[str, Any] = {
            "lastUpdated": go_json_time(now if ok else last),
            "currentTime": go_json_time(now),
        }
        if eligible is not None:
            body["nodeEligible"] = eligible
        body["healthy"] = healthy
        if families:
            body["status"] = {
                IP_FAMILY_NAMES.get(f, f): {
                    "lastUpdated": go_json_time(self._last_updated[f]),
                    "healthy": good,
                }
                for f, good in sorted(
                    families.items(), key=lambda i: IP_FAMILY_NAMES.get(i[0], i[0])
                )
            }
        return (200 if ok else 503), json.dumps(body, separators=(",", ":"))

    def healthz(self) -> tuple[int, str]:
        """(status, body) of ``/healthz``: the proxy and the node."""
        return self._body(self.node_eligible)

    def livez(self) -> tuple[int, str]:
        """(status, body) of ``/livez``: the proxy alone, whatever the node."""
        return self._body(None)


def service_health_body(namespace: str, name: str, local_endpoints: int, healthy: bool) -> str:
    """The JSON of a Service's health check, as kube-proxy lays it out."""
    return (
        "{\n"
        '\t"service": {\n'
        f'\t\t"namespace": {json.dumps(namespace)},\n'
        f'\t\t"name": {json.dumps(name)}\n'
        "\t},\n"
        f'\t"localEndpoints": {local_endpoints},\n'
        f'\t"serviceProxyHealthy": {str(healthy).lower()}\n'
        "}"
    )

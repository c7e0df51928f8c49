"""The proxy's health as kube-proxy reports it; pure (the clock is injected).

:class:`ProxyHealth` is kube-proxy's ``ProxyHealthServer`` state: the proxy is healthy unless a
change queued for one IP family has waited longer than ``health_timeout`` (kube-proxy: twice
``syncPeriod``) for a successful sync; it is healthy while starting. The node is *eligible*
unless its Node is being deleted, is gone, or carries the cluster autoscaler's
``ToBeDeletedByClusterAutoscaler`` taint: ``/healthz`` answers 503 then (so load balancers
drain the node), ``/livez`` does not look at the node.

The bodies are kube-proxy's, byte for byte: ``/healthz``
``{"lastUpdated": "<Go time>","currentTime": "<Go time>", "nodeEligible": true}``, ``/livez``
the same without ``nodeEligible``; times are Go's ``time.Time.String()`` (with the monotonic
``m=+`` reading, as kube-proxy prints them). A healthy answer reports ``lastUpdated`` as now.

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

TO_BE_DELETED_TAINT = "ToBeDeletedByClusterAutoscaler"
_ZERO = "0001-01-01 00:00:00 +0000 UTC"
_PROCESS_START = time.monotonic()


def go_time(moment: dt.datetime | None, monotonic: float | None = None) -> str:
    """``time.Time.String()``: ``2006-01-02 15:04:05.999999999 -0700 MST`` in UTC, fraction
    without trailing zeros, then `` m=+<seconds>`` when the time has a monotonic reading."""
    if moment is None:
        return _ZERO
    u = moment.astimezone(dt.UTC)
    text = u.strftime("%Y-%m-%d %H:%M:%S")
    if u.microsecond:
        text += f".{u.microsecond:06d}".rstrip("0")
    text += " +0000 UTC"
    if monotonic is not None:
        text += f" m=+{monotonic - _PROCESS_START:.9f}"
    return text


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
        self._last_updated: dict[str, tuple[dt.datetime, float]] = {}
        self._oldest_queued: dict[str, float] = {}
        self.node_eligible = True  # eligible while starting, until the Node says otherwise

    def queued(self, family: str) -> None:
        """A change for ``family`` arrived and waits for a sync."""
        self._oldest_queued.setdefault(family, self._monotonic())

    def updated(self, family: str) -> None:
        """``family``'s rules were synced successfully."""
        self._oldest_queued.pop(family, None)
        self._last_updated[family] = (self._now(), self._monotonic())

    def sync_node(self, node: Mapping[str, Any] | None) -> None:
        """Eligibility from the Node: not deleted, not being deleted, not tainted for deletion
        by the cluster autoscaler."""
        if node is None or (node.get("metadata") or {}).get("deletionTimestamp"):
            self.node_eligible = False
            return
        taints = (node.get("spec") or {}).get("taints") or []
        self.node_eligible = not any(t.get("key") == TO_BE_DELETED_TAINT for t in taints)

    def is_healthy(self) -> tuple[bool, tuple[dt.datetime, float] | None]:
        """Healthy, and the latest successful sync (None before the first)."""
        now = self._monotonic()
        latest: tuple[dt.datetime, float] | None = None
        for family, updated in self._last_updated.items():
            if latest is None or updated[0] > latest[0]:
                latest = updated
            queued = self._oldest_queued.get(family)
            if queued is not None and now - queued >= self.health_timeout:
                return False, updated
        return True, latest

    def healthz(self) -> tuple[int, str]:
        """(status, body) of ``/healthz``."""
        eligible = self.node_eligible
        healthy, last = self.is_healthy()
        current = go_time(self._now(), self._monotonic())
        ok = healthy and eligible
        shown = current if ok else go_time(*last) if last else _ZERO
        body = (
            f'{{"lastUpdated": {json.dumps(shown)},"currentTime": {json.dumps(current)},'
            f' "nodeEligible": {str(eligible).lower()}}}'
        )
        return (200 if ok else 503), body

    def livez(self) -> tuple[int, str]:
        """(status, body) of ``/livez``: the proxy alone, whatever the node."""
        healthy, last = self.is_healthy()
        current = go_time(self._now(), self._monotonic())
        shown = current if healthy else go_time(*last) if last else _ZERO
        body = f'{{"lastUpdated": {json.dumps(shown)},"currentTime": {json.dumps(current)}}}'
        return (200 if healthy else 503), body


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

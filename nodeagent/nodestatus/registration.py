"""Self-registration: create the Node the kubelet would, or adopt and reconcile an existing one.

``initial_node`` is the kubelet's ``initialNode`` (labels, attach-detach annotation, taints, and
the status setters already applied). :class:`Registrar` retries ``POST /api/v1/nodes`` after
100ms, 200ms, ... capped at 7s. When the Node already exists (409 AlreadyExists, or 403 as since
1.32) it GETs it, reconciles the attach-detach annotation and the default labels (hostname,
os, arch, their beta twins, topology and instance-type keys), patches if anything changed, and
is done. Registration happens once; a Node deleted later is not recreated (as the kubelet:
kubernetes/kubernetes#116485) until the agent restarts.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from typing import Final

from nodeagent.apiserver import (
    NODES,
    AlreadyExists,
    Api,
    ApiError,
    Backoff,
    Forbidden,
    Obj,
    PatchType,
)
from nodeagent.apiserver.patch import NODE_SCHEMA, two_way_strategic_patch
from nodeagent.log import Logger, get_logger
from nodeagent.nodestatus.compute import Computed, NodeFacts, compute_node
from nodeagent.nodestatus.setters import Event
from nodeagent.nodestatus.settings import NodeSettings

ATTACH_DETACH_ANNOTATION: Final = "volumes.kubernetes.io/controller-managed-attach-detach"
UNSCHEDULABLE_TAINT: Final = {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
DEFAULT_LABELS: Final = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "node.kubernetes.io/windows-build",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
)
REQUEST_TIMEOUT: Final = 10.0


def initial_node(s: NodeSettings, facts: NodeFacts) -> Computed:
    os_name, arch = facts.host.operating_system, facts.host.architecture
    labels = {
        "kubernetes.io/hostname": s.hostname,
        "kubernetes.io/os": os_name,
        "kubernetes.io/arch": arch,
        "beta.kubernetes.io/os": os_name,
        "beta.kubernetes.io/arch": arch,
        **s.node_labels,
    }
    meta: Obj = {"name": s.node_name, "labels": labels}
    if s.controller_attach_detach:
        meta["annotations"] = {ATTACH_DETACH_ANNOTATION: "true"}
    taints = [{k: v for k, v in t.items() if v} for t in s.register_with_taints]
    spec: Obj = {}
    if not s.register_schedulable:
        spec["unschedulable"] = True
        if not any(t.get("key") == UNSCHEDULABLE_TAINT["key"] for t in taints):
            taints.append(dict(UNSCHEDULABLE_TAINT))
    if taints:
        spec["taints"] = taints
    if s.provider_id:
        spec["providerID"] = s.provider_id
    node: Obj = {"apiVersion": "v1", "kind": "Node", "metadata": meta, "spec": spec}
    return compute_node(node, facts, s)


def reconcile_existing(existing: Obj, initial: Obj) -> Obj | None:
    """The existing Node with our annotation and default labels, or None if nothing changes."""
    node = copy.deepcopy(existing)
    meta = node.setdefault("metadata", {})
    want_meta = initial.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    want_cmad = (want_meta.get("annotations") or {}).get(ATTACH_DETACH_ANNOTATION)
    if want_cmad and annotations.get(ATTACH_DETACH_ANNOTATION) != want_cmad:
        annotations[ATTACH_DETACH_ANNOTATION] = want_cmad
    elif not want_cmad:
        annotations.pop(ATTACH_DETACH_ANNOTATION, None)
    if annotations or "annotations" in meta:
        meta["annotations"] = annotations
    labels = meta.setdefault("labels", {})
    want_labels = want_meta.get("labels") or {}
    for key in DEFAULT_LABELS:
        if key in want_labels and labels.get(key) != want_labels[key]:
            if want_labels[key]:
                labels[key] = want_labels[key]
            else:
                labels.pop(key, None)
    return node if node != existing else None


class Registrar:
    def __init__(
        self,
        *,
        api: Api,
        settings: NodeSettings,
        facts: Callable[[], Awaitable[NodeFacts]],
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._s = settings
        self._facts = facts
        self._log = (log or get_logger("nodestatus")).bind(node=settings.node_name)

    async def register(self) -> tuple[Obj, list[Event]]:
        """Loop until the Node is registered; return it and the events its creation calls for."""
        backoff = Backoff(initial=0.1, cap=7.0)
        for key in self._s.node_labels:
            if key in DEFAULT_LABELS:
                self._log.info("The node label will overwrite default setting", label=key)
        while True:
            await asyncio.sleep(backoff.next())
            computed = initial_node(self._s, await self._facts())
            outcome = await self._try_register(computed.node)
            if outcome is not None:
                node, created = outcome
                return node, (computed.events if created else [])

    async def _try_register(self, node: Obj) -> tuple[Obj, bool] | None:
        name = self._s.node_name
        try:
            created = await self._api.create(NODES, node, request_timeout=REQUEST_TIMEOUT)
        except (AlreadyExists, Forbidden) as e:
            self._log.v(2).info("Node exists or may not be created; adopting it", error=str(e))
        except ApiError as e:
            self._log.error("Unable to register node with API server", error=str(e))
            return None
        else:
            self._log.info("Successfully registered node")
            return created, True
        try:
            existing = await self._api.get(NODES, name, request_timeout=REQUEST_TIMEOUT)
        except ApiError as e:
            self._log.error(
                "Unable to register node with API server, error getting existing node", error=str(e)
            )
            return None
        updated = reconcile_existing(existing, node)
        if updated is not None:
            patch = two_way_strategic_patch(existing, updated, schema=NODE_SCHEMA)
            try:
                existing = await self._api.patch(
                    NODES,
                    name,
                    patch,
                    subresource="status",
                    patch_type=PatchType.STRATEGIC,
                    request_timeout=REQUEST_TIMEOUT,
                )
            except ApiError as e:
                self._log.error(
                    "Unable to reconcile node with API server, error updating node", error=str(e)
                )
                return None
        self._log.info("Node was previously registered")
        return existing, False

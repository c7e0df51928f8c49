"""This node's CSI facts in the API, as the kubelet's ``nodeinfomanager`` writes them.

- The ``CSINode`` named after the node, owned by the Node (a CSINode of an earlier Node of the
  same name is deleted and made anew), with the ``storage.alpha.kubernetes.io/migrated-plugins``
  annotation (the seven in-tree plugins the kubelet of this version migrates to CSI), created
  at start even with no driver (:meth:`NodeInfoManager.initialize`);
- per registered driver: its entry in ``spec.drivers`` (``nodeID``, sorted ``topologyKeys``,
  ``allocatable.count`` when the driver gives a maximum), the Node's
  ``csi.volume.kubernetes.io/nodeid`` annotation (a JSON map driver -> node ID) and the driver's
  topology segments as Node labels (a label already there with another value is an error: the
  kubelet's ``detected topology value collision``).

Every write is retried with the kubelet's back-off (``updateBackoff``: 500 ms, doubling, 6
steps) on a conflict or a failure; the last error is raised as ``ValueError``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

from nodeagent.apiserver import NODES, Api, ApiError, NotFound, Obj, PatchType, Resource
from nodeagent.log import Logger, get_logger

CSINODES: Final = Resource("storage.k8s.io", "v1", "csinodes", "CSINode", namespaced=False)
NODE_ID_ANNOTATION: Final = "csi.volume.kubernetes.io/nodeid"
MIGRATED_PLUGINS_ANNOTATION: Final = "storage.alpha.kubernetes.io/migrated-plugins"
MIGRATED_PLUGINS: Final = ",".join(
    sorted(
        (
            "kubernetes.io/gce-pd",
            "kubernetes.io/aws-ebs",
            "kubernetes.io/cinder",
            "kubernetes.io/azure-disk",
            "kubernetes.io/azure-file",
            "kubernetes.io/vsphere-volume",
            "kubernetes.io/portworx-volume",
        )
    )
)
BACKOFF_START: Final = 0.5
BACKOFF_STEPS: Final = 6
MAX_INT32: Final = 2**31 - 1


def driver_entry(name: str, node_id: str, max_volumes: int, topology: Mapping[str, str]) -> Obj:
    entry: Obj = {"name": name, "nodeID": node_id, "topologyKeys": sorted(topology)}
    if max_volumes > 0:
        entry["allocatable"] = {"count": min(max_volumes, MAX_INT32)}
    return entry


def with_driver(csinode: Obj, entry: Obj) -> Obj | None:
    """``csinode`` with ``entry`` in place of the driver's old one; None when nothing
    changes."""
    spec = csinode.setdefault("spec", {})
    drivers = [d for d in spec.get("drivers") or [] if d.get("name") != entry["name"]]
    old = next((d for d in spec.get("drivers") or [] if d.get("name") == entry["name"]), None)
    annotated = _annotate(csinode)
    if old is not None and not annotated and _same(old, entry):
        return None
    spec["drivers"] = [*drivers, entry]
    return csinode


def _same(old: Obj, new: Obj) -> bool:
    return (
        old.get("nodeID") == new["nodeID"]
        and sorted(old.get("topologyKeys") or []) == new["topologyKeys"]
        and (old.get("allocatable") or {}).get("count")
        == (new.get("allocatable") or {}).get("count")
    )


def _annotate(csinode: Obj) -> bool:
    """Set the migrated-plugins annotation; True when it changed."""
    annotations = csinode.setdefault("metadata", {}).setdefault("annotations", {}) or {}
    csinode["metadata"]["annotations"] = annotations
    if annotations.get(MIGRATED_PLUGINS_ANNOTATION) == MIGRATED_PLUGINS:
        return False
    annotations[MIGRATED_PLUGINS_ANNOTATION] = MIGRATED_PLUGINS
    return True


def node_patch(
    node: Obj, name: str, node_id: str | None, topology: Mapping[str, str]
) -> Obj | None:
    """The metadata patch that records (``node_id`` None: removes) a driver's node ID and
    topology labels on the Node; None when the Node has them already. Raises ``ValueError``
    on a topology label collision."""
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for key, value in topology.items():
        if key in labels and labels[key] != value:
            raise ValueError(
                f'detected topology value collision: driver reported "{key}":"{value}" but '
                f'existing label is "{key}":"{labels[key]}"'
            )
    try:
        ids = json.loads((meta.get("annotations") or {}).get(NODE_ID_ANNOTATION) or "{}")
    except ValueError:
        ids = {}
    if not isinstance(ids, dict):
        ids = {}
    wanted = dict(ids)
    if node_id is None:
        wanted.pop(name, None)
    else:
        wanted[name] = node_id
    patch: dict[str, Any] = {}
    if wanted != ids:
        text = json.dumps(wanted, sort_keys=True, separators=(",", ":")) if wanted else None
        patch["annotations"] = {NODE_ID_ANNOTATION: text}
    new_labels = {k: v for k, v in topology.items() if labels.get(k) != v}
    if new_labels:
        patch["labels"] = new_labels
    return {"metadata": patch} if patch else None


class NodeInfoManager:
    def __init__(
        self,
        *,
        api: Api,
        node_name: str,
        sleep: Callable[[float], Any] = asyncio.sleep,
        log: Logger | None = None,
    ) -> None:
        self._api = api
        self._node = node_name
        self._sleep = sleep
        self._log = log or get_logger("csi")
        self._lock = asyncio.Lock()

    async def _retry(self, what: str, attempt: Callable[[], Any]) -> None:
        delay = BACKOFF_START
        last: Exception | None = None
        for step in range(BACKOFF_STEPS):
            try:
                await attempt()
                return
            except (ApiError, ValueError) as e:
                last = e
                self._log.v(2).info(f"Failed to {what}", error=str(e), attempt=step + 1)
            await self._sleep(delay)
            delay *= 2
        raise ValueError(
            f"error updating CSINode: timed out waiting for the condition; caused by: {last}"
        )

    async def initialize(self) -> None:
        """Create (or adopt) the node's CSINode with the migrated-plugins annotation."""
        async with self._lock:
            await self._retry("publish CSINode", self._initialize)

    async def _initialize(self) -> None:
        csinode = await self._current_csinode()
        if _annotate(csinode):
            await self._api.replace(CSINODES, self._node, csinode)

    async def _current_csinode(self) -> Obj:
        node = await self._api.get(NODES, self._node)
        uid = node["metadata"]["uid"]
        try:
            csinode = await self._api.get(CSINODES, self._node)
        except NotFound:
            return await self._create(uid)
        owners = (csinode.get("metadata") or {}).get("ownerReferences") or []
        owner = next((o for o in owners if o.get("kind") == "Node"), None)
        if owner is not None and owner.get("uid") != uid:
            self._log.v(2).info(
                "existing CSINode is owned by a different node, cleaning up",
                csinode=self._node,
                old_node_uid=owner.get("uid"),
                new_node_uid=uid,
            )
            await self._api.delete(CSINODES, self._node)
            return await self._create(uid)
        return csinode

    async def _create(self, uid: str) -> Obj:
        body: Obj = {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "CSINode",
            "metadata": {
                "name": self._node,
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Node", "name": self._node, "uid": uid}
                ],
                "annotations": {MIGRATED_PLUGINS_ANNOTATION: MIGRATED_PLUGINS},
            },
            "spec": {"drivers": []},
        }
        return await self._api.create(CSINODES, body)

    async def install_driver(
        self, name: str, node_id: str, max_volumes: int, topology: dict[str, str]
    ) -> None:
        if not node_id:
            raise ValueError("error adding CSI driver node info: driverNodeID must not be empty")
        async with self._lock:
            try:
                await self._update_node(name, node_id, topology)
            except ApiError as e:
                raise ValueError(
                    f"error updating Node object with CSI driver node info: {e}"
                ) from e

            async def attempt() -> None:
                csinode = await self._current_csinode()
                changed = with_driver(csinode, driver_entry(name, node_id, max_volumes, topology))
                if changed is not None:
                    await self._api.replace(CSINODES, self._node, changed)

            await self._retry("update CSINode", attempt)
        self._log.info(
            "Installed CSI driver on the node",
            driver=name,
            node_id=node_id,
            max_volumes=max_volumes,
        )

    async def _update_node(
        self, name: str, node_id: str | None, topology: Mapping[str, str]
    ) -> None:
        node = await self._api.get(NODES, self._node)
        patch = node_patch(node, name, node_id, topology)
        if patch is not None:
            await self._api.patch(NODES, self._node, patch, patch_type=PatchType.STRATEGIC)

    async def uninstall_driver(self, name: str) -> None:
        async with self._lock:

            async def attempt() -> None:
                try:
                    csinode = await self._api.get(CSINODES, self._node)
                except NotFound:
                    return
                drivers = (csinode.get("spec") or {}).get("drivers") or []
                kept = [d for d in drivers if d.get("name") != name]
                if len(kept) != len(drivers):
                    csinode["spec"]["drivers"] = kept
                    await self._api.replace(CSINODES, self._node, csinode)

            await self._retry("update CSINode", attempt)
            try:
                await self._update_node(name, None, {})
            except ApiError as e:
                raise ValueError(f"error removing the node ID of {name} from the Node: {e}") from e

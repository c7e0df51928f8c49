"""Mirror pods: what to create and delete so the API shows every static pod (pure).

A mirror pod is the static pod's read-only copy in the API: same name and namespace, the
annotation ``kubernetes.io/config.mirror: <config.hash>``, and a controller ownerReference to
this Node (required by the NodeRestriction admission plugin). As the kubelet does
(``pkg/kubelet/pod/mirror_client.go``, ``syncPod``, ``deleteOrphanedMirrorPods``):

- a static pod without a mirror gets one, once the Node exists and is not being deleted;
- a mirror whose hash is not the static pod's (the manifest changed) or that someone deleted
  (``deletionTimestamp`` set) is deleted — grace 0, with its UID as precondition — and
  recreated afterwards;
- a mirror whose static pod is gone is deleted, once that pod has finished terminating;
- an API pod that merely has a static pod's name but no mirror annotation is left alone.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from nodeagent.podspec import MIRROR_POD_ANNOTATION
from nodeagent.staticpods.manifest import CONFIG_HASH_ANNOTATION

Obj = Mapping[str, Any]
_SERVER_FIELDS: Final = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
    "selfLink",
)


@dataclass(frozen=True, slots=True)
class MirrorRef:
    namespace: str
    name: str
    uid: str
    reason: str


@dataclass(frozen=True, slots=True)
class MirrorPlan:
    delete: tuple[MirrorRef, ...] = ()
    create: tuple[Obj, ...] = ()
    waiting: bool = False
    """Something is left for later that no store change will announce: the Node is missing,
    or a static pod is still terminating."""


def _meta(obj: Obj) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _key(obj: Obj) -> tuple[str, str]:
    meta = _meta(obj)
    return (str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def config_hash(obj: Obj) -> str:
    return str((_meta(obj).get("annotations") or {}).get(CONFIG_HASH_ANNOTATION, ""))


def mirror_hash(obj: Obj) -> str | None:
    """The ``config.mirror`` annotation of a mirror pod; None for any other pod."""
    value = (_meta(obj).get("annotations") or {}).get(MIRROR_POD_ANNOTATION)
    return None if value is None else str(value)


def mirror_pods(api_pods: Iterable[Obj]) -> dict[tuple[str, str], Obj]:
    return {_key(p): p for p in api_pods if mirror_hash(p) is not None}


def plan_mirror_pods(
    statics: Iterable[Obj],
    api_pods: Iterable[Obj],
    *,
    node_ready: bool,
    terminating: Callable[[str], bool] = lambda uid: False,
) -> MirrorPlan:
    """``statics``: the file source's pods; ``api_pods``: the pods bound to this node in the
    API; ``node_ready``: the Node exists and is not being deleted; ``terminating(uid)``: the
    static pod ``uid`` is still being stopped."""
    wanted = {_key(p): p for p in statics}
    mirrors = mirror_pods(api_pods)
    delete: list[MirrorRef] = []
    create: list[Obj] = []
    waiting = False
    for key, mirror in mirrors.items():
        meta, hash_ = _meta(mirror), mirror_hash(mirror) or ""
        static = wanted.get(key)
        if static is None:
            if terminating(hash_):
                waiting = True
                continue
            reason = "its static pod is gone"
        elif meta.get("deletionTimestamp"):
            reason = "it is being deleted"
        elif hash_ != config_hash(static):
            reason = "its static pod changed"
        else:
            continue
        delete.append(MirrorRef(key[0], key[1], str(meta.get("uid") or ""), reason))
    for key, static in wanted.items():
        if key in mirrors:
            continue  # fine, or deleted above and recreated once the API shows it gone
        if not node_ready:
            waiting = True
            continue
        create.append(static)
    return MirrorPlan(delete=tuple(delete), create=tuple(create), waiting=waiting)


def mirror_pod_body(static: Obj, *, node_name: str, node_uid: str) -> dict[str, Any]:
    """The object to create for ``static``: a copy with the mirror annotation and the Node
    as controller owner; no status, no server-set metadata."""
    body = {k: copy.deepcopy(v) for k, v in static.items() if k != "status"}
    meta = {k: v for k, v in body.get("metadata", {}).items() if k not in _SERVER_FIELDS}
    meta["annotations"] = {
        **(meta.get("annotations") or {}),
        MIRROR_POD_ANNOTATION: config_hash(static),
    }
    meta["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid, "controller": True}
    ]
    body["metadata"] = meta
    return body


class MirrorIndex:
    """Which API pod mirrors a static pod, read from the API pods store (``items()``)."""

    def __init__(self, *, api_pods: Callable[[], Iterable[Obj]]) -> None:
        self._api_pods = api_pods

    def mirror(self, static_uid: str, *, namespace: str, name: str) -> Obj | None:
        """The live mirror pod of static pod ``static_uid`` named ``namespace/name``."""
        for pod in self._api_pods():
            if (
                mirror_hash(pod) == static_uid
                and _key(pod) == (namespace, name)
                and not _meta(pod).get("deletionTimestamp")
            ):
                return pod
        return None

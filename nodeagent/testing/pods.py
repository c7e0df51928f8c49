"""Pod objects for tests: the JSON the apiserver would serve, and its decoded form.

``pod_object(name, containers=[container("app", command=["sleep", "3600"])])`` builds a
scheduled pod with the apiserver's defaults; ``pod(...)`` decodes it.
"""

from __future__ import annotations

import uuid
from typing import Any

from nodeagent.podspec import Pod, decode_pod

BUSYBOX = "localhost/busybox:latest"


def container(
    name: str,
    *,
    image: str = BUSYBOX,
    command: list[str] | None = None,
    args: list[str] | None = None,
    requests: dict[str, str] | None = None,
    limits: dict[str, str] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent"}
    if command is not None:
        body["command"] = command
    if args is not None:
        body["args"] = args
    if requests or limits:
        body["resources"] = {
            **({"requests": requests} if requests else {}),
            **({"limits": limits} if limits else {}),
        }
    body.update(extra)
    return body


def pod_object(
    name: str = "web",
    *,
    namespace: str = "default",
    uid: str | None = None,
    node: str = "node-a",
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    restart_policy: str = "Always",
    grace: int = 30,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    deleted: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or str(uuid.uuid4()),
            "labels": labels or {"app": name},
            "annotations": annotations or {},
        },
        "spec": {
            "nodeName": node,
            "containers": containers or [container("app", command=["sleep", "3600"])],
            "restartPolicy": restart_policy,
            "terminationGracePeriodSeconds": grace,
            "dnsPolicy": "ClusterFirst",
            **spec,
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        },
    }
    if init_containers:
        body["spec"]["initContainers"] = init_containers
    if deleted:
        body["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
        body["metadata"]["deletionGracePeriodSeconds"] = grace
    return body


def pod(name: str = "web", **kw: Any) -> Pod:
    return decode_pod(pod_object(name, **kw))


class MemoryFiles:
    """The pod files (log directories, container log symlinks) in a dict, without threads."""

    def __init__(self) -> None:
        self.dirs: set[str] = set()
        self.links: dict[str, str] = {}
        self.files: dict[str, bytes] = {}
        self.modes: dict[str, int] = {}

    async def ensure_dir(self, path: str) -> None:
        self.dirs.add(path)

    async def link(self, target: str, link: str) -> None:
        self.links[link] = target

    async def unlink(self, path: str) -> None:
        self.links.pop(path, None)
        self.files.pop(path, None)

    async def remove_tree(self, path: str) -> None:
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(path + "/")}
        self.files = {f: b for f, b in self.files.items() if not f.startswith(path + "/")}

    async def create_file(self, path: str, mode: int) -> None:
        self.files[path] = b""
        self.modes[path] = mode

    async def read_tail(self, path: str, limit: int) -> bytes | None:
        data = self.files.get(path)
        return None if data is None else data[-limit:]

    async def read_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return self.files[path]

    async def write_file(self, path: str, data: bytes, mode: int) -> None:
        self.files[path] = data
        self.modes[path] = mode

    async def remove_links_to(self, directory: str, target_prefix: str) -> None:
        self.links = {
            link: target
            for link, target in self.links.items()
            if not (link.startswith(directory + "/") and target.startswith(target_prefix))
        }

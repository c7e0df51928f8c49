"""What a request to the kubelet API asks for, in authorization terms (pure).

The kubelet authorizes every request on the Node object: resource ``nodes``, name the node,
the verb from the HTTP method and a subresource from the path. With fine-grained kubelet
authorization (``KubeletFineGrainedAuthz``, on by default since 1.33) ``/pods``, ``/healthz``,
``/configz`` and ``/statusz`` are first checked on their own subresource, then on ``proxy``;
``/stats``, ``/metrics``, ``/logs`` and ``/checkpoint`` have their own; everything else
(exec, attach, portForward, containerLogs, ...) is ``proxy``. The verb follows the method
only: a WebSocket upgrade is a GET, so ``get nodes/proxy`` allows a WebSocket exec, exactly as
on the kubelet (documented upstream; SPDY upgrades are POSTs and need ``create``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

_VERBS: Final = {
    "POST": "create",
    "GET": "get",
    "HEAD": "get",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

# Checked first when fine-grained authorization is on, then ``proxy``.
_FINE_GRAINED: Final = (
    ("/pods", "pods"),
    ("/healthz", "healthz"),
    ("/configz", "configz"),
    ("/statusz", "statusz"),
    ("/runningpods", "pods"),
)
# Their own subresource, no fallback.
_OWN: Final = (
    ("/stats", "stats"),
    ("/metrics", "metrics"),
    ("/logs", "log"),
    ("/checkpoint", "checkpoint"),
)


@dataclass(frozen=True, slots=True)
class Attributes:
    """One SubjectAccessReview's resource attributes."""

    verb: str
    subresource: str
    name: str
    path: str
    resource: str = "nodes"
    api_version: str = "v1"


def api_verb(method: str) -> str:
    """The API verb of an HTTP method; "" for the others (as the kubelet)."""
    return _VERBS.get(method.upper(), "")


def is_subpath(path: str, prefix: str) -> bool:
    """``path`` is ``prefix`` or below it (``/statsx`` is not below ``/stats``)."""
    prefix = prefix.removesuffix("/")
    return path == prefix or (path.startswith(prefix) and path[len(prefix)] == "/")


def request_attributes(
    method: str, path: str, node_name: str, *, fine_grained: bool = True
) -> list[Attributes]:
    """The attributes to authorize, in order: the request is allowed if any one is."""
    subresources: list[str] = []
    if fine_grained:
        for prefix, sub in _FINE_GRAINED:
            if is_subpath(path, prefix):
                subresources.append(sub)
                break
    for prefix, sub in _OWN:
        if is_subpath(path, prefix):
            subresources.append(sub)
            break
    else:
        subresources.append("proxy")
    verb = api_verb(method)
    return [Attributes(verb=verb, subresource=s, name=node_name, path=path) for s in subresources]

"""What a request to the kubelet API asks for, in authorization terms (pure).

The kubelet authorizes every request on the Node object: resource ``nodes``, name the node,
the verb from the HTTP method and a subresource from the path. With fine-grained kubelet
authorization (``KubeletFineGrainedAuthz``, on by default since 1.33) ``/pods``, ``/healthz``,
``/configz`` and ``/statusz`` are first checked on their own subresource, then on ``proxy``;
``/stats``, ``/metrics``, ``/logs`` and ``/checkpoint`` have their own; everything else
(exec, attach, portForward, containerLogs, ...) is ``proxy``.

On the kubelet the verb follows the method only: a WebSocket upgrade is a GET, so
``get nodes/proxy`` (a grant common in monitoring charts) runs commands as root in any
container of the node through a WebSocket exec, where SPDY (a POST) needs ``create``. By
default (``node.streamingAuthorization: Create``) the streaming endpoints, which run
commands or open connections (``/exec``, ``/attach``, ``/run``, ``/portForward``), are
authorized as ``create`` whatever the transport; ``HTTPMethod`` restores the kubelet's mapping.
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


STREAMING: Final = ("/exec", "/attach", "/run", "/portForward")
"""Endpoints that act in a container (run a command, attach, open a connection): ``create``
whatever the HTTP method, unless the kubelet's mapping is asked for."""


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
    method: str,
    path: str,
    node_name: str,
    *,
    fine_grained: bool = True,
    streaming_create: bool = True,
) -> list[Attributes]:
    """The attributes to authorize, in order: the request is allowed if any one is.
    ``streaming_create``: the :data:`STREAMING` endpoints need ``create`` whatever the method
    (False: the verb follows the method, as on the kubelet)."""
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
    if streaming_create and any(is_subpath(path, p) for p in STREAMING):
        verb = "create"
    return [Attributes(verb=verb, subresource=s, name=node_name, path=path) for s in subresources]

"""The kube-apiserver boundary: client, kubeconfig, typed errors, patches and a watch cache.

Managers depend on the :class:`Api` protocol; ``ApiClient`` is the real implementation and
``nodeagent.testing.fake_apiserver.FakeApiServer`` the in-memory one.
"""

from nodeagent.apiserver.backoff import Backoff, jittered
from nodeagent.apiserver.cache import WatchCache
from nodeagent.apiserver.client import ApiClient
from nodeagent.apiserver.errors import (
    AlreadyExists,
    ApiError,
    BadRequest,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    ServerError,
    Timeout,
    TooManyRequests,
    TransportError,
    Unauthorized,
)
from nodeagent.apiserver.interface import Api, ObjectList, WatchEvent
from nodeagent.apiserver.kubeconfig import Endpoint, load_kubeconfig, render_kubeconfig
from nodeagent.apiserver.patch import PatchType
from nodeagent.apiserver.resources import (
    CONFIGMAPS,
    CSRS,
    EVENTS,
    LEASES,
    NODES,
    PODS,
    SECRETS,
    SERVICES,
    Obj,
    Resource,
)

__all__ = [
    "CONFIGMAPS",
    "CSRS",
    "EVENTS",
    "LEASES",
    "NODES",
    "PODS",
    "SECRETS",
    "SERVICES",
    "AlreadyExists",
    "Api",
    "ApiClient",
    "ApiError",
    "Backoff",
    "BadRequest",
    "Conflict",
    "Endpoint",
    "Forbidden",
    "Gone",
    "Invalid",
    "NotFound",
    "Obj",
    "ObjectList",
    "PatchType",
    "Resource",
    "ServerError",
    "Timeout",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "WatchCache",
    "WatchEvent",
    "jittered",
    "load_kubeconfig",
    "render_kubeconfig",
]

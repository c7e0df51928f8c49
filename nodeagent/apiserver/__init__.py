"""The kube-apiserver boundary: client, kubeconfig, typed errors, patches and a watch cache.

Managers depend on the :class:`Api` protocol; ``ApiClient`` is the real implementation and
``nodeagent.testing.fake_apiserver.FakeApiServer`` the in-memory one.

In: the kubeconfig, or the credentials the certificate manager issues (swapped live). Out: one
HTTP/1.1 connection per watch and a keep-alive pool for requests, nothing multiplexed (on one
HTTP/2 connection a watch event waited up to a minute behind another stream: see
:mod:`.client`); :class:`WatchCache` list-and-watch caches that managers share by name
(``cache:node``, ``cache:pods``, ``cache:services``, ``cache:endpointslices``), which come
back as soon as any call gets an answer after an outage rather than when their back-off ends
(:mod:`.reachability`).
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

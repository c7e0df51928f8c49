"""The ConfigMaps and Secrets pods read, one manager each, used by both the containers'
environments and the volumes (the kubelet's ``pkg/kubelet/configmap`` and
``pkg/kubelet/secret``): see :mod:`.manager` for the cache strategy and the registration of
pods.
"""

from __future__ import annotations

from nodeagent.apiserver import CONFIGMAPS, SECRETS, Api
from nodeagent.clock import Clock
from nodeagent.objectmanager.manager import OBJECT_TTL, ObjectManager
from nodeagent.podspec import config_map_names, secret_names

__all__ = ["OBJECT_TTL", "ObjectManager", "config_map_manager", "secret_manager"]


def config_map_manager(*, api: Api | None, clock: Clock, ttl: float = OBJECT_TTL) -> ObjectManager:
    return ObjectManager(
        resource=CONFIGMAPS, api=api, clock=clock, referenced=config_map_names, ttl=ttl
    )


def secret_manager(*, api: Api | None, clock: Clock, ttl: float = OBJECT_TTL) -> ObjectManager:
    return ObjectManager(resource=SECRETS, api=api, clock=clock, referenced=secret_names, ttl=ttl)

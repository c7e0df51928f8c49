"""What a pod's containers' environment is made from (:class:`EnvInputs`): the ConfigMaps
and Secrets the containers' ``env``/``envFrom`` name, read through the node's ConfigMap and
Secret managers (:mod:`nodeagent.objectmanager`, shared with the volumes) when a container is
to start (never by a sync that starts nothing); the Services of every namespace for the
``*_SERVICE_HOST`` variables, from a cache; the node's IPs and allocatable from callables.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final, Protocol

from nodeagent.apiserver import Api
from nodeagent.clock import RealClock
from nodeagent.kuberuntime.env import EnvInputs, service_env
from nodeagent.objectmanager import ObjectManager, config_map_manager, secret_manager
from nodeagent.podspec import Pod, referenced_objects

SERVICES_FIRST_LIST_WAIT: Final = 5.0


class EnvSource(Protocol):
    async def inputs(self, pod: Pod) -> EnvInputs: ...


class ApiEnvSource:
    """ConfigMaps and Secrets a pod's environment reads, through their managers when needed;
    Services from a cache; the node's IPs and allocatable from callables."""

    def __init__(
        self,
        *,
        api: Api,
        host_ips: Callable[[], tuple[str, ...]],
        allocatable: Callable[[], Mapping[str, str]],
        services: Callable[[], Sequence[Mapping[str, Any]]] = list,
        services_synced: Callable[[], bool] = lambda: True,
        wait_services: Callable[[], Awaitable[None]] | None = None,
        config_maps: ObjectManager | None = None,
        secrets: ObjectManager | None = None,
    ) -> None:
        """``config_maps``, ``secrets``: the node's managers (without them, managers of its
        own over ``api`` with no pod registered: every object is fetched when read)."""
        self._config_maps = config_maps or config_map_manager(api=api, clock=RealClock())
        self._secrets = secrets or secret_manager(api=api, clock=RealClock())
        self._host_ips = host_ips
        self._allocatable = allocatable
        self._services = services
        self._services_synced = services_synced
        self._wait_services = wait_services

    async def _data(
        self, manager: ObjectManager, namespace: str, name: str
    ) -> dict[str, str] | None:
        obj = await manager.get(namespace, name)
        if obj is None:
            return None
        data = {str(k): str(v) for k, v in (obj.get("data") or {}).items()}
        if manager is self._secrets:
            try:
                data = {k: base64.b64decode(v).decode() for k, v in data.items()}
            except (binascii.Error, UnicodeDecodeError):
                data = {}
        return data

    async def inputs(self, pod: Pod) -> EnvInputs:
        config_map_names, secret_names = referenced_objects(pod)
        config_maps = {
            n: await self._data(self._config_maps, pod.namespace, n) for n in config_map_names
        }
        secrets = {n: await self._data(self._secrets, pod.namespace, n) for n in secret_names}
        links = pod.spec.enable_service_links is not False
        # As the kubelet: a static pod never waits for the Service list (it must run while
        # the API server is unreachable, e.g. the API server's own static pod).
        must_sync = not pod.is_static
        if must_sync and not self._services_synced() and self._wait_services is not None:
            # Just after start the first Service list is usually a moment away: wait for it
            # briefly rather than refuse the container (and retry it 10 s later).
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wait_services(), SERVICES_FIRST_LIST_WAIT)
        return EnvInputs(
            host_ips=self._host_ips(),
            node_allocatable=dict(self._allocatable()),
            service_env=service_env(
                self._services(), namespace=pod.namespace, enable_service_links=links
            ),
            services_synced=self._services_synced() or not must_sync,
            config_maps=config_maps,
            secrets=secrets,
        )

"""The content of configMap, secret, downwardAPI and projected volumes.

The volume manager owns the directories and mounts; for each pod sync it calls
``set_up(pod, volume, target)`` on the :class:`ContentSource` with ``target`` an existing
directory (tmpfs already mounted for secret and projected volumes). ``set_up`` fetches what the
volume references (ConfigMaps and Secrets through their managers,
:mod:`nodeagent.objectmanager`, with the pod registered; service-account tokens through the
TokenRequest API), computes the payload (pure, :mod:`.payloads`) and projects it with the
kubelet's atomic writer (:mod:`.writer`, in a worker thread), which writes nothing when nothing
changed; with the pod's ``fsGroup`` the files are that group's and group-readable, as the
kubelet's ownership change inside the writer (so the token file is 0640, not 0600). A failure
raises :class:`VolumeSetupError` whose ``message`` is the kubelet's text after
``MountVolume.SetUp failed for volume "x" : ``. ``forget(pod_uid)`` unregisters a pod that is
gone and drops its tokens.

ConfigMaps and Secrets are read through their managers (a per-object 60 s cache, the kubelet's
``Cache`` strategy, not ``Watch``); service-account tokens by TokenRequest (``boundObjectRef``
the Pod), refreshed at 80 % of their lifetime or after 24 h. The writer swaps ``..data`` in one
rename.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from nodeagent.apiserver import Api, ApiError
from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger
from nodeagent.objectmanager import (
    OBJECT_TTL,
    ObjectManager,
    config_map_manager,
    secret_manager,
)
from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.content.errors import VolumeSetupError
from nodeagent.volumemanager.content.objects import decode_config_map, decode_secret
from nodeagent.volumemanager.content.payloads import (
    Fetched,
    FetchError,
    Inputs,
    ObjectData,
    TokenKey,
    references,
    unsupported_projection,
    volume_payload,
)
from nodeagent.volumemanager.content.tokens import TokenManager
from nodeagent.volumemanager.content.writer import InvalidPath, Payload, write_payload

__all__ = ["ApiContentSource", "ContentSource", "VolumeSetupError", "content_source"]

CONTENT_SOURCES = ("configMap", "secret", "downwardAPI", "projected")
"""The volume sources whose content this package writes."""


class ContentSource(Protocol):
    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None: ...

    def forget(self, pod_uid: str) -> None: ...


class ApiContentSource:
    def __init__(
        self,
        *,
        api: Api | None,
        clock: Clock,
        allocatable: Callable[[], Mapping[str, str]] = dict,
        object_ttl: float = OBJECT_TTL,
        tokens: TokenManager | None = None,
        log: Logger | None = None,
        config_maps: ObjectManager | None = None,
        secrets: ObjectManager | None = None,
    ) -> None:
        """``config_maps``, ``secrets``: the node's managers (ones of its own when omitted,
        with ``object_ttl``)."""
        self._clock = clock
        self._allocatable = allocatable
        self._config_maps = config_maps or config_map_manager(api=api, clock=clock, ttl=object_ttl)
        self._secrets = secrets or secret_manager(api=api, clock=clock, ttl=object_ttl)
        self._tokens = tokens or TokenManager(api=api, clock=clock)
        self._log = log or get_logger("volumecontent")
        self._writes: dict[str, asyncio.Future[bool]] = {}

    async def set_up(self, pod: Pod, volume: Volume, target: Path) -> None:
        if volume.source not in CONTENT_SOURCES:
            raise VolumeSetupError(f"volume source {volume.source or 'none'} has no content")
        if name := unsupported_projection(volume):
            raise VolumeSetupError(f"{name} is not supported on this node")
        inputs = await self._inputs(pod, volume)
        payload = volume_payload(pod, volume, inputs)
        context = pod.spec.security_context
        fs_group = context.fs_group if context is not None else None
        try:
            changed = await self._write(target, payload, fs_group)
        except InvalidPath as e:
            raise VolumeSetupError(str(e)) from e
        except OSError as e:
            raise VolumeSetupError(f"writing {e.filename or target}: {e.strerror or e}") from e
        if changed:
            self._log.info(
                "Volume content written",
                pod=f"{pod.namespace}/{pod.name}",
                volume=volume.name,
                files=len(payload),
            )

    async def _write(self, target: Path, payload: Payload, fs_group: int | None) -> bool:
        """Write in a worker thread, one write per target at a time: a write whose caller was
        cancelled runs on in its thread, and the next one for that target waits for it."""
        key = str(target)
        while (previous := self._writes.get(key)) is not None and not previous.done():
            await asyncio.wait([previous])
        write = asyncio.ensure_future(
            asyncio.to_thread(
                write_payload, target, payload, now=self._clock.now(), fs_group=fs_group
            )
        )
        self._writes[key] = write

        def finished(done: asyncio.Future[bool]) -> None:
            if self._writes.get(key) is done:
                del self._writes[key]
            if not done.cancelled():
                done.exception()  # retrieved: a cancelled caller's failure is not "never retrieved"

        write.add_done_callback(finished)
        return await asyncio.shield(write)

    async def _inputs(self, pod: Pod, volume: Volume) -> Inputs:
        refs = references(volume)
        self._config_maps.register_pod(pod)
        self._secrets.register_pod(pod)
        config_maps = {
            name: await _fetch(self._config_maps, pod.namespace, name, decode_config_map)
            for name in sorted(refs.config_maps)
        }
        secrets = {
            name: await _fetch(self._secrets, pod.namespace, name, decode_secret)
            for name in sorted(refs.secrets)
        }
        tokens: dict[TokenKey, bytes | FetchError] = {}
        for audience, seconds in sorted(refs.tokens):
            try:
                tokens[(audience, seconds)] = await self._tokens.token(pod, audience, seconds)
            except VolumeSetupError as e:
                tokens[(audience, seconds)] = FetchError(e.message)
        return Inputs(
            config_maps=config_maps,
            secrets=secrets,
            tokens=tokens,
            allocatable=dict(self._allocatable()),
        )

    def forget(self, pod_uid: str) -> None:
        self._config_maps.unregister_pod(pod_uid)
        self._secrets.unregister_pod(pod_uid)
        self._tokens.forget(pod_uid)


async def _fetch(
    manager: ObjectManager,
    namespace: str,
    name: str,
    decode: Callable[[Mapping[str, object]], ObjectData],
) -> Fetched:
    """The object's data, None when it does not exist, or a :class:`FetchError` with the
    kubelet's words."""
    try:
        obj = await manager.get(namespace, name)
    except ApiError as e:
        return FetchError(e.message)
    return None if obj is None else decode(obj)


def content_source(
    *,
    api: Api | None,
    clock: Clock,
    allocatable: Callable[[], Mapping[str, str]] = dict,
    object_ttl: float = OBJECT_TTL,
    config_maps: ObjectManager | None = None,
    secrets: ObjectManager | None = None,
) -> ContentSource:
    """The real content source: objects and tokens from ``api`` (None: a node without an
    apiserver, where only downwardAPI volumes can be filled); ConfigMaps and Secrets through
    the node's managers when given."""
    return ApiContentSource(
        api=api,
        clock=clock,
        allocatable=allocatable,
        object_ttl=object_ttl,
        config_maps=config_maps,
        secrets=secrets,
    )

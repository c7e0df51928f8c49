"""The content of configMap, secret, downwardAPI and projected volumes.

The volume manager owns the directories and mounts; for each pod sync it calls
``set_up(pod, volume, target)`` on the :class:`ContentSource` with ``target`` an existing
directory (tmpfs already mounted for secret and projected volumes). ``set_up`` fetches what the
volume references (ConfigMaps and Secrets through a per-object TTL cache, service-account tokens
through the TokenRequest API), computes the payload (pure, :mod:`.payloads`) and projects it
with the kubelet's atomic writer (:mod:`.writer`, in a worker thread), which writes nothing when
nothing changed; with the pod's ``fsGroup`` the files are that group's and group-readable, as
the kubelet's ownership change inside the writer (so the token file is 0640, not 0600).
A failure raises :class:`VolumeSetupError` whose ``message`` is the kubelet's
text after ``MountVolume.SetUp failed for volume "x" : `` (``configmap "y" not found``,
``failed to fetch token: ...``). ``forget(pod_uid)`` drops what was cached for a pod that is
gone.

ConfigMaps and Secrets are read by GET through a per-object 60 s cache (the kubelet's ``Cache``
strategy, not ``Watch``); service-account tokens by TokenRequest (``boundObjectRef`` the Pod),
refreshed at 80 % of their lifetime or after 24 h. The writer swaps ``..data`` in one rename.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from nodeagent.apiserver import Api
from nodeagent.clock import Clock
from nodeagent.log import Logger, get_logger
from nodeagent.podspec import Pod, Volume
from nodeagent.volumemanager.content.errors import VolumeSetupError
from nodeagent.volumemanager.content.objects import OBJECT_TTL, ObjectCache
from nodeagent.volumemanager.content.payloads import (
    FetchError,
    Inputs,
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
    ) -> None:
        self._clock = clock
        self._allocatable = allocatable
        self._objects = ObjectCache(api=api, clock=clock, ttl=object_ttl)
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
        ns = pod.namespace
        config_maps = {
            name: await self._objects.get(pod.uid, "configmap", ns, name)
            for name in sorted(refs.config_maps)
        }
        secrets = {
            name: await self._objects.get(pod.uid, "secret", ns, name)
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
        self._objects.release(pod_uid)
        self._tokens.forget(pod_uid)


def content_source(
    *,
    api: Api | None,
    clock: Clock,
    allocatable: Callable[[], Mapping[str, str]] = dict,
    object_ttl: float = OBJECT_TTL,
) -> ContentSource:
    """The real content source: objects and tokens from ``api`` (None: a node without an
    apiserver, where only downwardAPI volumes can be filled)."""
    return ApiContentSource(api=api, clock=clock, allocatable=allocatable, object_ttl=object_ttl)

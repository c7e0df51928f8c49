"""The API of a standalone node: there is none.

Without credentials the agent runs the kubelet's standalone mode: static pods only. The pod
managers still take an :class:`~nodeagent.apiserver.Api`; :class:`NoApiServer` answers every
call with a ``TransportError`` that says why (a static pod that reads a ConfigMap or a Secret
fails to start with that message). Status patches of static pods never reach it: they wait
for a mirror pod that a standalone node never creates.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Final, NoReturn

from nodeagent.apiserver import ObjectList, PatchType, TransportError, WatchEvent
from nodeagent.apiserver.resources import Obj, Resource

MESSAGE: Final = "no API server: the node runs standalone (no kubeconfig)"


def _refuse(verb: str, res: Resource) -> NoReturn:
    raise TransportError(MESSAGE, verb=verb, path=res.plural)


class NoApiServer:
    async def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        _refuse("GET", res)

    async def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        _refuse("POST", res)

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        _refuse("PUT", res)

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: object,
        *,
        patch_type: PatchType = PatchType.STRATEGIC,
        namespace: str | None = None,
        subresource: str | None = None,
        field_manager: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj:
        _refuse("PATCH", res)

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> None:
        _refuse("DELETE", res)

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> ObjectList:
        _refuse("LIST", res)

    async def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]:
        events: tuple[WatchEvent, ...] = ()
        for event in events:  # an async generator, as the protocol's watch is
            yield event
        _refuse("WATCH", res)

    async def answered_again(self) -> None:
        await asyncio.Event().wait()  # there is no server to answer, ever

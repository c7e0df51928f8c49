"""The API boundary managers depend on: :class:`Api` (implemented by ``ApiClient`` and by
``nodeagent.testing.fake_apiserver.FakeApiServer``), watch events and list results."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Protocol

from nodeagent.apiserver.patch import PatchType
from nodeagent.apiserver.resources import Obj, Resource


@dataclass(frozen=True, slots=True)
class WatchEvent:
    type: str
    """ADDED, MODIFIED, DELETED or BOOKMARK (a bookmark's object carries only metadata)."""
    object: Obj

    @property
    def resource_version(self) -> str:
        return str((self.object.get("metadata") or {}).get("resourceVersion", ""))


@dataclass(frozen=True, slots=True)
class ObjectList:
    items: list[Obj]
    resource_version: str


class Api(Protocol):
    async def get(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj: ...

    async def create(
        self,
        res: Resource,
        body: Obj,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj: ...

    async def replace(
        self,
        res: Resource,
        name: str,
        body: Obj,
        *,
        namespace: str | None = None,
        subresource: str | None = None,
        request_timeout: float | None = None,
    ) -> Obj: ...

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
    ) -> Obj: ...

    async def delete(
        self,
        res: Resource,
        name: str,
        *,
        namespace: str | None = None,
        request_timeout: float | None = None,
    ) -> None: ...

    async def list(
        self,
        res: Resource,
        *,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        request_timeout: float | None = None,
    ) -> ObjectList: ...

    def watch(
        self,
        res: Resource,
        *,
        resource_version: str,
        namespace: str | None = None,
        field_selector: str | None = None,
        label_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncGenerator[WatchEvent, None]: ...

    async def answered_again(self) -> None:
        """Return once the server answers a call after calls failed to reach it (the next such
        change; it may never come)."""
        ...

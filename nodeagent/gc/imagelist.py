"""The runtime's image list, refreshed every 30 seconds for the node status ``images``
(the kubelet's image manager cache, which ``GetImageList`` reads).

:meth:`images` is cheap and never does I/O: the status setter reads it on every status sync.
It is None until the first listing succeeds; a failed listing keeps the previous list.
"""

from __future__ import annotations

import asyncio
from typing import Final

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.service import ImageService
from nodeagent.log import Logger, get_logger

IMAGE_LIST_PERIOD: Final = 30.0


class ImageList:
    def __init__(
        self,
        *,
        images: ImageService,
        period: float = IMAGE_LIST_PERIOD,
        log: Logger | None = None,
    ) -> None:
        self._service = images
        self._period = period
        self._log = log or get_logger("gc.images")
        self._images: list[cri.Image] | None = None

    @property
    def name(self) -> str:
        return "images"

    def images(self) -> list[cri.Image] | None:
        return self._images

    async def refresh(self) -> None:
        self._images = await self._service.list_images()

    async def run(self) -> None:
        last_error = ""
        while True:
            try:
                await self.refresh()
                last_error = ""
            except CriError as e:
                if str(e) != last_error:
                    self._log.error("Failed to update image list", error=str(e))
                    last_error = str(e)
            await asyncio.sleep(self._period)

"""Pulling one image through the CRI with the credentials found for it, as the kubelet's image
pullers and ``kubeGenericRuntimeManager.PullImage``.

``serializeImagePulls`` (default true) lets one pull run at a time; with it false,
``maxParallelImagePulls`` bounds how many run at once (unset: no bound). ``registryPullQPS`` and
``registryBurst`` bound how many start per second (a token bucket, full at start, as the
kubelet's ``throttleImagePulling``): a pull over it fails at once with ``pull QPS exceeded``.
Each credential is tried in order until one pulls the image; without any the pull is anonymous.
When every credential fails, the error lists each failure (``[e1, e2]``, Go's aggregate error).
A pull still running is logged at ``-v=2`` every ``progress_every`` seconds (the CRI tells
nothing of its bytes: the log says which image, for whom, and for how long), so a slow registry
is seen. Credentials are sent in the CRI ``AuthConfig`` and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nodeagent.clock import TokenBucket
from nodeagent.credentialprovider import TrackedAuthConfig
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.service import ImageService
from nodeagent.log import Logger, get_logger
from nodeagent.tasks import cancel_and_wait

PROGRESS_EVERY: Final = 10.0
QPS_EXCEEDED: Final = "pull QPS exceeded"


class PullFailed(Exception):
    """Every credential failed; ``text`` is the CRI's message(s) as the kubelet reports them."""

    def __init__(self, text: str, errors: Sequence[CriError]) -> None:
        super().__init__(text)
        self.text = text
        self.errors = tuple(errors)


@dataclass(frozen=True, slots=True)
class Pulled:
    image_ref: str
    credential: TrackedAuthConfig | None
    seconds: float
    """How long the pull itself took (not counting the wait for a pull slot)."""


def to_cri_auth(tracked: TrackedAuthConfig) -> cri.AuthConfig:
    a = tracked.auth
    return cri.AuthConfig(
        username=a.username,
        password=a.password,
        auth=a.auth,
        server_address=a.server_address,
        identity_token=a.identity_token,
        registry_token=a.registry_token,
    )


def parallel_limit(serialize: bool, max_parallel: int | None) -> int | None:
    """How many pulls may run at once: 1 when serialized, else the max (None: no bound)."""
    if serialize:
        return 1
    return max_parallel if max_parallel is not None and max_parallel >= 1 else None


class ImagePuller:
    def __init__(
        self,
        *,
        images: ImageService,
        monotonic: Callable[[], float],
        limit: int | None = 1,
        qps: int = 0,
        burst: int = 0,
        progress_every: float = PROGRESS_EVERY,
        log: Logger | None = None,
    ) -> None:
        """``qps``: pulls started per second (0: no limit), ``burst`` above it."""
        self._images = images
        self._monotonic = monotonic
        self._slots = asyncio.Semaphore(limit) if limit is not None else None
        self._bucket = TokenBucket(burst=burst, refill=1 / qps) if qps > 0 else None
        self._progress_every = progress_every
        self._log = log or get_logger("kuberuntime")

    async def pull(
        self,
        spec: cri.ImageSpec,
        credentials: Sequence[TrackedAuthConfig],
        sandbox_config: cri.PodSandboxConfig | None,
        *,
        pod: str = "",
    ) -> Pulled:
        """Pull ``spec`` with each credential in turn; raises :class:`PullFailed`."""
        async with self._slots if self._slots is not None else contextlib.nullcontext():
            if self._bucket is not None and not self._bucket.take(self._monotonic()):
                raise PullFailed(QPS_EXCEEDED, [])
            started = self._monotonic()
            # The progress logger lives exactly as long as the pull: cancelled and awaited
            # here whatever the pull's outcome.
            progress = asyncio.create_task(self._progress(spec.image, pod, started))
            try:
                ref, used = await self._pull(spec, credentials, sandbox_config)
            finally:
                await cancel_and_wait(progress)
            return Pulled(image_ref=ref, credential=used, seconds=self._monotonic() - started)

    async def _pull(
        self,
        spec: cri.ImageSpec,
        credentials: Sequence[TrackedAuthConfig],
        sandbox_config: cri.PodSandboxConfig | None,
    ) -> tuple[str, TrackedAuthConfig | None]:
        if not credentials:
            self._log.v(3).info("Pulling image without credentials", image=spec.image)
            try:
                return await self._images.pull_image(spec, sandbox_config=sandbox_config), None
            except CriError as e:
                raise PullFailed(e.status_text, [e]) from e
        errors: list[CriError] = []
        for tracked in credentials:
            try:
                ref = await self._images.pull_image(
                    spec, auth=to_cri_auth(tracked), sandbox_config=sandbox_config
                )
            except CriError as e:
                errors.append(e)
                continue
            return ref, tracked
        texts = [e.status_text for e in errors]
        text = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
        raise PullFailed(text, errors)

    async def _progress(self, image: str, pod: str, started: float) -> None:
        while True:
            await asyncio.sleep(self._progress_every)
            self._log.v(2).info(
                "Image pull in progress",
                image=image,
                pod=pod,
                elapsed=f"{self._monotonic() - started:.0f}s",
            )

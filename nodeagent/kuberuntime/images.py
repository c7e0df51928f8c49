"""Image presence for a container, as the kubelet's ``EnsureImageExists``.

``imagePullPolicy`` decides: ``Never`` uses a present image or fails with
``ErrImageNeverPull``; ``IfNotPresent`` pulls when absent; ``Always`` pulls every time. A failed
pull gives ``ErrImagePull`` with the runtime's message and starts a back-off (10s doubling to
300s per pod and image); while it lasts the container waits with ``ImagePullBackOff``, whose
message carries the failed pull's error as the kubelet 1.36 reports it
(``Back-off pulling image "<image>": ErrImagePull: rpc error: ...``; the ``BackOff`` event
keeps the short ``Back-off pulling image "<image>"``).

Events as the kubelet's image manager records them, about the container (``Pulling``,
``Pulled``, ``Failed``, ``BackOff``, ``ErrImageNeverPull``, ``InspectFailed``). ``Pulled``
after a pull gives its duration and the image's size. A present image gives the message of the
kubelet without ``KubeletEnsureSecretPulledImages`` (pull credentials are not re-verified).

The ``ImageStatus`` read on the way also says who the image runs as (``uid`` / ``username``):
:meth:`ImageManager.user_of` gives it for ``runAsNonRoot``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from nodeagent.gotext import MILLISECOND, duration_seconds
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.backoff import Backoff, image_key
from nodeagent.kuberuntime.container import ROOT, ImageUser
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.imageref import parse_image_ref
from nodeagent.kuberuntime.results import (
    ERR_IMAGE_NEVER_PULL,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    INVALID_IMAGE_NAME,
    ContainerFailure,
    SyncResult,
)
from nodeagent.kuberuntime.service import ImageService
from nodeagent.podspec import Container, Pod

PULL_FAILURE_RESYNC: Final = 1.0
IMAGE_INSPECT_ERROR: Final = "ImageInspectError"


def image_user(image: cri.Image) -> ImageUser:
    """The user of a CRI image: its numeric ``uid`` when set, else its ``username``."""
    if image.HasField("uid"):
        return ImageUser(uid=int(image.uid.value))
    return ImageUser(username=image.username) if image.username else ROOT


class ImageFailure(Exception):
    def __init__(self, failure: ContainerFailure, retry_in: float | None = None) -> None:
        super().__init__(failure.message)
        self.failure = failure
        self.retry_in = retry_in


class ImageManager:
    def __init__(
        self, *, images: ImageService, backoff: Backoff, monotonic: Callable[[], float]
    ) -> None:
        self._images = images
        self._backoff = backoff
        self._monotonic = monotonic
        self._pull_errors: dict[str, str] = {}  # back-off key -> "ErrImagePull: <error>"
        self._users: dict[str, ImageUser] = {}  # image ref -> who it runs as

    def user_of(self, ref: str) -> ImageUser:
        """Who the image ``ensure_image`` returned ``ref`` for runs as; root when its status
        did not say (the kubelet's ``getImageUser``)."""
        return self._users.get(ref, ROOT)

    def forget(self, uid: str) -> None:
        """Drop a deleted pod's pull back-offs and pull errors."""
        prefix = image_key(uid=uid, image="")
        self._backoff.forget(prefix)
        for key in [k for k in self._pull_errors if k.startswith(prefix)]:
            del self._pull_errors[key]

    async def ensure_image(
        self,
        pod: Pod,
        container: Container,
        sandbox_config: cri.PodSandboxConfig,
        result: SyncResult,
    ) -> str:
        """The image id to create ``container`` from; raises ImageFailure."""
        image = container.image

        def event(type_: str, reason: str, message: str) -> None:
            result.event(type_, reason, message, container=container.name)

        try:
            parse_image_ref(image)
        except ValueError as e:
            message = f'Failed to apply default image tag "{image}": {e}'
            event("Warning", "InspectFailed", message)
            raise ImageFailure(ContainerFailure(INVALID_IMAGE_NAME, message)) from e
        try:
            status = await self._images.image_status(image)
        except CriError as e:
            message = f'Failed to inspect image "{image}": {e.status_text}'
            event("Warning", "InspectFailed", message)
            raise ImageFailure(ContainerFailure(IMAGE_INSPECT_ERROR, message)) from e
        present = status.image.id if status.HasField("image") else ""
        if present:
            self._users[present] = image_user(status.image)
        policy = container.pull_policy
        if policy == "Never" or (policy == "IfNotPresent" and present):
            if present:
                event("Normal", "Pulled", f'Container image "{image}" already present on machine')
                return present
            message = f'Container image "{image}" is not present with pull policy of Never'
            event("Warning", "ErrImageNeverPull", message)
            raise ImageFailure(ContainerFailure(ERR_IMAGE_NEVER_PULL, message))
        key = image_key(uid=pod.uid, image=image)
        wait = self._backoff.remaining_since_update(key)
        if wait > 0:
            message = f'Back-off pulling image "{image}"'
            event("Normal", "BackOff", message)
            if previous := self._pull_errors.get(key):
                message = f"{message}: {previous}"
            raise ImageFailure(ContainerFailure(IMAGE_PULL_BACK_OFF, message), retry_in=wait)
        self._pull_errors.pop(key, None)
        event("Normal", "Pulling", f'Pulling image "{image}"')
        started = self._monotonic()
        try:
            ref = await self._images.pull_image(image, sandbox_config=sandbox_config)
        except CriError as e:
            self._backoff.next(key, self._backoff.now())
            event("Warning", "Failed", f'Failed to pull image "{image}": {e.status_text}')
            failure = ContainerFailure(ERR_IMAGE_PULL, e.status_text)
            self._pull_errors[key] = f"{ERR_IMAGE_PULL}: {e.status_text}"
            # Sync again shortly: the container then waits with ImagePullBackOff until the
            # back-off expires, as the kubelet's next sync reports it.
            raise ImageFailure(failure, retry_in=PULL_FAILURE_RESYNC) from e
        took = duration_seconds(self._monotonic() - started, truncate_to=MILLISECOND)
        size = await self._size(image, ref)
        event(
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {took} ({took} including waiting).'
            f" Image size: {size} bytes.",
        )
        self._backoff.gc()
        return ref

    async def _size(self, image: str, ref: str) -> int:
        """The pulled image's size, best effort (the kubelet's ``GetImageSize``); notes its
        user on the way."""
        try:
            status = await self._images.image_status(image)
        except CriError:
            return 0
        if not status.HasField("image"):
            return 0
        self._users[ref] = image_user(status.image)
        return int(status.image.size)

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
after a pull gives its duration and the image's size.

Credentials (``credentials``: the pod's pull secrets, then the credential provider plugins)
are looked up once per image and only when needed, and tried in order (``puller``). With
``KubeletEnsureSecretPulledImages`` (``pull_manager``), a present image serves a pod only as
the pull records allow ("already present on machine and can be accessed by the pod"); else the
pod pulls it with its own credentials, and with ``imagePullPolicy: Never`` gets
``ErrImageNeverPull`` exactly as if the image were absent (its presence is not revealed).
A pull secret that does not parse fails the container with its error, as the kubelet's
lookup error does.

The ``ImageStatus`` read on the way also says who the image runs as (``uid`` / ``username``):
:meth:`ImageManager.user_of` gives it for ``runAsNonRoot``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Final

from nodeagent.credentialprovider import DockerConfigError, PullSecret, TrackedAuthConfig
from nodeagent.credentialprovider.plugin import PodIdentity
from nodeagent.gotext import MILLISECOND, duration_seconds
from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.backoff import Backoff, image_key
from nodeagent.kuberuntime.container import ROOT, ImageUser
from nodeagent.kuberuntime.credentials import ImageCredentials, pod_credentials
from nodeagent.kuberuntime.errors import CriError
from nodeagent.kuberuntime.imageref import parse_image_ref
from nodeagent.kuberuntime.puller import ImagePuller, Pulled, PullFailed
from nodeagent.kuberuntime.pullmanager import PullManager
from nodeagent.kuberuntime.pullrecords import PullCredentials, SecretRef, ServiceAccountRef
from nodeagent.kuberuntime.results import (
    ERR_IMAGE_NEVER_PULL,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    INVALID_IMAGE_NAME,
    ContainerFailure,
    SyncResult,
)
from nodeagent.kuberuntime.service import ImageService
from nodeagent.podspec import Pod

PULL_FAILURE_RESYNC: Final = 1.0
IMAGE_INSPECT_ERROR: Final = "ImageInspectError"

SecretsLoader = Callable[[], Awaitable[Sequence[PullSecret]]]


async def no_secrets() -> Sequence[PullSecret]:
    return ()


def once(loader: SecretsLoader) -> SecretsLoader:
    """``loader`` asked at most once (a sync's containers share the secrets it read)."""
    got: list[Sequence[PullSecret]] = []

    async def load() -> Sequence[PullSecret]:
        if not got:
            got.append(await loader())
        return got[0]

    return load


def pod_identity(pod: Pod) -> PodIdentity:
    return PodIdentity(
        namespace=pod.namespace,
        name=pod.name,
        uid=pod.uid,
        service_account=pod.spec.service_account_name,
    )


def record_credentials(used: TrackedAuthConfig | None) -> PullCredentials:
    """What the pull record keeps of the credential that pulled an image (the kubelet's
    ``trackedToImagePullCreds``): none or the node's -> any pod of the node may use it."""
    source = used.source if used is not None else None
    if used is None or source is None:
        return PullCredentials(node_pods_accessible=True)
    if source.secret is not None:
        s = source.secret
        return PullCredentials(secrets=(SecretRef(s.namespace, s.name, s.uid, used.hash),))
    if source.service_account is not None:
        a = source.service_account
        return PullCredentials(service_accounts=(ServiceAccountRef(a.namespace, a.name, a.uid),))
    return PullCredentials()


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


@dataclass(frozen=True, slots=True)
class ImageOptions:
    """How images are pulled: ``parallel`` pulls at once (None: no bound; the kubelet's
    ``serializeImagePulls``/``maxParallelImagePulls``), ``qps`` started per second with
    ``burst`` (``registryPullQPS``/``registryBurst``; 0: no limit), where credentials come from,
    the pull records (None: ``KubeletEnsureSecretPulledImages`` off), and whether plugins learn
    the pod and its service account (``KubeletServiceAccountTokenForCredentialProviders``)."""

    parallel: int | None = 1
    qps: int = 0
    burst: int = 0
    credentials: ImageCredentials | None = None
    pull_manager: PullManager | None = None
    pod_identities: bool = True


class ImageManager:
    def __init__(
        self,
        *,
        images: ImageService,
        backoff: Backoff,
        monotonic: Callable[[], float],
        options: ImageOptions | None = None,
    ) -> None:
        options = options or ImageOptions()
        self._images = images
        self._backoff = backoff
        self._monotonic = monotonic
        self._puller = ImagePuller(
            images=images,
            monotonic=monotonic,
            limit=options.parallel,
            qps=options.qps,
            burst=options.burst,
        )
        self._credentials = options.credentials or ImageCredentials()
        self._pull_manager = options.pull_manager
        self._records_ready = options.pull_manager is None
        self._pod_identities = options.pod_identities
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
        image: str,
        policy: str,
        sandbox_config: cri.PodSandboxConfig,
        result: SyncResult,
        *,
        secrets: SecretsLoader = no_secrets,
        container: str = "",
    ) -> str:
        """The image id to run ``image`` from for ``pod``; raises ImageFailure. Events are
        about ``container`` (the pod itself when empty: an image volume)."""

        def event(type_: str, reason: str, message: str) -> None:
            result.event(type_, reason, message, container=container)

        if not self._records_ready:
            await self._initialize_records()
        try:
            parse_image_ref(image)
        except ValueError as e:
            message = f'Failed to apply default image tag "{image}": {e}'
            event("Warning", "InspectFailed", message)
            raise ImageFailure(ContainerFailure(INVALID_IMAGE_NAME, message)) from e
        present = ""
        if policy != "Always":
            try:
                status = await self._images.image_status(image)
            except CriError as e:
                message = f'Failed to inspect image "{image}": {e.status_text}'
                event("Warning", "InspectFailed", message)
                raise ImageFailure(ContainerFailure(IMAGE_INSPECT_ERROR, message)) from e
            present = status.image.id if status.HasField("image") else ""
            if present:
                self._users[present] = image_user(status.image)
        if policy == "Never" and not present:
            raise self._never_pull(image, event)
        found: list[list[TrackedAuthConfig]] = []

        async def lookup() -> list[TrackedAuthConfig]:
            if not found:
                identity = pod_identity(pod) if self._pod_identities else None
                found.append(await self._credentials.lookup(image, await secrets(), identity))
            return found[0]

        try:
            if present:
                if self._pull_manager is None:
                    event(
                        "Normal", "Pulled", f'Container image "{image}" already present on machine'
                    )
                    return present

                async def creds() -> tuple[list[SecretRef], ServiceAccountRef | None]:
                    return pod_credentials(await lookup())

                if not await self._pull_manager.must_attempt_pull(image, present, creds):
                    event(
                        "Normal",
                        "Pulled",
                        f'Container image "{image}" already present on machine and can be '
                        "accessed by the pod",
                    )
                    return present
                if policy == "Never":
                    # Present, but not for this pod: as if it were absent.
                    raise self._never_pull(image, event)
            credentials = await lookup()
        except DockerConfigError as e:
            text = str(e)
            raise ImageFailure(ContainerFailure(text, text)) from e
        return await self._pull(pod, image, credentials, sandbox_config, event)

    async def _initialize_records(self) -> None:
        """Once, before the first image: the pull intents a previous run left behind whose
        image is now present become pulled records (the kubelet's ``initialize``)."""
        if self._pull_manager is None:
            return
        try:
            listed = await self._images.list_images()
        except CriError:
            return  # tried again before the next image
        present = [(i.id, (*i.repo_tags, *i.repo_digests)) for i in listed]
        self._pull_manager.initialize(present)
        self._records_ready = True

    def _never_pull(self, image: str, event: Callable[[str, str, str], None]) -> ImageFailure:
        message = f'Container image "{image}" is not present with pull policy of Never'
        event("Warning", "ErrImageNeverPull", message)
        return ImageFailure(ContainerFailure(ERR_IMAGE_NEVER_PULL, message))

    async def _pull(
        self,
        pod: Pod,
        image: str,
        credentials: Sequence[TrackedAuthConfig],
        sandbox_config: cri.PodSandboxConfig,
        event: Callable[[str, str, str], None],
    ) -> str:
        key = image_key(uid=pod.uid, image=image)
        wait = self._backoff.remaining_since_update(key)
        if wait > 0:
            message = f'Back-off pulling image "{image}"'
            event("Normal", "BackOff", message)
            if previous := self._pull_errors.get(key):
                message = f"{message}: {previous}"
            raise ImageFailure(ContainerFailure(IMAGE_PULL_BACK_OFF, message), retry_in=wait)
        self._pull_errors.pop(key, None)
        records = self._pull_manager
        if records is not None:
            try:
                records.record_pull_intent(image)
            except OSError as e:
                text = (
                    f'Failed to record image pull intent for container image "{image}": '
                    f"failed to record image pull intent: {e}"
                )
                raise ImageFailure(ContainerFailure(text, text)) from e
        event("Normal", "Pulling", f'Pulling image "{image}"')
        started = self._monotonic()
        spec = cri.ImageSpec(image=image, annotations=dict(pod.metadata.annotations))
        try:
            pulled: Pulled = await self._puller.pull(
                spec, credentials, sandbox_config, pod=f"{pod.namespace}/{pod.name}"
            )
        except PullFailed as e:
            if records is not None:
                records.record_pull_failed(image)
            self._backoff.next(key, self._backoff.now())
            event("Warning", "Failed", f'Failed to pull image "{image}": {e.text}')
            failure = ContainerFailure(ERR_IMAGE_PULL, e.text)
            self._pull_errors[key] = f"{ERR_IMAGE_PULL}: {e.text}"
            # Sync again shortly: the container then waits with ImagePullBackOff until the
            # back-off expires, as the kubelet's next sync reports it.
            raise ImageFailure(failure, retry_in=PULL_FAILURE_RESYNC) from e
        except BaseException:
            if records is not None:
                records.record_pull_failed(image)
            raise
        if records is not None:
            records.record_pulled(image, pulled.image_ref, record_credentials(pulled.credential))
        took = duration_seconds(pulled.seconds, truncate_to=MILLISECOND)
        waited = duration_seconds(self._monotonic() - started, truncate_to=MILLISECOND)
        size = await self._size(image, pulled.image_ref)
        event(
            "Normal",
            "Pulled",
            f'Successfully pulled image "{image}" in {took} ({waited} including waiting).'
            f" Image size: {size} bytes.",
        )
        self._backoff.gc()
        return pulled.image_ref

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

"""Image volumes (``volumes[].image``), as the kubelet's ``getImageVolumes``: before the
containers of a sync start, each image volume's image is made present like a container's
(pull policy, pull secrets, back-off, pull records; Events about the pod), and a container
that mounts it gets a CRI ``Mount`` whose ``image`` names the pulled image (read-only, no host
path): the runtime mounts the image. A container mounting a volume whose pull failed fails with
that error, the others start.

The runtime must implement ``Mount.image`` (containerd 2.1 and later, CRI-O 1.31 and later);
containerd 1.x does not know the field and refuses the container with its own error, which the
container's ``CreateContainerError`` shows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.images import ImageFailure, ImageManager, SecretsLoader
from nodeagent.kuberuntime.results import SyncResult
from nodeagent.podspec import Container, Pod, VolumeMount

ImageVolumes = Mapping[str, "str | ImageFailure"]
"""Volume name -> the image ID pulled for it, or why it could not be."""


async def pull_image_volumes(
    images: ImageManager,
    pod: Pod,
    sandbox_config: cri.PodSandboxConfig,
    result: SyncResult,
    secrets: SecretsLoader,
) -> dict[str, str | ImageFailure]:
    pulled: dict[str, str | ImageFailure] = {}
    for volume in pod.spec.volumes:
        if volume.image is None:
            continue
        try:
            pulled[volume.name] = await images.ensure_image(
                pod,
                volume.image.reference,
                volume.image.policy,
                sandbox_config,
                result,
                secrets=secrets,
            )
        except ImageFailure as e:
            pulled[volume.name] = e
    return pulled


def split_image_mounts(
    container: Container, pulled: ImageVolumes | None
) -> tuple[Container, list[VolumeMount], ImageFailure | None]:
    """``container`` without its image volume mounts (the volume manager mounts the rest),
    those mounts, and the pull failure of the first whose image is missing."""
    if not pulled:
        return container, [], None
    mounts = [m for m in container.volume_mounts if m.name in pulled]
    for mount in mounts:
        found = pulled[mount.name]
        if isinstance(found, ImageFailure):
            return container, mounts, found
    if mounts:
        rest = tuple(m for m in container.volume_mounts if m.name not in pulled)
        container = msgspec.structs.replace(container, volume_mounts=rest)
    return container, mounts, None


def image_volume_mounts(
    mounts: Sequence[VolumeMount], pulled: ImageVolumes, pod: Pod
) -> list[cri.Mount]:
    """The CRI mounts of a container's image volume mounts (all pulled)."""
    references = {v.name: v.image.reference for v in pod.spec.volumes if v.image is not None}
    out = []
    for mount in mounts:
        ref = pulled[mount.name]
        assert isinstance(ref, str)
        out.append(
            cri.Mount(
                container_path=mount.mount_path,
                readonly=True,
                image=cri.ImageSpec(
                    image=ref,
                    user_specified_image=references.get(mount.name, ""),
                    annotations=dict(pod.metadata.annotations),
                ),
                image_sub_path=mount.sub_path,
            )
        )
    return out


async def prepare_images(
    images: ImageManager,
    pod: Pod,
    container: Container,
    *,
    sandbox_config: cri.PodSandboxConfig,
    result: SyncResult,
    secrets: SecretsLoader,
    image_volumes: ImageVolumes | None,
) -> tuple[str, Container, list[VolumeMount]] | None:
    """The container's image, the container without its image volume mounts, and those
    mounts; None (the failure recorded, with the ``Failed`` Event) when an image is
    missing."""
    try:
        image_ref = await images.ensure_image(
            pod,
            container.image,
            container.pull_policy,
            sandbox_config,
            result,
            secrets=secrets,
            container=container.name,
        )
    except ImageFailure as e:
        failure, text = e, e.failure.reason
    else:
        stripped, image_mounts, missing = split_image_mounts(container, image_volumes)
        if missing is None:
            return image_ref, stripped, image_mounts
        failure, text = missing, missing.failure.message
    result.failures[container.name] = failure.failure
    result.event("Warning", "Failed", f"Error: {text}", container=container.name)
    if failure.retry_in is not None:
        result.retry_after(failure.retry_in)
    return None

"""The CRI ``ImageService`` of the fake runtime (:mod:`nodeagent.testing.fake_runtime`): images
present by id, a registry they can be pulled from, ``ImageFsInfo`` over what is present. It
answers as containerd does where callers can tell (a pull of an unknown reference fails with
containerd's words).
"""

from __future__ import annotations

import hashlib

from nodeagent.kuberuntime import types as cri
from nodeagent.kuberuntime.errors import CriError, cri_error
from nodeagent.kuberuntime.imageref import normalize_image_ref

IMAGE_FS_MOUNTPOINT = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"


class FakeImageService:
    """The ImageService half of :class:`~nodeagent.testing.fake_runtime.FakeRuntime`: present
    images by id, and a registry they can be pulled from."""

    def __init__(self, *, endpoint: str) -> None:
        self.endpoint = endpoint
        self.calls: list[str] = []
        self.pulls: list[str] = []
        self.registry: dict[str, int] = {}  # normalised reference -> size in bytes
        self._images: dict[str, cri.Image] = {}

    def _enter(self, rpc: str) -> None:
        self.calls.append(rpc)

    def _error(self, rpc: str, code: str, details: str) -> CriError:
        return cri_error(rpc=rpc, endpoint=self.endpoint, code=code, details=details)

    def publish(self, ref: str, *, size: int = 1_000_000) -> None:
        """Make ``ref`` pullable."""
        self.registry[normalize_image_ref(ref)] = size

    def add_image(self, ref: str, *, size: int = 1_000_000, pinned: bool = False) -> cri.Image:
        """Make ``ref`` present, as if pulled earlier (``pinned`` like the sandbox image)."""
        name = normalize_image_ref(ref)
        digest = "sha256:" + hashlib.sha256(name.encode()).hexdigest()
        repo = name.rsplit(":", 1)[0] if "@" not in name else name.split("@", 1)[0]
        image = cri.Image(
            id="sha256:" + hashlib.sha256(digest.encode()).hexdigest(),
            repo_tags=[] if "@" in name else [name],
            repo_digests=[f"{repo}@{digest}"],
            size=size,
            pinned=pinned,
        )
        self._images[image.id] = image
        return image

    def find_image(self, ref: str) -> cri.Image | None:
        """The present image that ``ref`` (id, tag or digest reference) names."""
        if ref in self._images:
            return self._images[ref]
        try:
            name = normalize_image_ref(ref)
        except ValueError:
            return None
        for image in self._images.values():
            if name in image.repo_tags or name in image.repo_digests:
                return image
        return None

    async def list_images(self, filter: cri.ImageFilter | None = None) -> list[cri.Image]:
        self._enter("ListImages")
        wanted = filter.image.image if filter and filter.image.image else ""
        if wanted:
            found = self.find_image(wanted)
            return [found] if found else []
        return list(self._images.values())

    async def image_status(
        self, image: str | cri.ImageSpec, *, verbose: bool = False
    ) -> cri.ImageStatusResponse:
        self._enter("ImageStatus")
        found = self.find_image(cri.as_image_spec(image).image)
        return cri.ImageStatusResponse(image=found) if found else cri.ImageStatusResponse()

    async def pull_image(
        self,
        image: str | cri.ImageSpec,
        *,
        auth: cri.AuthConfig | None = None,
        sandbox_config: cri.PodSandboxConfig | None = None,
    ) -> str:
        self._enter("PullImage")
        ref = cri.as_image_spec(image).image
        name = normalize_image_ref(ref)
        if name not in self.registry:
            raise self._error(
                "PullImage",
                "NotFound",
                f'failed to pull and unpack image "{name}": failed to resolve reference'
                f' "{name}": {name}: not found',
            )
        self.pulls.append(name)
        return (self.find_image(name) or self.add_image(name, size=self.registry[name])).id

    async def remove_image(self, image: str | cri.ImageSpec) -> None:
        self._enter("RemoveImage")
        found = self.find_image(cri.as_image_spec(image).image)
        if found is not None:
            del self._images[found.id]

    async def image_fs_info(self) -> cri.ImageFsInfoResponse:
        self._enter("ImageFsInfo")
        usage = cri.FilesystemUsage()
        usage.fs_id.mountpoint = IMAGE_FS_MOUNTPOINT
        usage.used_bytes.value = sum(image.size for image in self._images.values())
        usage.inodes_used.value = len(self._images)
        return cri.ImageFsInfoResponse(image_filesystems=[usage])


def image_ref_of(image: cri.Image) -> str:
    """What containerd reports as a container's image_ref: the repo digest, else the id."""
    return image.repo_digests[0] if image.repo_digests else image.id

"""The node status ``images`` list from the runtime's images, as the kubelet's Images setter
builds it: largest first, at most ``nodeStatusMaxImages`` (50; -1 = all), each with its repo
digests then repo tags, at most 5 names. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from nodeagent.kuberuntime import types as cri

MAX_NAMES_PER_IMAGE: Final = 5


def node_images(images: Sequence[cri.Image], *, max_images: int = 50) -> list[dict[str, Any]]:
    ordered = sorted(images, key=lambda image: image.size, reverse=True)
    if max_images >= 0:
        ordered = ordered[:max_images]
    return [
        {
            "names": [*image.repo_digests, *image.repo_tags][:MAX_NAMES_PER_IMAGE],
            "sizeBytes": image.size,
        }
        for image in ordered
    ]
